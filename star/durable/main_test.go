package durable_test

import (
	"flag"
	"os"
	"testing"
)

// testParallel is how many tests run at once unless -parallel is given.
// The slow tests here each drive their own star dev process (own port and
// data folder) and mostly wait on it, so GOMAXPROCS, the default, would
// queue them for no gain.
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
	code := m.Run()
	if starBinDir != "" {
		os.RemoveAll(starBinDir)
	}
	os.Exit(code)
}
