// Package groups is the Kafka face's consumer group state machine
// (docs/kafka.md, "Consumer groups"): one group's membership, generation
// and assignments under the classic protocol, as a coordinator keeps them
// in memory. It is pure: every method takes the time from its caller and
// answers through the reply functions it is given. Package star/kafka
// holds the groups of a star, serializes the calls, keeps committed
// offsets and forwards requests to a group's coordinator.
package groups
