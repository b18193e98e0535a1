//go:build unix

package format

import (
	"syscall"
	"testing"
	"time"
)

// cpuTime is the process's user+system CPU time. Benchmarks report bytes per
// CPU-second as well as per wall-second, because on a shared machine wall
// time includes waiting for a core.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU adds a cpu-MB/s metric: bytes per op × ops / CPU seconds spent
// since start (all threads, GC included).
func reportCPU(b *testing.B, start time.Duration, bytesPerOp int) {
	if used := cpuTime() - start; used > 0 && start > 0 {
		b.ReportMetric(float64(bytesPerOp)*float64(b.N)/used.Seconds()/1e6, "cpu-MB/s")
	}
}
