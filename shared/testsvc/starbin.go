package testsvc

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// starBin is the star binary of this test process (StarBinary).
var starBin struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// StarBinary is the star binary built from this repository once per test
// process, so a package's tests share one build; it lives in a folder
// RemoveStarBinary deletes, which the package's TestMain calls after
// m.Run.
func StarBinary(t testing.TB) string {
	t.Helper()
	starBin.once.Do(func() {
		if starBin.dir, starBin.err = os.MkdirTemp("", "starlog-star-"); starBin.err != nil {
			return
		}
		starBin.path = filepath.Join(starBin.dir, "star")
		cmd := exec.Command("go", "build", "-o", starBin.path, "./star")
		cmd.Dir = RepoRoot(t)
		if out, err := cmd.CombinedOutput(); err != nil {
			starBin.err = fmt.Errorf("go build star: %v\n%s", err, out)
		}
	})
	if starBin.err != nil {
		t.Fatal(starBin.err)
	}
	return starBin.path
}

// RemoveStarBinary deletes what StarBinary built, if anything.
func RemoveStarBinary() {
	if starBin.dir != "" {
		os.RemoveAll(starBin.dir)
	}
}
