package dynamo

import (
	"strings"
	"testing"

	"github.com/starlog/starlog/shared/meta"
)

func TestPlanQuery(t *testing.T) {
	tok := encodeToken
	cases := []struct {
		name string
		q    meta.Query
		want plan
	}{
		{"open", meta.Query{PK: "p"}, plan{limit: DefaultLimit}},
		{"limit", meta.Query{PK: "p", Limit: 7}, plan{limit: 7}},
		{"inverted", meta.Query{PK: "p", From: "b", To: "a"}, plan{from: "b", to: "a", limit: DefaultLimit, empty: true}},
		{"fwd resume inside", meta.Query{PK: "p", From: "b", To: "y", PageToken: tok("m")}, plan{from: "b", to: "y", after: "m", limit: DefaultLimit}},
		{"fwd resume below", meta.Query{PK: "p", From: "b", PageToken: tok("a")}, plan{from: "b", limit: DefaultLimit}},
		{"fwd resume at from", meta.Query{PK: "p", From: "b", PageToken: tok("b")}, plan{from: "b", after: "b", limit: DefaultLimit}},
		{"fwd resume at to", meta.Query{PK: "p", To: "m", PageToken: tok("m")}, plan{to: "m", limit: DefaultLimit, empty: true}},
		{"fwd resume above", meta.Query{PK: "p", To: "m", PageToken: tok("z")}, plan{to: "m", limit: DefaultLimit, empty: true}},
		{"back resume inside", meta.Query{PK: "p", From: "b", To: "y", Backward: true, PageToken: tok("m")}, plan{from: "b", to: "y", after: "m", limit: DefaultLimit}},
		{"back resume above", meta.Query{PK: "p", To: "m", Backward: true, PageToken: tok("z")}, plan{to: "m", limit: DefaultLimit}},
		{"back resume at to", meta.Query{PK: "p", To: "m", Backward: true, PageToken: tok("m")}, plan{to: "m", after: "m", limit: DefaultLimit}},
		{"back resume at from", meta.Query{PK: "p", From: "b", Backward: true, PageToken: tok("b")}, plan{from: "b", limit: DefaultLimit, empty: true}},
		{"back resume open", meta.Query{PK: "p", Backward: true, PageToken: tok("b")}, plan{after: "b", limit: DefaultLimit}},
	}
	for _, c := range cases {
		got, err := planQuery(c.q)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if got != c.want {
			t.Errorf("%s: plan %+v, want %+v", c.name, got, c.want)
		}
	}
	for _, q := range []meta.Query{
		{PK: ""}, {PK: "p", Limit: -1}, {PK: "p", PageToken: "x"}, {PK: "p", From: strings.Repeat("a", maxSKBytes+1)},
		{PK: strings.Repeat("a", maxPKBytes+1)}, {PK: "\xff"},
	} {
		if _, err := planQuery(q); err == nil {
			t.Errorf("planQuery(%.60v) accepted", q)
		}
	}
}

func TestCheckItem(t *testing.T) {
	if err := checkItem("p", "s", make([]byte, 350*1024)); err != nil {
		t.Fatalf("350 KB item rejected: %v", err)
	}
	if err := checkItem("p", "s", make([]byte, 400*1024)); err == nil {
		t.Fatal("400 KB value accepted: with its key and names the item exceeds 400 KB")
	}
	for _, k := range [][2]string{{"", "s"}, {"p", ""}, {"p", strings.Repeat("s", maxSKBytes+1)}, {"p\xc3", "s"}} {
		if err := checkKey(k[0], k[1]); err == nil {
			t.Errorf("checkKey(%.20q, %.20q) accepted", k[0], k[1])
		}
	}
}

func FuzzDecodeToken(f *testing.F) {
	for _, seed := range []string{"", "cw", encodeToken("r#00000000000000000150"), encodeToken("lease"), "!!!", "AAAA", "ZA", encodeToken("\xff")} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, tok string) {
		sk, err := decodeToken(tok)
		if err != nil {
			return
		}
		if sk == "" || len(sk) > maxSKBytes {
			t.Fatalf("decoded an invalid sort key %q", sk)
		}
		// What decodes re-encodes to a token that decodes to the same key.
		again, err := decodeToken(encodeToken(sk))
		if err != nil || again != sk {
			t.Fatalf("round trip of %q: %q, %v", sk, again, err)
		}
	})
}
