package sdk

import (
	"bytes"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/poll"
	"github.com/starlog/starlog/shared/sdk/sdktest"
)

func TestParseEndpoint(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"http://h:1", "http://h:1/v1"},
		{"http://h:1/", "http://h:1/v1"},
		{"https://h/v1/", "https://h/v1"},
		{"http://h/prefix/v1", "http://h/prefix/v1"},
	} {
		u, err := parseEndpoint(tc.in)
		if err != nil {
			t.Fatalf("%s: %v", tc.in, err)
		}
		if u.String() != tc.want {
			t.Errorf("%s: got %s, want %s", tc.in, u, tc.want)
		}
	}
	for _, bad := range []string{"", "h:1", "ftp://h", "http://", "http://h?x=1"} {
		if _, err := parseEndpoint(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// TestRequestHeaders checks addressing: the s2-basin header, the bearer
// token, the user agent, percent-encoded stream names, and the {basin}
// placeholder that replaces the header.
func TestRequestHeaders(t *testing.T) {
	type seen struct{ path, basin, auth, ua string }
	var mu sync.Mutex
	var got []seen
	srv := startH2C(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, seen{r.URL.EscapedPath(), r.Header.Get("S2-Basin"), r.Header.Get("Authorization"), r.Header.Get("User-Agent")})
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"tail":{"seq_num":7,"timestamp":9}}`))
	}))
	ctx := testCtx(t)

	c := newClient(t, srv.URL, func(c *Config) { c.Token = "tok"; c.UserAgent = "ua/1" })
	tail, err := c.Basin("my-basin").Stream("a/b c").CheckTail(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if tail != (api.StreamPosition{SeqNum: 7, Timestamp: 9}) {
		t.Fatalf("tail %+v", tail)
	}
	c2 := newClient(t, srv.URL, func(c *Config) { c.BasinEndpoint = srv.URL + "/{basin}/v1" })
	if _, err := c2.Basin("other-basin").Stream("x").CheckTail(ctx); err != nil {
		t.Fatal(err)
	}
	want := []seen{
		{"/v1/streams/a%2Fb%20c/records/tail", "my-basin", "Bearer tok", "ua/1"},
		{"/other-basin/v1/streams/x/records/tail", "", "", DefaultUserAgent},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d requests, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("request %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestManagement(t *testing.T) {
	srv := newServer(t, sdktest.Options{})
	c := newClient(t, srv.URL, nil)
	ctx := testCtx(t)

	info, err := c.CreateBasin(ctx, "basin-one", &api.BasinConfig{CreateStreamOnAppend: true})
	if err != nil {
		t.Fatal(err)
	}
	if info.Name != "basin-one" || info.CreatedAt.IsZero() {
		t.Fatalf("basin info %+v", info)
	}
	_, err = c.CreateBasin(ctx, "basin-one", nil)
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Status != http.StatusConflict || ae.Code != api.CodeResourceAlreadyExists {
		t.Fatalf("duplicate create: %v", err)
	}
	if res, err := c.EnsureBasin(ctx, "basin-two", nil); err != nil || res != Created {
		t.Fatalf("ensure new: %v %v", res, err)
	}
	if res, err := c.EnsureBasin(ctx, "basin-two", nil); err != nil || res != Updated {
		t.Fatalf("ensure existing: %v %v", res, err)
	}
	cfg, err := c.GetBasinConfig(ctx, "basin-one")
	if err != nil || !cfg.CreateStreamOnAppend {
		t.Fatalf("get basin config: %+v %v", cfg, err)
	}
	cfg, err = c.ReconfigureBasin(ctx, "basin-one", api.BasinReconfiguration{CreateStreamOnRead: api.SetTo(true)})
	if err != nil || !cfg.CreateStreamOnRead || !cfg.CreateStreamOnAppend {
		t.Fatalf("reconfigure basin: %+v %v", cfg, err)
	}
	var all []string
	for b, err := range c.AllBasins(ctx, "basin-") {
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, b.Name)
	}
	if strings.Join(all, ",") != "basin-one,basin-two" {
		t.Fatalf("basins %v", all)
	}
	if err := c.DeleteBasin(ctx, "basin-two"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetBasinConfig(ctx, "basin-two"); !errors.As(err, &ae) || ae.Code != api.CodeBasinNotFound {
		t.Fatalf("deleted basin: %v", err)
	}

	b := c.Basin("basin-one")
	express := api.StorageExpress
	if _, err := b.CreateStream(ctx, "s1", &api.StreamConfig{StorageClass: &express}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"s2", "s3", "t1"} {
		if res, err := b.EnsureStream(ctx, n, api.StreamConfig{}); err != nil || res != Created {
			t.Fatalf("ensure %s: %v %v", n, res, err)
		}
	}
	sc, err := b.GetStreamConfig(ctx, "s1")
	if err != nil || *sc.StorageClass != api.StorageExpress || sc.RetentionPolicy.AgeSecs != api.DefaultRetentionAgeSecs {
		t.Fatalf("stream config %+v %v", sc, err)
	}
	sc, err = b.ReconfigureStream(ctx, "s1", api.StreamReconfiguration{RetentionPolicy: api.SetTo(api.RetentionPolicy{Infinite: true})})
	if err != nil || !sc.RetentionPolicy.Infinite || *sc.StorageClass != api.StorageExpress {
		t.Fatalf("reconfigure stream: %+v %v", sc, err)
	}
	page, err := b.ListStreams(ctx, api.ListRequest{Prefix: "s", Limit: 2})
	if err != nil || len(page.Streams) != 2 || !page.HasMore || page.Streams[1].Name != "s2" {
		t.Fatalf("page 1: %+v %v", page, err)
	}
	page, err = b.ListStreams(ctx, api.ListRequest{Prefix: "s", StartAfter: "s2", Limit: 2})
	if err != nil || len(page.Streams) != 1 || page.HasMore || page.Streams[0].Name != "s3" {
		t.Fatalf("page 2: %+v %v", page, err)
	}
	n := 0
	for _, err := range b.AllStreams(ctx, "") {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != 4 {
		t.Fatalf("AllStreams: %d streams", n)
	}
	if err := b.DeleteStream(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.GetStreamConfig(ctx, "s1"); !errors.As(err, &ae) || ae.Code != api.CodeStreamNotFound || !IsDefinite(err) {
		t.Fatalf("deleted stream: %v", err)
	}
}

// TestUnaryRoundTrip appends binary records with headers and timestamps in
// both encodings and reads them back exactly.
func TestUnaryRoundTrip(t *testing.T) {
	for _, enc := range []Encoding{EncodingProto, EncodingJSON} {
		t.Run(map[Encoding]string{EncodingProto: "proto", EncodingJSON: "json"}[enc], func(t *testing.T) {
			_, _, s := setup(t, sdktest.Options{}, func(c *Config) { c.Encoding = enc })
			ctx := testCtx(t)
			in := &api.AppendInput{Records: []api.Record{
				{Body: []byte{0x00, 0xff, 0xfe, 'x'}, Headers: []api.Header{{Name: []byte("k\x00"), Value: []byte{0xff}}}},
				{Body: []byte("plain"), Timestamp: api.Uint64(1000)},
				{},
			}}
			ack, err := s.Append(ctx, in)
			if err != nil {
				t.Fatal(err)
			}
			if ack.Start.SeqNum != 0 || ack.End.SeqNum != 3 || ack.Tail.SeqNum != 3 {
				t.Fatalf("ack %+v", ack)
			}
			b, err := s.Read(ctx, api.ReadRequest{From: api.FromSeqNum, Value: 0})
			if err != nil {
				t.Fatal(err)
			}
			if len(b.Records) != 3 {
				t.Fatalf("read %d records", len(b.Records))
			}
			for i, r := range b.Records {
				if r.SeqNum != uint64(i) || !bytes.Equal(r.Body, in.Records[i].Body) || len(r.Headers) != len(in.Records[i].Headers) {
					t.Fatalf("record %d: %+v", i, r)
				}
				for j, h := range r.Headers {
					if !bytes.Equal(h.Name, in.Records[i].Headers[j].Name) || !bytes.Equal(h.Value, in.Records[i].Headers[j].Value) {
						t.Fatalf("record %d header %d: %+v", i, j, h)
					}
				}
			}
			// The server caps a client timestamp to now and keeps them
			// non-decreasing.
			if *b.Records[1].Timestamp < *b.Records[0].Timestamp || *b.Records[2].Timestamp < *b.Records[1].Timestamp {
				t.Fatalf("timestamps decrease: %d %d %d", *b.Records[0].Timestamp, *b.Records[1].Timestamp, *b.Records[2].Timestamp)
			}
			tail, err := s.CheckTail(ctx)
			if err != nil || tail.SeqNum != 3 {
				t.Fatalf("tail %+v %v", tail, err)
			}
		})
	}
}

func TestReadErrorsAndLimits(t *testing.T) {
	_, _, s := setup(t, sdktest.Options{}, nil)
	ctx := testCtx(t)
	_, err := s.Read(ctx, api.ReadRequest{From: api.FromSeqNum, Value: 0})
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Status != http.StatusRequestedRangeNotSatisfiable {
		t.Fatalf("empty stream read: %v", err)
	}
	if tail, ok := ae.Tail(); !ok || tail.SeqNum != 0 {
		t.Fatalf("416 tail %+v %v", tail, ok)
	}
	appendText(t, s, "a", "b", "c", "d", "e")
	b, err := s.Read(ctx, api.ReadRequest{From: api.FromTailOffset, Value: 2})
	if err != nil || len(b.Records) != 2 || b.Records[0].SeqNum != 3 {
		t.Fatalf("tail offset read: %+v %v", b, err)
	}
	b, err = s.Read(ctx, api.ReadRequest{From: api.FromSeqNum, Value: 1, Count: api.Uint64(2)})
	if err != nil || len(b.Records) != 2 || string(b.Records[1].Body) != "c" {
		t.Fatalf("count read: %+v %v", b, err)
	}
	_, err = s.Read(ctx, api.ReadRequest{From: api.FromSeqNum, Value: 9})
	if !errors.As(err, &ae) || ae.Status != http.StatusRequestedRangeNotSatisfiable {
		t.Fatalf("past tail: %v", err)
	}
	if tail, _ := ae.Tail(); tail.SeqNum != 5 {
		t.Fatalf("416 tail %+v", tail)
	}
	// 416 is definite and not retryable: one request.
	if !IsDefinite(err) {
		t.Fatal("416 should be definite")
	}
}

// TestLongPoll reads at the tail with a wait and gets a record appended
// while it waits.
func TestLongPoll(t *testing.T) {
	srv, _, s := setup(t, sdktest.Options{}, nil)
	ctx := testCtx(t)
	appended := make(chan error, 1)
	go func() {
		// Append once the poll waits at the tail.
		if err := poll.Wait(5*time.Second, func() error {
			if srv.ReadsFollowing() == 0 {
				return errors.New("no long poll waiting")
			}
			return nil
		}); err != nil {
			appended <- err
			return
		}
		_, err := s.Append(ctx, &api.AppendInput{Records: textRecords("late")})
		appended <- err
	}()
	defer func() {
		if err := <-appended; err != nil {
			t.Error(err)
		}
	}()
	wait := 5 * time.Second
	start := time.Now()
	b, err := s.Read(ctx, api.ReadRequest{From: api.FromTailOffset, Wait: &wait})
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Records) != 1 || string(b.Records[0].Body) != "late" {
		t.Fatalf("got %+v", b)
	}
	if time.Since(start) >= wait {
		t.Fatalf("long poll took %v", time.Since(start))
	}
}

func TestAppendConditions(t *testing.T) {
	_, _, s := setup(t, sdktest.Options{}, nil)
	ctx := testCtx(t)
	appendText(t, s, "a", "b")
	_, err := s.Append(ctx, &api.AppendInput{Records: textRecords("c"), MatchSeqNum: api.Uint64(1)})
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Status != http.StatusPreconditionFailed {
		t.Fatalf("stale match_seq_num: %v", err)
	}
	if n, ok := ae.ExpectedSeqNum(); !ok || n != 2 {
		t.Fatalf("expected seq num %d %v", n, ok)
	}
	if _, err := s.Append(ctx, &api.AppendInput{Records: []api.Record{api.FenceRecord("w1")}}); err != nil {
		t.Fatal(err)
	}
	_, err = s.Append(ctx, &api.AppendInput{Records: textRecords("x"), FencingToken: api.String("w2")})
	if !errors.As(err, &ae) {
		t.Fatalf("wrong token: %v", err)
	}
	if tok, ok := ae.CurrentFencingToken(); !ok || tok != "w1" {
		t.Fatalf("current token %q %v", tok, ok)
	}
	if _, err := s.Append(ctx, &api.AppendInput{Records: textRecords("x"), FencingToken: api.String("w1")}); err != nil {
		t.Fatal(err)
	}
	// Local validation: an empty batch never leaves the client.
	_, err = s.Append(ctx, &api.AppendInput{})
	if !errors.As(err, &ae) || ae.Status != http.StatusUnprocessableEntity || !IsDefinite(err) {
		t.Fatalf("empty batch: %v", err)
	}
}
