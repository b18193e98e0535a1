package dynamo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/meta/metatest"
	"github.com/starlog/starlog/shared/testsvc"
)

// dynamoLocal is the DynamoDB Local every test of the package shares,
// started on first use; each test gets its own table.
var dynamoLocal testsvc.SharedDynamo

func TestMain(m *testing.M) {
	code := m.Run()
	dynamoLocal.Stop()
	os.Exit(code)
}

func newClient(t *testing.T) *dynamodb.Client {
	t.Helper()
	c, err := NewClient(context.Background(), Config{
		Endpoint:  dynamoLocal.Get(t).Endpoint,
		Region:    testsvc.DynamoRegion,
		AccessKey: testsvc.DynamoAccessKey,
		SecretKey: testsvc.DynamoSecretKey,
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// newTable creates a fresh table for t and drops it when t ends.
func newTable(t *testing.T, client *dynamodb.Client) string {
	t.Helper()
	table := dynamoLocal.Get(t).TableName(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := CreateTable(ctx, client, table); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, err := client.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(table)})
		if err != nil {
			t.Errorf("drop table %s: %v", table, err)
		}
	})
	return table
}

func TestConformance(t *testing.T) {
	client := newClient(t)
	metatest.Run(t, func(t *testing.T) meta.Store {
		return New(client, newTable(t, client))
	})
}

func TestCreateTableTwice(t *testing.T) {
	client := newClient(t)
	table := newTable(t, client)
	if err := CreateTable(context.Background(), client, table); err != nil {
		t.Fatalf("CreateTable of an existing table: %v", err)
	}
}

func TestMissingTable(t *testing.T) {
	s := New(newClient(t), "no-such-table")
	_, err := s.Get(context.Background(), "p", "s")
	if err == nil || errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("Get on a missing table = %v; want an error that is not ErrNotFound", err)
	}
}

// proxy sits between a client and DynamoDB Local and lets a test lose
// replies, fail requests and rewrite batches: the faults a real network and
// a throttled table produce.
type proxy struct {
	t       *testing.T
	backend string
	srv     *httptest.Server

	mu   sync.Mutex
	hook func(op string, body []byte) action // nil: pass through
	ops  map[string]int
}

type action struct {
	forward bool   // send the request on
	lose    bool   // then drop the reply and answer 500
	before  func() // run before answering (another writer's move)
	// rewrite returns the body to forward and, if not nil, the reply to
	// give instead of the table's.
	rewrite func([]byte) ([]byte, []byte)
}

func newProxy(t *testing.T) *proxy {
	p := &proxy{t: t, backend: dynamoLocal.Get(t).Endpoint, ops: map[string]int{}}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(p.srv.Close)
	return p
}

// arm sets the hook for the next requests; it stays until replaced.
func (p *proxy) arm(h func(op string, body []byte) action) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hook = h
}

func (p *proxy) count(op string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ops[op]
}

func (p *proxy) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	op := r.Header.Get("X-Amz-Target")
	op = op[strings.LastIndexByte(op, '.')+1:]
	p.mu.Lock()
	p.ops[op]++
	a := action{forward: true}
	if p.hook != nil {
		a = p.hook(op, body)
	}
	p.mu.Unlock()

	var reply []byte
	if a.rewrite != nil {
		body, reply = a.rewrite(body)
	}
	var resp *http.Response
	if a.forward {
		req, err := http.NewRequestWithContext(r.Context(), r.Method, p.backend+r.URL.RequestURI(), bytes.NewReader(body))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		req.Header = r.Header.Clone()
		req.Host = r.Host
		resp, err = http.DefaultClient.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
	}
	if a.before != nil {
		a.before()
	}
	switch {
	case reply != nil:
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.Write(reply)
	case a.lose || !a.forward:
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.WriteHeader(http.StatusInternalServerError)
		io.WriteString(w, `{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"injected by test proxy"}`)
	default:
		for k, vs := range resp.Header {
			for _, v := range vs {
				w.Header().Add(k, v)
			}
		}
		w.WriteHeader(resp.StatusCode)
		io.Copy(w, resp.Body)
	}
}

