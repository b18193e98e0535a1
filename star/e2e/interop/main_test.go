package interop_test

import (
	"flag"
	"os"
	"testing"

	"github.com/starlog/starlog/shared/testsvc"
)

// testParallel is how many tests run at once unless -parallel is given:
// every test here (five) runs at once. Each drives its own star dev (own
// port, own data folder) with a Node script whose run is mostly waiting
// (the conformance script's 30 s idle session sets the package's pace),
// so GOMAXPROCS, the default, would queue them for no gain.
const testParallel = 8

func TestMain(m *testing.M) {
	flag.Parse()
	testsvc.DefaultParallel(testParallel)
	code := m.Run()
	if starBinDir != "" {
		os.RemoveAll(starBinDir)
	}
	os.Exit(code)
}
