package kafka_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/poll"
	"github.com/starlog/starlog/shared/testsvc"
	"github.com/starlog/starlog/star/kafka"
)

// rawConn is a bare TCP connection to the listener: requests framed by
// kmsg, for what a well-behaved client would not send.
type rawConn struct {
	t    *testing.T
	c    net.Conn
	corr int32
}

func dialRaw(t *testing.T, addr string) *rawConn {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	return &rawConn{t: t, c: c}
}

// send writes req and reads its response; an error when the star closed
// the connection instead.
func (r *rawConn) send(req kmsg.Request) (kmsg.Response, error) {
	r.corr++
	frame := kmsg.NewRequestFormatter(kmsg.FormatterClientID("raw")).AppendRequest(nil, req, r.corr)
	if _, err := r.c.Write(frame); err != nil {
		return nil, err
	}
	var size [4]byte
	if _, err := io.ReadFull(r.c, size[:]); err != nil {
		return nil, err
	}
	body := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(r.c, body); err != nil {
		return nil, err
	}
	if got := int32(binary.BigEndian.Uint32(body)); got != r.corr {
		r.t.Fatalf("correlation id %d, want %d", got, r.corr)
	}
	body = body[4:]
	resp := req.ResponseKind()
	if resp.IsFlexible() && req.Key() != 18 {
		body = body[1:]
	}
	return resp, resp.ReadFrom(body)
}

func createReq(topic string) *kmsg.CreateTopicsRequest {
	req := kmsg.NewPtrCreateTopicsRequest()
	req.Topics = []kmsg.CreateTopicsRequestTopic{{Topic: topic, NumPartitions: 1, ReplicationFactor: -1}}
	return req
}

// topicRowExists reports whether the star holds a topic row for topic.
func (s *star) topicRowExists(topic string) bool {
	_, err := s.n.Meta().Get(ctxT(s.t), "kafka#"+kafka.DefaultBasin, "t#"+topic)
	if errors.Is(err, meta.ErrNotFound) {
		return false
	}
	if err != nil {
		s.t.Fatal(err)
	}
	return true
}

