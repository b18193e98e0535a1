package keyplan

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/starlog/starlog/shared/meta"
)

// testRules are the two backends' rules plus one with a small default page
// size, so the tests show that nothing depends on one backend's values.
var testRules = []Rules{
	{Backend: "meta/sqlite", TokenTag: 's', DefaultLimit: 1000},
	{Backend: "meta/dynamo", TokenTag: 'd', DefaultLimit: 1000},
	{Backend: "meta/test", TokenTag: 't', DefaultLimit: 3},
}

func TestPlanQuery(t *testing.T) {
	for _, r := range testRules {
		tok, def := r.EncodeToken, r.DefaultLimit
		cases := []struct {
			name string
			q    meta.Query
			want Plan
		}{
			{"open", meta.Query{PK: "p"}, Plan{Limit: def}},
			{"limit", meta.Query{PK: "p", Limit: 7}, Plan{Limit: 7}},
			{"capped", meta.Query{PK: "p", Limit: MaxLimit + 1}, Plan{Limit: MaxLimit}},
			{"inverted", meta.Query{PK: "p", From: "b", To: "a"}, Plan{From: "b", To: "a", Limit: def, Empty: true}},
			{"fwd resume inside", meta.Query{PK: "p", From: "b", To: "y", PageToken: tok("m")}, Plan{From: "b", To: "y", After: "m", Limit: def}},
			{"fwd resume below", meta.Query{PK: "p", From: "b", PageToken: tok("a")}, Plan{From: "b", Limit: def}},
			{"fwd resume at from", meta.Query{PK: "p", From: "b", PageToken: tok("b")}, Plan{From: "b", After: "b", Limit: def}},
			{"fwd resume at to", meta.Query{PK: "p", To: "m", PageToken: tok("m")}, Plan{To: "m", Limit: def, Empty: true}},
			{"fwd resume above", meta.Query{PK: "p", To: "m", PageToken: tok("z")}, Plan{To: "m", Limit: def, Empty: true}},
			{"back resume inside", meta.Query{PK: "p", From: "b", To: "y", Backward: true, PageToken: tok("m")}, Plan{From: "b", To: "y", After: "m", Limit: def}},
			{"back resume above", meta.Query{PK: "p", To: "m", Backward: true, PageToken: tok("z")}, Plan{To: "m", Limit: def}},
			{"back resume at to", meta.Query{PK: "p", To: "m", Backward: true, PageToken: tok("m")}, Plan{To: "m", After: "m", Limit: def}},
			{"back resume at from", meta.Query{PK: "p", From: "b", Backward: true, PageToken: tok("b")}, Plan{From: "b", Limit: def, Empty: true}},
			{"back resume open", meta.Query{PK: "p", Backward: true, PageToken: tok("b")}, Plan{After: "b", Limit: def}},
		}
		for _, c := range cases {
			got, err := r.PlanQuery(c.q)
			if err != nil {
				t.Errorf("%s: %s: %v", r.Backend, c.name, err)
				continue
			}
			if got != c.want {
				t.Errorf("%s: %s: plan %+v, want %+v", r.Backend, c.name, got, c.want)
			}
		}
		for _, q := range []meta.Query{
			{PK: ""}, {PK: "p", Limit: -1}, {PK: "p", PageToken: "x"}, {PK: "p", From: strings.Repeat("a", MaxSKBytes+1)},
			{PK: strings.Repeat("a", MaxPKBytes+1)}, {PK: "\xff"},
		} {
			if _, err := r.PlanQuery(q); err == nil {
				t.Errorf("%s: PlanQuery(%.60v) accepted", r.Backend, q)
			}
		}
	}
}

func TestCheckItem(t *testing.T) {
	for _, r := range testRules {
		if err := r.CheckItem("p", "s", make([]byte, 350*1024)); err != nil {
			t.Fatalf("%s: 350 KB item rejected: %v", r.Backend, err)
		}
		err := r.CheckItem("p", "s", make([]byte, 400*1024))
		if err == nil {
			t.Fatalf("%s: 400 KB value accepted: with its key and names the item exceeds 400 KB", r.Backend)
		}
		if !strings.HasPrefix(err.Error(), r.Backend+": ") {
			t.Errorf("%s: error %q does not name the backend", r.Backend, err)
		}
		for _, k := range [][2]string{{"", "s"}, {"p", ""}, {"p", strings.Repeat("s", MaxSKBytes+1)}, {strings.Repeat("p", MaxPKBytes+1), "s"}, {"p\xc3", "s"}} {
			err := r.CheckKey(k[0], k[1])
			if err == nil {
				t.Errorf("%s: CheckKey(%.20q, %.20q) accepted", r.Backend, k[0], k[1])
			} else if !strings.HasPrefix(err.Error(), r.Backend+": ") {
				t.Errorf("%s: error %q does not name the backend", r.Backend, err)
			}
		}
	}
}

func TestTokensAreBackendSpecific(t *testing.T) {
	for _, r := range testRules {
		for _, o := range testRules {
			_, err := r.DecodeToken(o.EncodeToken("lease"))
			if same := r.TokenTag == o.TokenTag; same != (err == nil) {
				t.Errorf("%s decoding a %s token: %v", r.Backend, o.Backend, err)
			}
		}
	}
}

func FuzzDecodeToken(f *testing.F) {
	seeds := []string{"", "cw", "!!!", "AAAA", "ZA"}
	for _, r := range testRules {
		seeds = append(seeds, r.EncodeToken("r#00000000000000000150"), r.EncodeToken("lease"), r.EncodeToken("\xff"))
	}
	for _, seed := range seeds {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, tok string) {
		for _, r := range testRules {
			sk, err := r.DecodeToken(tok)
			if err != nil {
				if !errors.Is(err, ErrBadToken) {
					t.Fatalf("%s: error %v is not ErrBadToken", r.Backend, err)
				}
				continue
			}
			if sk == "" || len(sk) > MaxSKBytes || !utf8.ValidString(sk) {
				t.Fatalf("%s: decoded an invalid sort key %q", r.Backend, sk)
			}
			// What decodes re-encodes to a token that decodes to the same key.
			again, err := r.DecodeToken(r.EncodeToken(sk))
			if err != nil || again != sk {
				t.Fatalf("%s: round trip of %q: %q, %v", r.Backend, sk, again, err)
			}
		}
	})
}
