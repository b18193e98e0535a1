package kafka_test

import (
	"flag"
	"os"
	"testing"

	"github.com/starlog/starlog/shared/testsvc"
)

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	testsvc.RemoveStarBinary()
	os.Exit(code)
}