// issue issues an access token with the admin token.
func (s *star) issue(body string) string {
	s.t.Helper()
	req, _ := http.NewRequest("POST", s.base+"/v1/access-tokens", bytes.NewBufferString(body))
	req.Header.Set("Authorization", "Bearer "+testAdmin)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		AccessToken string `json:"access_token"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 201 {
		s.t.Fatalf("issue: %d %v", resp.StatusCode, err)
	}
	return out.AccessToken
}

// A client that has not authenticated may ask ApiVersions and nothing
// else: a CreateTopics closes its connection with no topic made.
func TestUnauthenticatedRefusedBeforeEffect(t *testing.T) {
	s := startStar(t, false)
	r := dialRaw(t, s.kafka)
	if resp, err := r.send(kmsg.NewPtrApiVersionsRequest()); err != nil || resp.(*kmsg.ApiVersionsResponse).ErrorCode != 0 {
		t.Fatalf("ApiVersions before authenticating: %v", err)
	}
	if _, err := r.send(createReq("sneaky")); err == nil {
		t.Fatal("CreateTopics before authenticating was answered")
	}
	if s.topicRowExists("sneaky") {
		t.Fatal("an unauthenticated CreateTopics made a topic")
	}
	if _, err := s.n.StreamConfig(ctxT(t), kafka.DefaultBasin, "sneaky/0"); err == nil {
		t.Fatal("an unauthenticated CreateTopics made a stream")
	}

	// A token the star does not know fails SASL, and the connection ends.
	bad := s.client("stl_not-a-token")
	_, err := createReq("sneaky").RequestWith(ctxT(t), bad)
	if !errors.Is(err, kerr.SaslAuthenticationFailed) {
		t.Fatalf("CreateTopics with an unknown token: %v, want SASL_AUTHENTICATION_FAILED", err)
	}
	if s.topicRowExists("sneaky") {
		t.Fatal("a CreateTopics with an unknown token made a topic")
	}
}

// A token scoped to streams "allowed-…" of the basin creates, produces
// and consumes its topics, and is refused on the others before any
// effect: no topic made, no record appended, nothing read or listed.
func TestOutOfScopeRefusedBeforeEffect(t *testing.T) {
	s := startStar(t, false)
	tok := s.issue(`{"id":"kafka-scoped","scope":{"basins":{"exact":"` + kafka.DefaultBasin + `"},"streams":{"prefix":"allowed-"},"op_groups":{"stream":{"read":true,"write":true}}}}`)
	admin := s.admin()
	createTopic(t, admin, "denied-y", 1)
	c := s.client(tok)

	resp, err := createReq("denied-x").RequestWith(ctxT(t), c)
	if err != nil || resp.Topics[0].ErrorCode != kerr.TopicAuthorizationFailed.Code {
		t.Fatalf("CreateTopics out of scope: %v %+v", err, resp)
	}
	if s.topicRowExists("denied-x") {
		t.Fatal("an out-of-scope CreateTopics made a topic")
	}
	createTopic(t, c, "allowed-a", 1)

	prod := kmsg.NewPtrProduceRequest()
	prod.Acks, prod.TimeoutMillis = -1, 5000
	batch := encodeBatch(t, []byte("nope"))
	prod.Topics = []kmsg.ProduceRequestTopic{{Topic: "denied-y", Partitions: []kmsg.ProduceRequestTopicPartition{{Partition: 0, Records: batch}}}}
	presp, err := prod.RequestWith(ctxT(t), c)
	if err != nil || presp.Topics[0].Partitions[0].ErrorCode != kerr.TopicAuthorizationFailed.Code {
		t.Fatalf("Produce out of scope: %v %+v", err, presp)
	}
	if tail, err := s.n.CheckTail(ctxT(t), kafka.DefaultBasin, "denied-y/0", nil); err != nil || tail.SeqNum != 0 {
		t.Fatalf("an out-of-scope produce appended: tail %d, %v", tail.SeqNum, err)
	}
	fresp, err := fetchReq("denied-y", 0, 0, 0, 1).RequestWith(ctxT(t), c)
	if err != nil || fresp.Topics[0].Partitions[0].ErrorCode != kerr.TopicAuthorizationFailed.Code {
		t.Fatalf("Fetch out of scope: %v %+v", err, fresp)
	}
	md := metadata(t, c)
	if findTopic(md, "denied-y") != nil || findTopic(md, "allowed-a") == nil {
		t.Fatalf("the scoped token's topic listing: %d topics", len(md.Topics))
	}
	if mt := findTopic(metadata(t, c, "denied-y"), "denied-y"); mt == nil || mt.ErrorCode != kerr.TopicAuthorizationFailed.Code {
		t.Fatalf("metadata of an out-of-scope topic: %+v", mt)
	}
	dt := kmsg.NewPtrDeleteTopicsRequest()
	dt.TopicNames = []string{"denied-y"}                                             // v0–5
	dt.Topics = []kmsg.DeleteTopicsRequestTopic{{Topic: kmsg.StringPtr("denied-y")}} // v6
	dtr, err := dt.RequestWith(ctxT(t), c)
	if err != nil || dtr.Topics[0].ErrorCode != kerr.TopicAuthorizationFailed.Code || !s.topicRowExists("denied-y") {
		t.Fatalf("DeleteTopics out of scope: %v %+v", err, dtr)
	}

	p := s.client(tok, kgo.DefaultProduceTopic("allowed-a"))
	if err := p.ProduceSync(ctxT(t), kgo.StringRecord("yes")).FirstErr(); err != nil {
		t.Fatalf("produce in scope: %v", err)
	}
}

// A token that prefixes stream names is refused at SASL: the Kafka face
// names topics as they are stored.
func TestAutoPrefixTokenRefused(t *testing.T) {
	s := startStar(t, false)
	tok := s.issue(`{"id":"kafka-prefixed","auto_prefix_streams":true,"scope":{"basins":{"exact":"` + kafka.DefaultBasin + `"},"streams":{"prefix":"tenant/"},"op_groups":{"stream":{"read":true,"write":true}}}}`)
	_, err := createReq("t1").RequestWith(ctxT(t), s.client(tok))
	if !errors.Is(err, kerr.SaslAuthenticationFailed) {
		t.Fatalf("an auto-prefix token: %v, want SASL_AUTHENTICATION_FAILED", err)
	}
}

// encodeBatch is one uncompressed record batch v2 of values, as a
// producer sends it (kgo's own encoder is internal; kmsg encodes).
func encodeBatch(t *testing.T, values ...[]byte) []byte {
	t.Helper()
	return kafka.EncodeTestBatch(values...)
}

// A token revoked while its connection is open stops it: within the
// recheck bound the next request is refused, before any effect.
func TestRevokedTokenStopsTheConnection(t *testing.T) {
	s := startStar(t, false)
	tok := s.issue(`{"id":"kafka-revoked","scope":{"basins":{"exact":"` + kafka.DefaultBasin + `"},"streams":{"prefix":""},"op_groups":{"stream":{"read":true,"write":true}}}}`)
	c := s.client(tok, kgo.RetryTimeout(time.Second))
	createTopic(t, c, "before", 1)
	req, _ := http.NewRequest("DELETE", s.base+"/v1/access-tokens/kafka-revoked", nil)
	req.Header.Set("Authorization", "Bearer "+testAdmin)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 204 {
		t.Fatalf("revoke: %v %v", err, resp)
	}
	resp.Body.Close()
	n := 0
	poll.UntilErr(t, 10*time.Second, "the revoked token's refusal", func() error {
		n++
		topic := fmt.Sprintf("after-%d", n)
		_, err := createReq(topic).RequestWith(ctxT(t), c)
		if err == nil {
			return fmt.Errorf("CreateTopics %s was answered", topic)
		}
		if s.topicRowExists(topic) {
			t.Fatalf("a revoked token's CreateTopics made %s", topic)
		}
		return nil
	})
}

// A connection that does not authenticate within AuthTimeout is closed;
// past MaxConns a new connection is closed at once.
func TestConnectionBounds(t *testing.T) {
	s := startStarOn(t, false, testsvc.SQLite(t), func(c *kafka.Config) {
		c.AuthTimeout, c.MaxConns = 200*time.Millisecond, 2
	})
	a := dialRaw(t, s.kafka)
	if _, err := a.send(kmsg.NewPtrApiVersionsRequest()); err != nil {
		t.Fatal(err)
	}
	b := dialRaw(t, s.kafka)
	if _, err := b.send(kmsg.NewPtrApiVersionsRequest()); err != nil {
		t.Fatal(err)
	}
	third := dialRaw(t, s.kafka)
	if _, err := third.send(kmsg.NewPtrApiVersionsRequest()); err == nil {
		t.Fatal("a connection past MaxConns was served")
	}
	start := time.Now()
	if _, err := a.c.Read(make([]byte, 1)); err == nil {
		t.Fatal("an unauthenticated connection got bytes it did not ask for")
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("an unauthenticated connection was closed after %v, bound 200ms", el)
	}
}

// SaslHandshake v0, then the PLAIN message as a bare frame answered by
// an empty one: the exchange librdkafka (kcat) needs advertised before it
// authenticates at all. A wrong token closes the connection.
func TestSaslHandshakeV0(t *testing.T) {
	s := startStar(t, false)
	for _, tc := range []struct {
		token string
		ok    bool
	}{{testAdmin, true}, {"stl_wrong", false}} {
		r := dialRaw(t, s.kafka)
		hs := kmsg.NewPtrSASLHandshakeRequest()
		hs.Version, hs.Mechanism = 0, "PLAIN"
		resp, err := r.send(hs)
		if err != nil || resp.(*kmsg.SASLHandshakeResponse).ErrorCode != 0 {
			t.Fatalf("SaslHandshake v0: %v %+v", err, resp)
		}
		msg := []byte("\x00user\x00" + tc.token)
		if _, err := r.c.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(msg))), msg...)); err != nil {
			t.Fatal(err)
		}
		var size [4]byte
		_, err = io.ReadFull(r.c, size[:])
		if !tc.ok {
			if err == nil {
				t.Fatal("a wrong token was answered")
			}
			continue
		}
		if err != nil || binary.BigEndian.Uint32(size[:]) != 0 {
			t.Fatalf("the answer to PLAIN: %v %v", err, size)
		}
		if _, err := r.send(createReq("after-v0")); err != nil || !s.topicRowExists("after-v0") {
			t.Fatalf("a request after the v0 exchange: %v", err)
		}
	}
}
