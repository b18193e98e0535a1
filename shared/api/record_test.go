package api

import "testing"

// A trim point moves only forward, to at most one past the command's own
// seq; other records and malformed commands leave it.
func TestApplyTrim(t *testing.T) {
	trim := TrimRecord(50)
	fence := FenceRecord("x")
	bad := Record{Headers: trim.Headers, Body: []byte{1}}
	for _, c := range []struct {
		name     string
		r        Record
		cur, seq uint64
		want     uint64
	}{
		{"forward", trim, 10, 100, 50},
		{"never back", trim, 60, 100, 60},
		{"capped at the command", trim, 0, 20, 21},
		{"ordinary record", Record{Body: []byte("a")}, 7, 100, 7},
		{"fence", fence, 7, 100, 7},
		{"malformed trim", bad, 7, 100, 7},
	} {
		if got := ApplyTrim(c.cur, c.r.Headers, c.r.Body, c.seq); got != c.want {
			t.Errorf("%s: ApplyTrim(%d, seq %d) = %d, want %d", c.name, c.cur, c.seq, got, c.want)
		}
	}
}