// proxied returns a Store talking through a fresh proxy, plus a Store
// talking directly (the "other writer") on the same table.
func proxied(t *testing.T) (*Store, *Store, *proxy) {
	t.Helper()
	direct := newClient(t)
	table := newTable(t, direct)
	p := newProxy(t)
	opts := direct.Options()
	via := dynamodb.New(opts, func(o *dynamodb.Options) {
		o.BaseEndpoint = aws.String(p.srv.URL)
		o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) {
			so.MaxAttempts = 4
			so.MaxBackoff = 20 * time.Millisecond
		})
	})
	return New(via, table), New(direct, table), p
}

// once returns a hook that applies a to the first request of op only.
func once(op string, a action) func(string, []byte) action {
	done := false
	return func(got string, _ []byte) action {
		if got != op || done {
			return action{forward: true}
		}
		done = true
		return a
	}
}

// TestRetriedCASThatApplied: the first attempt of an IfVer put applies but
// its reply is lost; the SDK's retry fails the condition on our own write.
// The Store must report success with the version it made.
func TestRetriedCASThatApplied(t *testing.T) {
	ctx := context.Background()
	s, _, p := proxied(t)
	if _, err := s.Put(ctx, "chain#a/standard", "head", []byte("v1"), meta.IfAbsent()); err != nil {
		t.Fatal(err)
	}
	p.arm(once("PutItem", action{forward: true, lose: true}))
	ver, err := s.Put(ctx, "chain#a/standard", "head", []byte("v2"), meta.IfVer(1))
	if err != nil || ver != 2 {
		t.Fatalf("Put IfVer(1) whose first reply was lost = %d, %v; want 2, nil", ver, err)
	}
	if n := p.count("PutItem"); n != 3 {
		t.Fatalf("proxy saw %d PutItem calls, want 3 (create, lost reply, retry)", n)
	}
	it, err := s.Get(ctx, "chain#a/standard", "head")
	if err != nil || it.Ver != 2 || string(it.Val) != "v2" {
		t.Fatalf("after: %+v, %v", it, err)
	}
}

func TestRetriedCreateThatApplied(t *testing.T) {
	ctx := context.Background()
	s, _, p := proxied(t)
	p.arm(once("PutItem", action{forward: true, lose: true}))
	ver, err := s.Put(ctx, "star#a", "reg", []byte("mine"), meta.IfAbsent())
	if err != nil || ver != 1 {
		t.Fatalf("Put IfAbsent whose first reply was lost = %d, %v; want 1, nil", ver, err)
	}
	if n := p.count("PutItem"); n != 2 {
		t.Fatalf("proxy saw %d PutItem calls, want 2", n)
	}
}

// TestRetriedCASThatLost: the first attempt never reaches the table; before
// the retry another writer wins the version. That is a definite failure.
func TestRetriedCASThatLost(t *testing.T) {
	ctx := context.Background()
	s, other, p := proxied(t)
	if _, err := s.Put(ctx, "stream#x", "lease", []byte("v1"), meta.IfAbsent()); err != nil {
		t.Fatal(err)
	}
	p.arm(once("PutItem", action{forward: false, before: func() {
		if _, err := other.Put(ctx, "stream#x", "lease", []byte("theirs"), meta.IfVer(1)); err != nil {
			t.Errorf("other writer: %v", err)
		}
	}}))
	_, err := s.Put(ctx, "stream#x", "lease", []byte("mine"), meta.IfVer(1))
	if !errors.Is(err, meta.ErrConditionFailed) {
		t.Fatalf("Put after losing the race during a retry = %v; want ErrConditionFailed", err)
	}
	if errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("a definite loss reported as unknown: %v", err)
	}
}

