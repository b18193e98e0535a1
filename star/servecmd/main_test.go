package servecmd_test

import (
	"flag"
	"os"
	"testing"
)

// testParallel is how many tests run at once unless -parallel is given.
// Most tests here start star processes of their own (own ports and data
// folders) and wait on them, so GOMAXPROCS, the default (two on a 2-core
// runner), would leave the package mostly waiting. The tests that set
// environment variables (t.Setenv) stay sequential and run first.
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
