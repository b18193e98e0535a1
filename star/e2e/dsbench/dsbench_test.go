package dsbench_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/starlog/starlog/star/e2e/dsbench"
)

// Run creates each stream, then appends with the row's headers: an
// idempotent producer's Producer-Seq counts up from 0 on each stream.
func TestRunSendsTheRowsRequests(t *testing.T) {
	var mu sync.Mutex
	created := map[string]bool{}
	next := map[string]int{}
	var bad string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		switch r.Method {
		case http.MethodPut:
			created[r.URL.Path] = true
			w.WriteHeader(http.StatusCreated)
		case http.MethodPost:
			if !created[r.URL.Path] {
				bad = "append before create: " + r.URL.Path
			}
			if id := r.Header.Get("Producer-Id"); id != "" {
				if got := r.Header.Get("Producer-Seq"); got != strconv.Itoa(next[id]) || r.Header.Get("Producer-Epoch") != "0" {
					bad = "producer " + id + " sent seq " + got + ", want " + strconv.Itoa(next[id])
				}
				next[id]++
				w.WriteHeader(http.StatusOK)
				return
			}
			w.WriteHeader(http.StatusNoContent)
		}
	}))
	defer srv.Close()
	c := dsbench.Client()
	for _, w := range dsbench.Workloads() {
		v, err := dsbench.Run(context.Background(), c, srv.URL+"/ds", "t-", w, 16, 100*time.Millisecond)
		if err != nil {
			t.Fatalf("%s: %v", w.Name, err)
		}
		if v <= 0 {
			t.Fatalf("%s: %v appends/s", w.Name, v)
		}
	}
	if bad != "" {
		t.Fatal(bad)
	}
	if len(created) != 16 || len(next) != 1 || next["t-0"] == 0 {
		t.Fatalf("created %d streams, producers %v; want 16 and one producer that appended", len(created), next)
	}
}
