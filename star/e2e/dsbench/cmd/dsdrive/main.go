// Command dsdrive runs one row of the Durable Streams benchmark against a
// server already running (for profiling one side by hand).
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"time"

	"github.com/starlog/starlog/star/e2e/dsbench"
)

func main() {
	base := flag.String("base", "http://127.0.0.1:7480/ds", "the protocol's root URL")
	row := flag.Int("workload", 1, "row (1-based)")
	dur := flag.Duration("duration", 5*time.Second, "length of the run")
	size := flag.Int("size", 1024, "append body bytes")
	prefix := flag.String("prefix", fmt.Sprintf("d%d-", time.Now().UnixNano()), "stream name prefix")
	flag.Parse()
	w := dsbench.Workloads()[*row-1]
	v, err := dsbench.Run(context.Background(), dsbench.Client(), *base, *prefix, w, *size, *dur)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s: %.0f appends/s\n", w.Name, v)
}
