package auditjob_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/starlog/starlog/shared/auditjob"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/settle"
)

var chainRef = settle.ChainRef{Star: "star-1", Class: meta.Express}

func validJobs() []auditjob.Job {
	return []auditjob.Job{
		{Kind: settle.KindSettle, Chain: chainRef, Epoch: 3, From: 10, End: 20},
		{Kind: settle.KindTrim, Chain: settle.ChainRef{Star: "s", Class: meta.Standard}},
		auditjob.ChainSettle(chainRef, 7),
	}
}

func TestParseRoundTrip(t *testing.T) {
	for _, j := range validJobs() {
		b := j.Marshal()
		got, err := auditjob.Parse(b)
		if err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		if got != j {
			t.Fatalf("round trip of %s: got %+v", b, got)
		}
		if !bytes.Equal(got.Marshal(), b) || got.Key() != string(b) {
			t.Fatalf("encoding is not deterministic: %s vs %s", got.Marshal(), b)
		}
		if got.Queue() != string(j.Kind) {
			t.Fatalf("queue of %s: %s", j, got.Queue())
		}
	}
	// A settle or trim body is exactly settle.Job's encoding.
	sj := settle.Job{Kind: settle.KindSettle, Chain: chainRef, Epoch: 3, From: 10, End: 20}
	if string(auditjob.FromSettle(sj).Marshal()) != string(sj.Marshal()) {
		t.Fatalf("settle body differs: %s vs %s", auditjob.FromSettle(sj).Marshal(), sj.Marshal())
	}
}

func TestParseRefuses(t *testing.T) {
	for _, body := range []string{
		``,
		`{}`,
		`null`,
		`[]`,
		`{"kind":"settle","chain":{"star":"a","class":"express"},"epoch":1,"from":5,"end":5}`,
		`{"kind":"trim","chain":{"star":"a","class":"express"},"epoch":1}`,
		`{"kind":"chain-settle","chain":{"star":"a","class":"express"}}`,
		`{"kind":"chain-settle","chain":{"star":"a","class":"express"},"epoch":2,"end":3}`,
		`{"kind":"chain-settle","chain":{"star":"","class":"express"},"epoch":2}`,
		`{"kind":"chain-settle","chain":{"star":"a","class":"glacier"},"epoch":2}`,
		`{"kind":"chain-settle","chain":{"star":"a","class":"express"},"epoch":2,"retry":1}`,
		`{"kind":"chain-settle","chain":{"star":"a","class":"express"},"epoch":2} {}`,
		`{"kind":"retention","chain":{"star":"a","class":"express"}}`,
		`{"kind":"chain-settle","chain":{"star":"a","class":"express"},"epoch":-1}`,
		`{"kind":"chain-settle","chain":{"star":"a","class":"express"},"epoch":"2"}`,
		`{"kind":"trim","chain":{"star":"a","class":"express"}` + strings.Repeat(" ", 5000) + `}`,
	} {
		if j, err := auditjob.Parse([]byte(body)); err == nil {
			t.Errorf("accepted %q as %+v", body, j)
		}
	}
}

// FuzzParse: Parse never panics, and what it accepts is valid and
// re-encodes to a body that parses to the same job.
func FuzzParse(f *testing.F) {
	for _, j := range validJobs() {
		f.Add(j.Marshal())
	}
	f.Add([]byte(`{"kind":"chain-settle","chain":{"star":"a","class":"express"},"epoch":2,"x":1}`))
	f.Add([]byte(`{"kind":"settle","chain":{"star":"a","class":"standard"},"epoch":1,"from":0,"end":1}`))
	f.Add([]byte(`{"kind":"chain-settle"`))
	f.Add([]byte{0xff, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		j, err := auditjob.Parse(b)
		if err != nil {
			return
		}
		if err := j.Validate(); err != nil {
			t.Fatalf("accepted an invalid job %+v: %v", j, err)
		}
		again, err := auditjob.Parse(j.Marshal())
		if err != nil || again != j {
			t.Fatalf("re-encoding of %+v parses to %+v, %v", j, again, err)
		}
	})
}
