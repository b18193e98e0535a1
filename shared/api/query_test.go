package api

import (
	"net/url"
	"reflect"
	"testing"
	"time"

	"pgregory.net/rapid"
)

func mustQuery(t *testing.T, raw string) url.Values {
	t.Helper()
	q, err := url.ParseQuery(raw)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func dur(d time.Duration) *time.Duration { return &d }

func TestParseReadQuery(t *testing.T) {
	cases := []struct {
		raw  string
		mode ReadMode
		want ReadRequest
	}{
		// No start: the tail. Unary reads are always bounded.
		{"", ReadUnary, ReadRequest{From: FromTailOffset, Count: Uint64(1000), Bytes: Uint64(1 << 20)}},
		{"", ReadSession, ReadRequest{From: FromTailOffset}},
		{"seq_num=5", ReadSession, ReadRequest{From: FromSeqNum, Value: 5}},
		{"timestamp=17&until=18", ReadSession, ReadRequest{From: FromTimestamp, Value: 17, Until: Uint64(18)}},
		{"tail_offset=10&clamp=true", ReadSession, ReadRequest{From: FromTailOffset, Value: 10, Clamp: true}},
		{"seq_num=0&clamp=false", ReadSession, ReadRequest{From: FromSeqNum}},
		// Caps: count 5000 returns 1000; bytes capped; wait capped at 60 s.
		{"seq_num=0&count=5000&bytes=9999999&wait=600", ReadUnary, ReadRequest{From: FromSeqNum, Count: Uint64(1000), Bytes: Uint64(1 << 20), Wait: dur(60 * time.Second)}},
		{"seq_num=0&count=5000&bytes=9999999&wait=600", ReadSession, ReadRequest{From: FromSeqNum, Count: Uint64(5000), Bytes: Uint64(9999999), Wait: dur(600 * time.Second)}},
		{"count=0", ReadUnary, ReadRequest{Count: Uint64(0), Bytes: Uint64(1 << 20)}},
		{"bytes=10&wait=3", ReadUnary, ReadRequest{Count: Uint64(1000), Bytes: Uint64(10), Wait: dur(3 * time.Second)}},
		// Unknown parameters are ignored; until on a seq_num start is allowed.
		{"seq_num=3&until=1&foo=bar", ReadSession, ReadRequest{From: FromSeqNum, Value: 3, Until: Uint64(1)}},
		{"seq_num=18446744073709551615", ReadSession, ReadRequest{From: FromSeqNum, Value: 1<<64 - 1}},
	}
	for _, c := range cases {
		got, err := ParseReadQuery(mustQuery(t, c.raw), c.mode)
		if err != nil {
			t.Errorf("%q: %v", c.raw, err)
			continue
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%q mode %d:\n got %+v\nwant %+v", c.raw, c.mode, got, c.want)
		}
	}
}

func TestParseReadQueryErrors(t *testing.T) {
	cases := []struct {
		raw    string
		status int
		code   string
	}{
		{"seq_num=1&timestamp=2", 422, CodeInvalid},
		{"seq_num=1&tail_offset=2", 422, CodeInvalid},
		{"timestamp=1&tail_offset=2&seq_num=0", 422, CodeInvalid},
		{"timestamp=5&until=5", 422, CodeInvalid},
		{"timestamp=6&until=5", 422, CodeInvalid},
		{"seq_num=-1", 400, CodeBadQuery},
		{"seq_num=abc", 400, CodeBadQuery},
		{"seq_num=18446744073709551616", 400, CodeBadQuery},
		{"count=1.5", 400, CodeBadQuery},
		{"wait=4294967296", 400, CodeBadQuery},
		{"clamp=yes", 400, CodeBadQuery},
		{"clamp=1", 400, CodeBadQuery},
		{"seq_num=1&seq_num=2", 400, CodeBadQuery},
		{"seq_num=", 400, CodeBadQuery},
	}
	for _, c := range cases {
		for _, mode := range []ReadMode{ReadUnary, ReadSession} {
			_, err := ParseReadQuery(mustQuery(t, c.raw), mode)
			if err == nil || err.Status != c.status || err.Code != c.code {
				t.Errorf("%q mode %d: got %v, want %d %s", c.raw, mode, err, c.status, c.code)
			}
		}
	}
}

func TestReadRequestWaitAndFollow(t *testing.T) {
	cases := []struct {
		raw     string
		mode    ReadMode
		wait    time.Duration
		forever bool
		follow  bool
	}{
		{"", ReadSession, 0, true, true},           // unbounded session follows forever
		{"count=10", ReadSession, 0, false, false}, // bounded: wait defaults to 0
		{"until=10", ReadSession, 0, false, false}, // until bounds too
		{"count=10&wait=2", ReadSession, 2 * time.Second, false, true},
		{"wait=0", ReadSession, 0, false, false},
		{"", ReadUnary, 0, false, false},                    // unary at the tail without wait: 416
		{"wait=3", ReadUnary, 3 * time.Second, false, true}, // long poll
	}
	for _, c := range cases {
		r, err := ParseReadQuery(mustQuery(t, c.raw), c.mode)
		if err != nil {
			t.Fatal(err)
		}
		w, forever := r.EffectiveWait()
		if w != c.wait || forever != c.forever || r.CanFollow() != c.follow {
			t.Errorf("%q mode %d: wait %v forever %v follow %v", c.raw, c.mode, w, forever, r.CanFollow())
		}
	}
}

func TestApplyLastEventID(t *testing.T) {
	r, _ := ParseReadQuery(mustQuery(t, "tail_offset=5&count=10&bytes=100"), ReadSession)
	r.ApplyLastEventID(LastEventID{SeqNum: 41, Count: 4, Bytes: 500})
	want := ReadRequest{From: FromSeqNum, Value: 42, Count: Uint64(6), Bytes: Uint64(0)}
	if !reflect.DeepEqual(r, want) {
		t.Fatalf("got %+v", r)
	}
	r = ReadRequest{}
	r.ApplyLastEventID(LastEventID{SeqNum: 1<<64 - 1})
	if r.Value != 1<<64-1 || r.Count != nil {
		t.Fatalf("saturation: %+v", r)
	}
}

func TestParseLastEventID(t *testing.T) {
	id, err := ParseLastEventID("12,3,456")
	if err != nil || id != (LastEventID{12, 3, 456}) {
		t.Fatalf("%+v %v", id, err)
	}
	for _, v := range []string{"", "1,2", "1,2,3,4", "a,b,c", "1,,3", "-1,2,3", " 1,2,3"} {
		if _, err := ParseLastEventID(v); err == nil || err.Code != CodeBadHeader {
			t.Errorf("%q: got %v", v, err)
		}
	}
}

// Query() renders what ParseReadQuery reads back (session mode: no caps).
func TestReadQueryRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		r := ReadRequest{
			From:  ReadFrom(rapid.IntRange(0, 2).Draw(t, "from")),
			Value: rapid.Uint64().Draw(t, "value"),
			Clamp: rapid.Bool().Draw(t, "clamp"),
		}
		opt := func(label string) *uint64 {
			if rapid.Bool().Draw(t, label+"?") {
				return Uint64(rapid.Uint64().Draw(t, label))
			}
			return nil
		}
		r.Count, r.Bytes, r.Until = opt("count"), opt("bytes"), opt("until")
		if rapid.Bool().Draw(t, "wait?") {
			r.Wait = dur(time.Duration(rapid.Uint32().Draw(t, "wait")) * time.Second)
		}
		got, err := ParseReadQuery(r.Query(), ReadSession)
		if r.From == FromTimestamp && r.Until != nil && r.Value >= *r.Until {
			if err == nil || err.Code != CodeInvalid {
				t.Fatalf("until ≤ start accepted: %+v", r)
			}
			return
		}
		if err != nil {
			t.Fatalf("%+v: %v", r, err)
		}
		if !reflect.DeepEqual(got, r) {
			t.Fatalf("round trip %+v → %s → %+v", r, r.Query().Encode(), got)
		}
	})
}

