// Package devfaults is the wire shape of a star's dev fault control
// (`star serve --dev-fault-listen`, tests and local experiments only):
// GET, PUT and DELETE /faults answer a Doc; a PUT body is a DocPatch.
package devfaults

// Setting is the injected fault of the metastore or of one bucket.
type Setting struct {
	LatencyMS int64 `json:"latency_ms"`
	Down      bool  `json:"down"`
	// Hang makes a down bucket a black hole: its requests block until
	// their context ends instead of failing at once (buckets only).
	Hang bool `json:"hang,omitempty"`
}

// Doc is the control's state: every bucket the star uses is listed.
type Doc struct {
	Meta    Setting            `json:"meta"`
	Buckets map[string]Setting `json:"buckets"`
}

// Patch is one entry of a PUT body: nil fields stay as they are.
type Patch struct {
	LatencyMS *int64 `json:"latency_ms,omitempty"`
	Down      *bool  `json:"down,omitempty"`
	Hang      *bool  `json:"hang,omitempty"`
}

// DocPatch is a PUT /faults body.
type DocPatch struct {
	Meta    *Patch            `json:"meta,omitempty"`
	Buckets map[string]*Patch `json:"buckets,omitempty"`
}
