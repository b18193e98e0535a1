// Package subs serves and drives Durable Streams subscriptions (protocol
// §6–7): durable cursors over a set of streams that wake a worker, by a
// signed webhook or by an event in a wake stream, when a linked stream
// has records past its acked offset.
//
// Each subscription's config and cursors are one metastore row changed
// only by conditional puts (state.go is its pure state machine), and
// every star drives them from the rows (schedule.go, driver.go); the
// control routes under the reserved __ds segment are http.go, who may do
// what is scope.go, and the keys that sign webhooks and wake tokens are
// the signing package.
//
// The dependency runs one way: star/durable (the protocol's handler)
// imports this package, builds its Manager, routes the control requests
// to it (Controls, ServeHTTP) and tells it of every write (Notify). This
// package never imports star/durable: it sees the streams only through
// Streams (a stream's tail, a wake event's append, the stream names),
// which the handler implements by serving the requests as a client's.
package subs
