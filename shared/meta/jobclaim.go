package meta

import "fmt"

// JobClaimKey is the in-flight claim of one settle job (an era of an
// epoch): the row that makes two runs of the same era, from a duplicated
// queue message, a re-planned era or two in-process runners, take one
// turn. It sits beside the chain's head and holds a SettleClaim. It names
// the era's first slot, not its end: the planner cuts eras from the same
// first slot while their markers stand, and an era planned again while
// its job runs may end further on (more markers ripened meanwhile).
func JobClaimKey(star string, class Class, epoch, from uint64) Key {
	return Key{PK: ChainPK(star, class), SK: fmt.Sprintf("jobclaim/%020d/%020d", epoch, from)}
}