// TestRetriedCASAmbiguous: ours applied, its reply was lost, and another
// writer moved the item on before the retry. Nobody can tell whether ours
// applied: the answer must not be the definite ErrConditionFailed.
func TestRetriedCASAmbiguous(t *testing.T) {
	ctx := context.Background()
	s, other, p := proxied(t)
	if _, err := s.Put(ctx, "stream#y", "lease", []byte("v1"), meta.IfAbsent()); err != nil {
		t.Fatal(err)
	}
	p.arm(once("PutItem", action{forward: true, lose: true, before: func() {
		if _, err := other.Put(ctx, "stream#y", "lease", []byte("theirs"), meta.IfVer(2)); err != nil {
			t.Errorf("other writer: %v", err)
		}
	}}))
	_, err := s.Put(ctx, "stream#y", "lease", []byte("mine"), meta.IfVer(1))
	if !errors.Is(err, ErrOutcomeUnknown) || errors.Is(err, meta.ErrConditionFailed) {
		t.Fatalf("ambiguous retried CAS = %v; want ErrOutcomeUnknown only", err)
	}
}

func TestRetriedConditionalDelete(t *testing.T) {
	ctx := context.Background()
	s, _, p := proxied(t)
	if _, err := s.Put(ctx, "stream#z", "r#1", []byte("v"), meta.IfAbsent()); err != nil {
		t.Fatal(err)
	}
	p.arm(once("DeleteItem", action{forward: true, lose: true}))
	err := s.Delete(ctx, "stream#z", "r#1", meta.IfVer(1))
	if !errors.Is(err, ErrOutcomeUnknown) || errors.Is(err, meta.ErrConditionFailed) {
		t.Fatalf("retried conditional delete = %v; want ErrOutcomeUnknown only", err)
	}
	if _, err := s.Get(ctx, "stream#z", "r#1"); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("the delete did apply, yet Get = %v", err)
	}
}

// TestRetriedAlways: an unconditional write whose reply is lost still
// succeeds (its retry is applied a second time, with the same value).
func TestRetriedAlways(t *testing.T) {
	ctx := context.Background()
	s, _, p := proxied(t)
	p.arm(once("UpdateItem", action{forward: true, lose: true}))
	ver, err := s.Put(ctx, "chains", "a/standard", []byte("v"), meta.Always())
	if err != nil {
		t.Fatal(err)
	}
	it, err := s.Get(ctx, "chains", "a/standard")
	if err != nil || string(it.Val) != "v" || it.Ver != ver {
		t.Fatalf("after a retried Always put: %+v, %v (returned ver %d)", it, err, ver)
	}
}

// TestBatchUnprocessed: the table takes only part of each BatchWriteItem
// and hands the rest back as UnprocessedItems; BatchPut resends until all
// are written.
func TestBatchUnprocessed(t *testing.T) {
	ctx := context.Background()
	s, _, p := proxied(t)
	p.arm(func(op string, body []byte) action {
		if op != "BatchWriteItem" {
			return action{forward: true}
		}
		return action{forward: true, rewrite: func(body []byte) ([]byte, []byte) {
			var in struct {
				RequestItems map[string][]json.RawMessage
			}
			if err := json.Unmarshal(body, &in); err != nil {
				t.Errorf("proxy: %v", err)
				return body, nil
			}
			for table, reqs := range in.RequestItems {
				if len(reqs) < 2 {
					return body, nil // let the last one through
				}
				keep, back := reqs[:len(reqs)/2], reqs[len(reqs)/2:]
				fwd, _ := json.Marshal(map[string]any{"RequestItems": map[string]any{table: keep}})
				reply, _ := json.Marshal(map[string]any{"UnprocessedItems": map[string]any{table: back}})
				return fwd, reply
			}
			return body, nil
		}}
	})
	var items []meta.Item
	for i := range 60 {
		items = append(items, meta.Item{PK: "chain#b/express", SK: fmt.Sprintf("m#%03d", i), Val: []byte{byte(i)}})
	}
	if err := s.BatchPut(ctx, items); err != nil {
		t.Fatal(err)
	}
	if n := p.count("BatchWriteItem"); n <= 3 {
		t.Fatalf("%d BatchWriteItem calls; unprocessed items were not resent", n)
	}
	p.arm(nil)
	page, err := s.Query(ctx, meta.Query{PK: "chain#b/express"})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Items) != 60 {
		t.Fatalf("%d items written, want 60", len(page.Items))
	}
	for i, it := range page.Items {
		if it.SK != fmt.Sprintf("m#%03d", i) || !bytes.Equal(it.Val, []byte{byte(i)}) || it.Ver != 1 {
			t.Fatalf("item %d: %+v", i, it)
		}
	}
}

