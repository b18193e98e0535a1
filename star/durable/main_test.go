package durable_test

import (
	"flag"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/testsvc"
)

// testParallel is how many tests run at once unless -parallel is given.
// The slow tests here each drive their own star dev process (own port and
// data folder) and mostly wait on it, so GOMAXPROCS, the default, would
// queue them for no gain.
const testParallel = 8

func TestMain(m *testing.M) {
	flag.Parse()
	testsvc.DefaultParallel(testParallel)
	code := m.Run()
	testsvc.RemoveStarBinary()
	os.Exit(code)
}

// httpClient has a transport of its own: an httptest server that closes (a
// parallel test's) closes http.DefaultTransport's idle connections, and a
// request about to reuse one fails ("http: CloseIdleConnections called").
var httpClient = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{}}
