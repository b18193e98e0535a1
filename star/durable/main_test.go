package durable_test

import (
	"flag"
	"os"
	"testing"

	"github.com/starlog/starlog/shared/testsvc"
)

// testParallel is how many tests run at once unless -parallel is given.
// The slow tests here each drive their own star dev process (own port and
// data folder) and mostly wait on it, so GOMAXPROCS, the default, would
// queue them for no gain.
const testParallel = 8

func TestMain(m *testing.M) {
	flag.Parse()
	testsvc.DefaultParallel(testParallel)
	code := m.Run()
	testsvc.RemoveStarBinary()
	os.Exit(code)
}