// TestBatchGivesUpWithContext: a table that never takes anything fails the
// batch when the context ends, instead of retrying forever.
func TestBatchGivesUpWithContext(t *testing.T) {
	s, _, p := proxied(t)
	p.arm(func(op string, body []byte) action {
		// Nothing reaches the table; every item comes back unprocessed.
		return action{forward: false, rewrite: func(body []byte) ([]byte, []byte) {
			var in struct{ RequestItems map[string][]json.RawMessage }
			if err := json.Unmarshal(body, &in); err != nil {
				t.Errorf("proxy: %v", err)
			}
			reply, _ := json.Marshal(map[string]any{"UnprocessedItems": in.RequestItems})
			return body, reply
		}}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	err := s.BatchPut(ctx, []meta.Item{{PK: "p", SK: "s", Val: []byte("v")}})
	if err == nil {
		t.Fatal("BatchPut that can never be processed succeeded")
	}
}

func TestJudge(t *testing.T) {
	item := func(ver int64, val string) *meta.Item { return &meta.Item{Ver: ver, Val: []byte(val)} }
	cases := []struct {
		name string
		w    condWrite
		cur  *meta.Item
		want outcome
	}{
		{"cas applied", condWrite{kind: condPutIfVer, ver: 4, val: []byte("x")}, item(5, "x"), applied},
		{"cas lost", condWrite{kind: condPutIfVer, ver: 4, val: []byte("x")}, item(5, "y"), notApplied},
		{"cas moved on", condWrite{kind: condPutIfVer, ver: 4, val: []byte("x")}, item(6, "x"), unknown},
		{"cas recreated", condWrite{kind: condPutIfVer, ver: 4, val: []byte("x")}, item(1, "x"), unknown},
		{"cas deleted", condWrite{kind: condPutIfVer, ver: 4, val: []byte("x")}, nil, unknown},
		{"create applied", condWrite{kind: condPutIfAbsent, val: []byte("x")}, item(1, "x"), applied},
		{"create lost", condWrite{kind: condPutIfAbsent, val: []byte("x")}, item(1, "y"), notApplied},
		{"create moved on", condWrite{kind: condPutIfAbsent, val: []byte("x")}, item(2, "x"), unknown},
		{"create deleted", condWrite{kind: condPutIfAbsent, val: []byte("x")}, nil, unknown},
		{"create empty value", condWrite{kind: condPutIfAbsent}, item(1, ""), applied},
		{"delete gone", condWrite{kind: condDeleteIfVer, ver: 3}, nil, unknown},
		{"delete still there", condWrite{kind: condDeleteIfVer, ver: 3}, item(4, ""), unknown},
	}
	for _, c := range cases {
		if got := c.w.judge(c.cur); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

func TestTokensAreBackendSpecific(t *testing.T) {
	// An sqlite token ('s' tag) must not be taken for a dynamo one.
	if _, err := rules.DecodeToken("c2xlYXNl"); err == nil { // base64url("slease")
		t.Fatal("accepted another backend's page token")
	}
	if sk, err := rules.DecodeToken("ZGxlYXNl"); err != nil || sk != "lease" { // base64url("dlease")
		t.Errorf("own page token: %q, %v", sk, err)
	}
	// Key errors name this backend.
	if err := rules.CheckItem("p", "", nil); err == nil || !strings.HasPrefix(err.Error(), "meta/dynamo: ") {
		t.Errorf("CheckItem error %v does not name meta/dynamo", err)
	}
}
