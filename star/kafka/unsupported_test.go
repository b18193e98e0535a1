package kafka_test

import (
	"encoding/binary"
	"io"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
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
	want := []kv{{0, 3, 11}, {1, 4, 12}, {2, 1, 6}, {3, 0, 12},
		{8, 0, 8}, {9, 1, 8}, {10, 0, 4}, {11, 0, 9}, {12, 0, 4}, {13, 0, 5}, {14, 0, 5}, {15, 0, 5}, {16, 0, 4},
		{17, 0, 1}, {18, 0, 3}, {19, 0, 7}, {20, 0, 6}, {22, 0, 4}, {32, 0, 4}, {36, 0, 2}, {37, 0, 3}, {42, 0, 2}, {60, 0, 1}}
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

// Transactions are not served: their requests, a FindCoordinator of a
// transactional id, and a group request at a version not served are
// answered UNSUPPORTED_VERSION, which clients do not retry, so they fail
// at once rather than hang.
func TestTransactionsUnsupported(t *testing.T) {
	s := startStar(t, true)
	r := dialRaw(t, s.kafka)
	fc := kmsg.NewPtrFindCoordinatorRequest()
	fc.Version, fc.CoordinatorKey, fc.CoordinatorType = 3, "txn", 1
	resp, err := r.send(fc)
	if err != nil || resp.(*kmsg.FindCoordinatorResponse).ErrorCode != kerr.UnsupportedVersion.Code {
		t.Fatalf("FindCoordinator of a transactional id: %v %+v", err, resp)
	}
	for _, v := range []int16{4, 5} { // served (for idempotent producers), and not
		ip := kmsg.NewPtrInitProducerIDRequest()
		ip.Version, ip.TransactionalID = v, kmsg.StringPtr("txn")
		resp, err = r.send(ip)
		if err != nil || resp.(*kmsg.InitProducerIDResponse).ErrorCode != kerr.UnsupportedVersion.Code {
			t.Fatalf("InitProducerID v%d of a transactional id: %v %+v", v, err, resp)
		}
	}
	of := kmsg.NewPtrOffsetFetchRequest() // v9: KIP-848's, not served
	of.Version = 9
	of.Groups = []kmsg.OffsetFetchRequestGroup{{Group: "g"}}
	if resp, err = r.send(of); err != nil || len(resp.(*kmsg.OffsetFetchResponse).Groups) != 1 ||
		resp.(*kmsg.OffsetFetchResponse).Groups[0].ErrorCode != kerr.UnsupportedVersion.Code {
		t.Fatalf("OffsetFetch v9: %v %+v", err, resp)
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
