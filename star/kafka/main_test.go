package kafka_test

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	if starBinDir != "" {
		os.RemoveAll(starBinDir)
	}
	os.Exit(code)
}

// buildStar compiles the star binary once for the package's process
// tests (startDevProcess), into a folder TestMain removes.
func buildStar(t *testing.T, root string) string {
	t.Helper()
	starBinOnce.Do(func() {
		if starBinDir, starBinErr = os.MkdirTemp("", "starlog-kafka-"); starBinErr != nil {
			return
		}
		starBinPath = filepath.Join(starBinDir, "star")
		cmd := exec.Command("go", "build", "-o", starBinPath, "github.com/starlog/starlog/star")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			starBinErr = fmt.Errorf("go build star: %v\n%s", err, out)
		}
	})
	if starBinErr != nil {
		t.Fatal(starBinErr)
	}
	return starBinPath
}

var (
	starBinOnce sync.Once
	starBinPath string
	starBinErr  error
	starBinDir  string
)
