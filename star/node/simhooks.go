package node

// StreamID is the id of the stream the appender appends to ("" until a
// lazily opened appender's first Submit created it): which incarnation
// of a name a batch was sequenced into, for harnesses that check acks
// against the catalog (star/sim/catalogsim).
func (a *Appender) StreamID() string {
	if a.l == nil {
		return ""
	}
	return a.l.s.ID
}
