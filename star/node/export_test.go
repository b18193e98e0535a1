package node

import "github.com/starlog/starlog/shared/meta"

// StandInCommit makes Healthy also ask commitErr whether the star can
// commit, as if it were class's loglet: a condition (halted, the object
// store refusing writes) a real loglet cannot be put in on demand. Call
// it before anything calls Healthy.
func (n *Node) StandInCommit(class meta.Class, commitErr func() error) {
	n.commits = append(n.commits, commitSource{class: class, src: commitFunc(commitErr)})
}

// Kept is what the star keeps per stream: lead slots and cached rows.
func (n *Node) Kept() (slots, rows int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.led), n.cat.Cached()
}

type commitFunc func() error

func (f commitFunc) CommitErr() error { return f() }
