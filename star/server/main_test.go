package server_test

import (
	"flag"
	"os"
	"testing"

	"github.com/starlog/starlog/shared/testsvc"
)

// testParallel is how many tests run at once unless -parallel is given.
// Most tests here wait on timers, leases and loopback sockets rather than
// the CPU, each on its own node and listener, so the default (GOMAXPROCS,
// two on a 2-core runner) would leave the package mostly waiting.
const testParallel = 8

func TestMain(m *testing.M) {
	flag.Parse()
	testsvc.DefaultParallel(testParallel)
	os.Exit(m.Run())
}
