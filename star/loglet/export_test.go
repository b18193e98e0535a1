package loglet

// WithRenderFault makes rendering fail wherever fail says so (tests of a
// failure after sequencing).
func WithRenderFault(c *Config, fail func(epoch, slot uint64) error) { c.testRender = fail }

// WithFixedDelayCut cuts by the earlier fixed-delay policy (benchmarks set
// it beside the adaptive one).
func WithFixedDelayCut(c *Config) { c.testFixedDelay = true }
