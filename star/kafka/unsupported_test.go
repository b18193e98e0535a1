package kafka_test

import (
	"context"
	"encoding/binary"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ApiVersions advertises exactly what is served (docs/kafka.md), each
// within what kmsg encodes; a version above ours gets the v0 answer with
// UNSUPPORTED_VERSION and our keys.
func TestApiVersionsAdvertisesExactlyWhatIsServed(t *testing.T) {
	s := startStar(t, true)
	r := dialRaw(t, s.kafka)
	resp, err := r.send(kmsg.NewPtrApiVersionsRequest())
	if err != nil {
		t.Fatal(err)
	}
	av := resp.(*kmsg.ApiVersionsResponse)
	type kv struct{ key, lo, hi int16 }
	var got []kv
	for _, k := range av.ApiKeys {
		got = append(got, kv{k.ApiKey, k.MinVersion, k.MaxVersion})
		if req := kmsg.RequestForKey(k.ApiKey); req == nil || req.MaxVersion() < k.MaxVersion {
			t.Errorf("key %d v%d is advertised beyond what kmsg encodes", k.ApiKey, k.MaxVersion)
		}
	}
	want := []kv{{0, 3, 11}, {1, 4, 12}, {2, 1, 6}, {3, 0, 12}, {17, 0, 1}, {18, 0, 3},
		{19, 0, 7}, {20, 0, 6}, {32, 0, 4}, {36, 0, 2}, {37, 0, 3}, {60, 0, 1}}
	if av.ErrorCode != 0 || !slices.Equal(got, want) {
		t.Fatalf("ApiVersions: code %d, keys %v\nwant %v", av.ErrorCode, got, want)
	}

	// v4, which this face does not serve: answered as v0.
	req := kmsg.NewPtrApiVersionsRequest()
	req.Version = 4
	frame := kmsg.NewRequestFormatter().AppendRequest(nil, req, 7)
	if _, err := r.c.Write(frame); err != nil {
		t.Fatal(err)
	}
	body := readFrame(t, r)
	v0 := kmsg.NewPtrApiVersionsResponse()
	v0.Version = 0
	if err := v0.ReadFrom(body[4:]); err != nil || v0.ErrorCode != kerr.UnsupportedVersion.Code || len(v0.ApiKeys) != len(want) {
		t.Fatalf("ApiVersions v4: %v, code %d, %d keys", err, v0.ErrorCode, len(v0.ApiKeys))
	}
}

func readFrame(t *testing.T, r *rawConn) []byte {
	t.Helper()
	var size [4]byte
	if _, err := io.ReadFull(r.c, size[:]); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(r.c, body); err != nil {
		t.Fatal(err)
	}
	return body
}

// Consumer groups and transactions are not served: their requests are
// answered UNSUPPORTED_VERSION, which clients do not retry, so a group
// consumer fails at once rather than hanging.
func TestGroupsAndTransactionsUnsupported(t *testing.T) {
	s := startStar(t, true)
	c := s.admin()
	r := dialRaw(t, s.kafka)
	fc := kmsg.NewPtrFindCoordinatorRequest()
	fc.CoordinatorKey = "g"
	resp, err := r.send(fc)
	if err != nil || resp.(*kmsg.FindCoordinatorResponse).ErrorCode != kerr.UnsupportedVersion.Code {
		t.Fatalf("FindCoordinator: %v %+v", err, resp)
	}
	ip := kmsg.NewPtrInitProducerIDRequest()
	ip.TransactionalID = kmsg.StringPtr("txn")
	resp, err = r.send(ip)
	if err != nil || resp.(*kmsg.InitProducerIDResponse).ErrorCode != kerr.UnsupportedVersion.Code {
		t.Fatalf("InitProducerID: %v %+v", err, resp)
	}
	jg := kmsg.NewPtrJoinGroupRequest()
	jg.Group, jg.ProtocolType = "g", "consumer"
	if resp, err = r.send(jg); err != nil || resp.(*kmsg.JoinGroupResponse).ErrorCode != kerr.UnsupportedVersion.Code {
		t.Fatalf("JoinGroup: %v %+v", err, resp)
	}

	createTopic(t, c, "grouped", 1)
	g := s.admin(kgo.ConsumerGroup("g"), kgo.ConsumeTopics("grouped"))
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	fs := g.PollFetches(ctx)
	if ctx.Err() != nil {
		t.Fatal("a group consumer hung instead of failing")
	}
	// kgo does not send what ApiVersions does not list: it fails the
	// poll itself.
	if err := fs.Err0(); err == nil {
		t.Fatal("a group consumer's poll did not fail")
	} else {
		t.Logf("a group consumer's poll: %v", err)
	}
}

// A request of a key the star does not know, or a frame over the bound,
// ends the connection.
func TestUnknownKeyAndHugeFrameCloseTheConnection(t *testing.T) {
	s := startStar(t, true)
	r := dialRaw(t, s.kafka)
	frame := []byte{0, 0, 0, 10, 0x27, 0x0f, 0, 0, 0, 0, 0, 1, 0xff, 0xff} // key 9999
	if _, err := r.c.Write(frame); err != nil {
		t.Fatal(err)
	}
	if _, err := r.c.Read(make([]byte, 1)); err == nil {
		t.Fatal("a request of an unknown key was answered")
	}
	r = dialRaw(t, s.kafka)
	if _, err := r.c.Write([]byte{0x40, 0, 0, 0}); err != nil { // 1 GiB
		t.Fatal(err)
	}
	if _, err := r.c.Read(make([]byte, 1)); err == nil {
		t.Fatal("a 1 GiB frame was not refused")
	}
}
