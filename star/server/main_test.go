package server_test

import (
	"flag"
	"os"
	"testing"
)

// testParallel is how many tests run at once unless -parallel is given.
// Most tests here wait on timers, leases and loopback sockets rather than
// the CPU, each on its own node and listener, so the default (GOMAXPROCS,
// two on a 2-core runner) would leave the package mostly waiting.
const testParallel = "8"

func TestMain(m *testing.M) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		if err := flag.Set("test.parallel", testParallel); err != nil {
			panic(err)
		}
	}
	os.Exit(m.Run())
}