func TestParseListQuery(t *testing.T) {
	cases := []struct {
		raw  string
		want ListRequest
	}{
		{"", ListRequest{Limit: 1000}},
		{"prefix=a&start_after=ab&limit=10", ListRequest{Prefix: "a", StartAfter: "ab", Limit: 10}},
		{"limit=0", ListRequest{Limit: 1000}},
		{"limit=5000", ListRequest{Limit: 1000}},
		{"start_after=zzz", ListRequest{StartAfter: "zzz", Limit: 1000}},
	}
	for _, c := range cases {
		got, err := ParseListQuery(mustQuery(t, c.raw))
		if err != nil || got != c.want {
			t.Errorf("%q: %+v %v", c.raw, got, err)
		}
		back, err := ParseListQuery(got.Query())
		if err != nil || back != got {
			t.Errorf("%q: Query round trip %+v %v", c.raw, back, err)
		}
	}
	for _, c := range []struct {
		raw  string
		code string
	}{{"limit=x", CodeBadQuery}, {"limit=-1", CodeBadQuery}, {"prefix=a&prefix=b", CodeBadQuery}, {"prefix=b&start_after=a", CodeInvalid}} {
		if _, err := ParseListQuery(mustQuery(t, c.raw)); err == nil || err.Code != c.code {
			t.Errorf("%q: got %v, want %s", c.raw, err, c.code)
		}
	}
}

// A query net/url cannot decode is 400 bad_query, not served as if the
// pair were absent.
func TestParseQueryMalformed(t *testing.T) {
	for _, raw := range []string{"seq_num=%ZZ", "count=5&x=%", "prefix=a;limit=1", "prefix=%FF", "%C3=1"} {
		if _, err := ParseQuery(raw); err == nil || err.Status != 400 || err.Code != CodeBadQuery {
			t.Errorf("%q: got %v, want 400 bad_query", raw, err)
		}
	}
	q, err := ParseQuery("seq_num=5&prefix=a%2Fb&unknown=1&empty=")
	if err != nil || q.Get("seq_num") != "5" || q.Get("prefix") != "a/b" || !q.Has("unknown") || !q.Has("empty") {
		t.Fatalf("valid query: %v %v", q, err)
	}
}
