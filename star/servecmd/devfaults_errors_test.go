package servecmd

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/starlog/starlog/shared/api"
)

// Every error of the dev fault control is the API's JSON error body, not
// Go's plain text: a body that does not decode or names no fault, an
// unknown path, a method the path does not take.
func TestDevFaultControlErrorsAreJSON(t *testing.T) {
	d := &devFaults{buckets: []string{"standard"}}
	d.state = d.cleared()
	srv := httptest.NewServer(d.handler())
	defer srv.Close()
	for _, c := range []struct {
		method, path, body string
		status             int
		code               string
	}{
		{"PUT", "/faults", `{"meta":`, 400, api.CodeBadJSON},
		{"PUT", "/faults", `{"meta":{"latency":5}}`, 400, api.CodeBadJSON},
		{"PUT", "/faults", `{"buckets":{"elsewhere":{"down":true}}}`, 400, api.CodeBadJSON},
		{"GET", "/nope", "", 400, api.CodeBadPath},
		{"POST", "/faults", "", 405, api.CodeBadPath},
	} {
		req, _ := http.NewRequest(c.method, srv.URL+c.path, strings.NewReader(c.body))
		res, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		var info api.ErrorInfo
		if res.StatusCode != c.status || res.Header.Get("Content-Type") != api.ContentTypeJSON || json.Unmarshal(b, &info) != nil || info.Code != c.code || info.Message == "" {
			t.Errorf("%s %s %s: %d %q %s, want %d %s as JSON", c.method, c.path, c.body, res.StatusCode, res.Header.Get("Content-Type"), b, c.status, c.code)
		}
	}
}
