// Package kafka serves the Kafka wire protocol from a star (the Kafka
// face, beside the S2 API of star/server and the Durable Streams face of
// star/durable), on the same starlog streams.
//
// A topic T with N partitions in the configured basin is the N streams
// T/0 … T/N-1; its partition count and id are a metastore row beside the
// streams (topics.go). Offsets are seq nums. A Kafka record is one
// starlog record: the value is the body, the key and the Kafka headers
// are record headers, the timestamp is the record's (records.go).
//
// One goroutine serves each connection (listener.go): it reads a
// size-prefixed frame under a deadline, decodes it with franz-go's kmsg
// (no hand-written request or response codecs), answers, and only then
// reads the next, so responses go out in request order. A connection
// that has not authenticated (SASL/PLAIN with an access token as the
// password, sasl.go) may only ask ApiVersions and SASL; every other
// request is authorized against its streams before it has any effect.
//
// The face reaches the star only through the node's exported methods
// (the Star interface), as star/durable does. docs/kafka.md says what is
// served, at which versions, and what is not.
package kafka
