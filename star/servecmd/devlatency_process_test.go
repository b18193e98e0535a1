package servecmd_test

import "testing"

// star dev with modeled Express latency starts and serves (it panicked at
// start once the directory store's journal made the store a closer:
// "interface conversion: *faults.Store is not io.Closer").
func TestDevWithExpressLatencyStarts(t *testing.T) {
	url, _, stop := runDevBanner(t, t.TempDir(), "--dev-express-latency", "5ms,20ms", "--open")
	defer stop()
	if url == "" {
		t.Fatal("no endpoint in the banner")
	}
}
