package settle

import (
	"bytes"
	"testing"

	"github.com/starlog/starlog/shared/meta"
)

var jobSeeds = []string{
	`{"kind":"settle","chain":{"star":"s1","class":"express"},"epoch":3,"from":10,"end":42}`,
	`{"kind":"trim","chain":{"star":"s1","class":"standard"}}`,
	`{"kind":"settle","chain":{"star":"s1","class":"express"},"epoch":3,"from":10,"end":10}`,
	`{"kind":"trim","chain":{"star":"s1","class":"standard"},"epoch":1}`,
	`{"kind":"janitor","chain":{"star":"s1","class":"standard"}}`,
	`{"kind":"trim","chain":{"star":"","class":"standard"}}`,
	`{"kind":"trim","chain":{"star":"s1","class":"glacier"}}`,
	`{"kind":"trim","chain":{"star":"s1","class":"standard"},"extra":1}`,
	`{"kind":"trim","chain":{"star":"s1","class":"standard"}} {}`,
	`{"kind":"trim","chain":{"star":"s1","class":"standard"}}]`,
	`{"kind":"settle","chain":{"star":"s1","class":"express"},"epoch":-1,"from":0,"end":1}`,
	``,
	`null`,
}

func TestParseJob(t *testing.T) {
	for i, s := range jobSeeds {
		_, err := ParseJob([]byte(s))
		if ok := i < 2; ok != (err == nil) {
			t.Errorf("seed %d %s: err %v", i, s, err)
		}
	}
	j := Job{Kind: KindSettle, Chain: ChainRef{Star: "a", Class: meta.Express}, Epoch: 1, From: 2, End: 3}
	got, err := ParseJob(j.Marshal())
	if err != nil || got != j {
		t.Fatalf("round trip: %+v %v", got, err)
	}
}

// FuzzParseJob: a queue message either parses into a valid job that
// re-encodes to a message parsing to the same job, or is refused; never a
// panic.
func FuzzParseJob(f *testing.F) {
	for _, s := range jobSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		j, err := ParseJob(b)
		if err != nil {
			return
		}
		if err := j.Validate(); err != nil {
			t.Fatalf("parsed an invalid job %+v: %v", j, err)
		}
		enc := j.Marshal()
		j2, err := ParseJob(enc)
		if err != nil || j2 != j {
			t.Fatalf("re-encoded %s parses to %+v, %v", enc, j2, err)
		}
		if !bytes.Equal(j2.Marshal(), enc) {
			t.Fatal("encoding is not stable")
		}
	})
}
