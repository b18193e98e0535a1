package testsvc

import (
	"flag"
	"fmt"
)

// DefaultParallel sets -test.parallel to n unless the command line gave
// it. It is for a package whose tests mostly wait (on their own star
// processes, timers and loopback sockets) rather than use the CPU, where
// GOMAXPROCS, the default, would queue them for no gain. Call it from
// TestMain after flag.Parse.
func DefaultParallel(n int) {
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		if err := flag.Set("test.parallel", fmt.Sprint(n)); err != nil {
			panic(err)
		}
	}
}
