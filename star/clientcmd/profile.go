package clientcmd

import (
	"fmt"
	"os"
	"runtime/pprof"
)

// startCPUProfile writes this process's CPU profile to path until the
// returned stop is called (path empty: no profile, stop does nothing).
// Measuring a command's client side (`star read --cpuprofile`, make
// bench-read-cli) needs it beside the star's own profile.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}
