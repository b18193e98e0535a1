package kafkabench

import (
	"fmt"
	"time"
)

// ProduceInFlight is how many records each producer of the throughput
// rows keeps unacknowledged: about 1 MiB of 1 KiB records, one full S2
// batch or Kafka batch.
const ProduceInFlight = 1000

// ThroughputLinger is both clients' linger in the throughput rows (the
// SDK producer's default; kgo's is 10 ms).
const ThroughputLinger = 5 * time.Millisecond

// Workloads are the rows, in order: throughput with 1 and 16 producers on
// the directory store (and, with idempotent, one producer through kgo's
// idempotent producer), one record in flight there, the same on S3
// Express-like timings (express), and the read of a partition of
// readMsgs records from its start (0: no read row).
func Workloads(idempotent, express bool, readMsgs int) []Workload {
	w := []Workload{
		{Name: "1 producer, 1,000 in flight", Shape: "produce", Producers: 1, InFlight: ProduceInFlight, Linger: ThroughputLinger},
		{Name: "16 producers × 1,000 in flight", Shape: "produce", Producers: 16, InFlight: ProduceInFlight, Linger: ThroughputLinger},
	}
	if idempotent {
		w = append(w, Workload{Name: "1 producer, 1,000 in flight, Kafka idempotent", Shape: "produce", Producers: 1,
			InFlight: ProduceInFlight, Linger: ThroughputLinger, Idempotent: true})
	}
	w = append(w, Workload{Name: "1 producer, 1 in flight", Shape: "produce", Producers: 1, InFlight: 1})
	if express {
		w = append(w,
			Workload{Name: "1 producer, 1 in flight, Express timings", Shape: "produce", Producers: 1, InFlight: 1, Express: true},
			Workload{Name: "16 producers, 1 in flight, Express timings", Shape: "produce", Producers: 16, InFlight: 1, Express: true},
		)
	}
	if readMsgs > 0 {
		w = append(w, Workload{Name: fmt.Sprintf("1 reader, %s records from the start", thousands(float64(readMsgs))),
			Shape: "consume", Messages: readMsgs})
	}
	return w
}
