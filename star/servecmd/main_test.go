package servecmd_test

import (
	"os"
	"testing"

	"github.com/starlog/starlog/shared/testsvc"
)

// TestMain removes the star binary the process tests built.
func TestMain(m *testing.M) {
	code := m.Run()
	testsvc.RemoveStarBinary()
	os.Exit(code)
}
