// Package dynamo is the DynamoDB metastore backend (docs/design.md §5) on
// aws-sdk-go-v2. It works against DynamoDB, DynamoDB Local and dynalite: it
// uses single-item operations and BatchWriteItem only, never transactions.
//
// Table: pk (S, HASH), sk (S, RANGE); attributes ver (N) and val (B).
// Reads are strongly consistent. Versions: a created item has ver 1; Put
// with Always or IfVer adds one; BatchPut writes ver 1 whether or not the
// item existed, because BatchWriteItem cannot evaluate expressions (the
// sqlite backend does the same). Never mix BatchPut and CAS on one key.
//
// # Retried conditional writes
//
// The SDK retries throttling, 5xx and network errors. A conditional write
// is not idempotent across such retries: if the first attempt applied and
// its reply was lost, the retry finds its own write and fails its
// condition. The Store counts attempts, and when a conditional write that
// took more than one attempt ends in ConditionalCheckFailed it reads the
// item back (strongly consistent) to decide:
//
//   - the item holds exactly what this write would have left (its value at
//     the version it would have written): the write applied; report success;
//   - the item holds a different value at that version: another writer won
//     and this write never applied; report meta.ErrConditionFailed;
//   - anything else (a later version, a deleted item, any conditional
//     delete): the outcome cannot be known; report ErrOutcomeUnknown, never
//     meta.ErrConditionFailed, which stays definite.
//
// Two writers of byte-identical values at the same version cannot be told
// apart, so both may succeed; the row layouts make such writes equivalent.
// The judgement also assumes the item was not deleted and recreated back to
// the same version within the retry window (no row is used that way).
// Callers treat ErrOutcomeUnknown like any transient error: re-read, then
// decide. An unconditional Put (Always) that is retried after applying adds
// one more to ver than intended; its value is the same.
package dynamo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"
	"github.com/cenkalti/backoff/v5"
	"golang.org/x/sync/errgroup"

	"github.com/starlog/starlog/shared/awsretry"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/meta/internal/keyplan"
)

// DefaultLimit is the page size of a Query without a Limit.
const DefaultLimit = 1000

// rules check keys before any call, as the sqlite backend does, and tag
// this backend's page tokens 'd'.
var rules = keyplan.Rules{Backend: "meta/dynamo", TokenTag: 'd', DefaultLimit: DefaultLimit}

// batchSize is BatchWriteItem's per-call item limit.
const batchSize = 25

// batchParallel is how many BatchWriteItem calls one BatchPut or
// BatchDelete keeps in flight.
const batchParallel = 4

// ErrOutcomeUnknown reports a conditional write whose outcome cannot be
// known: an attempt may have applied before a retry failed the condition.
var ErrOutcomeUnknown = errors.New("meta/dynamo: conditional write outcome unknown after retry")

// Attribute names.
const (
	attrPK  = "pk"
	attrSK  = "sk"
	attrVer = "ver"
	attrVal = "val"
)

// Config says how to reach DynamoDB.
type Config struct {
	// Endpoint overrides the service endpoint (DynamoDB Local, dynalite);
	// empty means AWS's regional endpoint.
	Endpoint string
	Region   string
	// AccessKey and SecretKey are static credentials; empty means the
	// default credential chain (environment, shared config, instance role).
	AccessKey, SecretKey string
	// MaxAttempts bounds the SDK's attempts per call (0: awsretry's).
	MaxAttempts int
	// APIOptions are extra SDK middleware on every call (the rehearsal's
	// operation recorder, shared/awsrecord); nil in production.
	APIOptions []func(*middleware.Stack) error
}

// NewClient builds a DynamoDB client from cfg.
func NewClient(ctx context.Context, cfg Config) (*dynamodb.Client, error) {
	var opts []func(*config.LoadOptions) error
	if cfg.Region != "" {
		opts = append(opts, config.WithRegion(cfg.Region))
	}
	if cfg.AccessKey != "" || cfg.SecretKey != "" {
		opts = append(opts, config.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(cfg.AccessKey, cfg.SecretKey, "")))
	}
	opts = append(opts, config.WithRetryer(awsretry.New(cfg.MaxAttempts)))
	if len(cfg.APIOptions) > 0 {
		opts = append(opts, config.WithAPIOptions(cfg.APIOptions))
	}
	awsCfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("meta/dynamo: load AWS config: %w", err)
	}
	return dynamodb.NewFromConfig(awsCfg, func(o *dynamodb.Options) {
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
	}), nil
}

// CreateTable creates the metastore table (on-demand billing) and waits
// until it is active. A table that already exists is fine. For development
// and tests; production tables come from the CDK stack.
func CreateTable(ctx context.Context, client *dynamodb.Client, table string) error {
	_, err := client.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName: aws.String(table),
		AttributeDefinitions: []types.AttributeDefinition{
			{AttributeName: aws.String(attrPK), AttributeType: types.ScalarAttributeTypeS},
			{AttributeName: aws.String(attrSK), AttributeType: types.ScalarAttributeTypeS},
		},
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String(attrPK), KeyType: types.KeyTypeHash},
			{AttributeName: aws.String(attrSK), KeyType: types.KeyTypeRange},
		},
		BillingMode: types.BillingModePayPerRequest,
	})
	var inUse *types.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) {
		return fmt.Errorf("meta/dynamo: create table %s: %w", table, err)
	}
	w := dynamodb.NewTableExistsWaiter(client, func(o *dynamodb.TableExistsWaiterOptions) {
		o.MinDelay, o.MaxDelay = 100*time.Millisecond, 2*time.Second
	})
	if err := w.Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)}, 5*time.Minute); err != nil {
		return fmt.Errorf("meta/dynamo: wait for table %s: %w", table, err)
	}
	return nil
}

// Store is a meta.Store on one DynamoDB table.
type Store struct {
	client *dynamodb.Client
	table  *string
	log    *slog.Logger
}

var _ meta.Store = (*Store)(nil)

// New returns a Store on table. It logs through slog.Default; see
// WithLogger.
func New(client *dynamodb.Client, table string) *Store {
	return &Store{client: client, table: aws.String(table), log: slog.Default()}
}

// WithLogger returns a copy of s that logs to l.
func (s *Store) WithLogger(l *slog.Logger) *Store {
	c := *s
	c.log = l
	return &c
}

// Close is a no-op: the client is the caller's.
func (s *Store) Close() error { return nil }

func keyOf(pk, sk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		attrPK: &types.AttributeValueMemberS{Value: pk},
		attrSK: &types.AttributeValueMemberS{Value: sk},
	}
}

func num(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}

func bin(b []byte) types.AttributeValue {
	if b == nil {
		b = []byte{}
	}
	return &types.AttributeValueMemberB{Value: b}
}

// names maps the expression placeholders to attribute names, so no
// attribute ever collides with a DynamoDB reserved word.
var names = map[string]string{"#pk": attrPK, "#sk": attrSK, "#ver": attrVer, "#val": attrVal}

func namesFor(keys ...string) map[string]string {
	m := make(map[string]string, len(keys))
	for _, k := range keys {
		m[k] = names[k]
	}
	return m
}

// Get returns the item or meta.ErrNotFound.
func (s *Store) Get(ctx context.Context, pk, sk string) (meta.Item, error) {
	if err := rules.CheckKey(pk, sk); err != nil {
		return meta.Item{}, err
	}
	it, found, err := s.get(ctx, pk, sk)
	if err != nil {
		return meta.Item{}, fmt.Errorf("meta/dynamo: get pk=%s sk=%s: %w", pk, sk, err)
	}
	if !found {
		return meta.Item{}, fmt.Errorf("meta/dynamo: get pk=%s sk=%s: %w", pk, sk, meta.ErrNotFound)
	}
	return it, nil
}

func (s *Store) get(ctx context.Context, pk, sk string) (meta.Item, bool, error) {
	out, err := s.client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      s.table,
		Key:            keyOf(pk, sk),
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return meta.Item{}, false, err
	}
	if out.Item == nil {
		return meta.Item{}, false, nil
	}
	it, err := itemFrom(out.Item)
	return it, err == nil, err
}

// Put writes val if cond holds and returns the new version.
func (s *Store) Put(ctx context.Context, pk, sk string, val []byte, cond meta.Cond) (int64, error) {
	if err := rules.CheckItem(pk, sk, val); err != nil {
		return 0, err
	}
	ver, err := s.put(ctx, pk, sk, val, cond)
	if err != nil {
		return 0, fmt.Errorf("meta/dynamo: put pk=%s sk=%s: %w", pk, sk, err)
	}
	return ver, nil
}

func (s *Store) put(ctx context.Context, pk, sk string, val []byte, cond meta.Cond) (int64, error) {
	if cond.IsAlways() {
		out, err := s.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:                s.table,
			Key:                      keyOf(pk, sk),
			UpdateExpression:         aws.String("SET #val = :val, #ver = if_not_exists(#ver, :zero) + :one"),
			ExpressionAttributeNames: namesFor("#val", "#ver"),
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":val": bin(val), ":zero": num(0), ":one": num(1),
			},
			ReturnValues: types.ReturnValueUpdatedNew,
		})
		if err != nil {
			return 0, err
		}
		return parseVer(out.Attributes)
	}

	w := condWrite{val: val}
	in := &dynamodb.PutItemInput{TableName: s.table}
	if v, ok := cond.Ver(); ok {
		w.kind, w.ver = condPutIfVer, v
		in.ConditionExpression = aws.String("#ver = :ver")
		in.ExpressionAttributeNames = namesFor("#ver")
		in.ExpressionAttributeValues = map[string]types.AttributeValue{":ver": num(v)}
	} else {
		w.kind = condPutIfAbsent
		in.ConditionExpression = aws.String("attribute_not_exists(#pk)")
		in.ExpressionAttributeNames = namesFor("#pk")
	}
	newVer := w.newVer()
	in.Item = keyOf(pk, sk)
	in.Item[attrVer] = num(newVer)
	in.Item[attrVal] = bin(val)

	actx, attempts := countingContext(ctx)
	_, err := s.client.PutItem(actx, in, withAttemptCounter)
	if err = s.settle(ctx, pk, sk, w, attempts.Load(), err); err != nil {
		return 0, err
	}
	return newVer, nil
}

// Delete removes the item if cond holds.
func (s *Store) Delete(ctx context.Context, pk, sk string, cond meta.Cond) error {
	if err := rules.CheckKey(pk, sk); err != nil {
		return err
	}
	if cond.IsIfAbsent() {
		return fmt.Errorf("meta/dynamo: delete pk=%s sk=%s: IfAbsent is not a delete condition", pk, sk)
	}
	in := &dynamodb.DeleteItemInput{TableName: s.table, Key: keyOf(pk, sk)}
	v, isVer := cond.Ver()
	if isVer {
		in.ConditionExpression = aws.String("#ver = :ver")
		in.ExpressionAttributeNames = namesFor("#ver")
		in.ExpressionAttributeValues = map[string]types.AttributeValue{":ver": num(v)}
	}
	actx, attempts := countingContext(ctx)
	_, err := s.client.DeleteItem(actx, in, withAttemptCounter)
	if isVer {
		err = s.settle(ctx, pk, sk, condWrite{kind: condDeleteIfVer, ver: v}, attempts.Load(), err)
	}
	if err != nil {
		return fmt.Errorf("meta/dynamo: delete pk=%s sk=%s: %w", pk, sk, err)
	}
	return nil
}

// settle turns a conditional write's error into the contract's: a
// condition failure on the first attempt is definite; after a retry it is
// judged against the item as it now stands (see the package doc).
func (s *Store) settle(ctx context.Context, pk, sk string, w condWrite, attempts int32, err error) error {
	var ccf *types.ConditionalCheckFailedException
	if err == nil || !errors.As(err, &ccf) {
		return err
	}
	if attempts <= 1 {
		return meta.ErrConditionFailed
	}
	cur, found, gerr := s.get(ctx, pk, sk)
	if gerr != nil {
		return fmt.Errorf("%w: reading the item back: %w", ErrOutcomeUnknown, gerr)
	}
	var curp *meta.Item
	if found {
		curp = &cur
	}
	outcome := w.judge(curp)
	s.log.WarnContext(ctx, "meta/dynamo: conditional write failed its condition after a retry",
		"pk", pk, "sk", sk, "attempts", attempts, "outcome", outcome.String())
	switch outcome {
	case applied:
		return nil
	case notApplied:
		return meta.ErrConditionFailed
	}
	return ErrOutcomeUnknown
}

// Query returns one page of a range query.
func (s *Store) Query(ctx context.Context, q meta.Query) (meta.Page, error) {
	p, err := rules.PlanQuery(q)
	if err != nil {
		return meta.Page{}, fmt.Errorf("meta/dynamo: query %s: %w", q.PK, err)
	}
	if p.Empty {
		return meta.Page{}, nil
	}
	cond := "#pk = :pk"
	vals := map[string]types.AttributeValue{":pk": &types.AttributeValueMemberS{Value: q.PK}}
	nm := namesFor("#pk")
	switch {
	case p.From != "" && p.To != "":
		cond += " AND #sk BETWEEN :from AND :to"
	case p.From != "":
		cond += " AND #sk >= :from"
	case p.To != "":
		cond += " AND #sk <= :to"
	}
	if p.From != "" {
		vals[":from"] = &types.AttributeValueMemberS{Value: p.From}
	}
	if p.To != "" {
		vals[":to"] = &types.AttributeValueMemberS{Value: p.To}
	}
	if p.From != "" || p.To != "" {
		nm["#sk"] = attrSK
	}
	in := &dynamodb.QueryInput{
		TableName:                 s.table,
		KeyConditionExpression:    aws.String(cond),
		ExpressionAttributeNames:  nm,
		ExpressionAttributeValues: vals,
		ScanIndexForward:          aws.Bool(!q.Backward),
		ConsistentRead:            aws.Bool(true),
		// One more than asked tells whether a next page exists, so Next is
		// empty exactly on the last page, as in the sqlite backend.
		Limit: aws.Int32(int32(p.Limit + 1)),
	}
	if p.After != "" {
		in.ExclusiveStartKey = keyOf(q.PK, p.After)
	}
	out, err := s.client.Query(ctx, in)
	if err != nil {
		return meta.Page{}, fmt.Errorf("meta/dynamo: query %s: %w", q.PK, err)
	}
	page := meta.Page{Items: make([]meta.Item, 0, min(len(out.Items), p.Limit))}
	for _, av := range out.Items {
		it, err := itemFrom(av)
		if err != nil {
			return meta.Page{}, fmt.Errorf("meta/dynamo: query %s: %w", q.PK, err)
		}
		page.Items = append(page.Items, it)
	}
	switch {
	case len(page.Items) > p.Limit:
		page.Items = page.Items[:p.Limit]
		page.Next = rules.EncodeToken(page.Items[p.Limit-1].SK)
	case out.LastEvaluatedKey != nil:
		// DynamoDB stopped early at its 1 MB page cap: more may follow.
		sk, ok := out.LastEvaluatedKey[attrSK].(*types.AttributeValueMemberS)
		if !ok {
			return meta.Page{}, fmt.Errorf("meta/dynamo: query %s: LastEvaluatedKey without a string sk", q.PK)
		}
		page.Next = rules.EncodeToken(sk.Value)
	}
	return page, nil
}

// BatchPut writes every item unconditionally with ver 1. A key given twice
// keeps its last value.
func (s *Store) BatchPut(ctx context.Context, items []meta.Item) error {
	for _, it := range items {
		if err := rules.CheckItem(it.PK, it.SK, it.Val); err != nil {
			return err
		}
	}
	reqs := make([]types.WriteRequest, 0, len(items))
	at := make(map[meta.Key]int, len(items))
	for _, it := range items {
		item := keyOf(it.PK, it.SK)
		item[attrVer] = num(1)
		item[attrVal] = bin(it.Val)
		req := types.WriteRequest{PutRequest: &types.PutRequest{Item: item}}
		// BatchWriteItem rejects a call naming one key twice.
		k := meta.Key{PK: it.PK, SK: it.SK}
		if i, dup := at[k]; dup {
			reqs[i] = req
			continue
		}
		at[k] = len(reqs)
		reqs = append(reqs, req)
	}
	if err := s.batchWrite(ctx, reqs); err != nil {
		return fmt.Errorf("meta/dynamo: batch put of %d items: %w", len(items), err)
	}
	return nil
}

// BatchDelete removes every key unconditionally.
func (s *Store) BatchDelete(ctx context.Context, keys []meta.Key) error {
	for _, k := range keys {
		if err := rules.CheckKey(k.PK, k.SK); err != nil {
			return err
		}
	}
	reqs := make([]types.WriteRequest, 0, len(keys))
	seen := make(map[meta.Key]bool, len(keys))
	for _, k := range keys {
		if seen[k] {
			continue
		}
		seen[k] = true
		reqs = append(reqs, types.WriteRequest{DeleteRequest: &types.DeleteRequest{Key: keyOf(k.PK, k.SK)}})
	}
	if err := s.batchWrite(ctx, reqs); err != nil {
		return fmt.Errorf("meta/dynamo: batch delete of %d keys: %w", len(keys), err)
	}
	return nil
}

// batchWrite sends reqs (distinct keys) in calls of batchSize, a few in
// parallel, each resending its UnprocessedItems with backoff until done.
func (s *Store) batchWrite(ctx context.Context, reqs []types.WriteRequest) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(batchParallel)
	for start := 0; start < len(reqs); start += batchSize {
		chunk := reqs[start:min(start+batchSize, len(reqs))]
		g.Go(func() error { return s.batchChunk(gctx, chunk) })
	}
	return g.Wait()
}

func (s *Store) batchChunk(ctx context.Context, pending []types.WriteRequest) error {
	b := &backoff.ExponentialBackOff{
		InitialInterval:     50 * time.Millisecond,
		RandomizationFactor: 0.5,
		Multiplier:          2,
		MaxInterval:         5 * time.Second,
	}
	_, err := backoff.Retry(ctx, func() (struct{}, error) {
		out, err := s.client.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{
			RequestItems: map[string][]types.WriteRequest{*s.table: pending},
		})
		if err != nil {
			// The SDK already retried what is retryable.
			return struct{}{}, backoff.Permanent(err)
		}
		left := out.UnprocessedItems[*s.table]
		if len(left) == 0 {
			return struct{}{}, nil
		}
		s.log.DebugContext(ctx, "meta/dynamo: retrying unprocessed batch items", "items", len(left), "of", len(pending))
		err = fmt.Errorf("%d of %d items unprocessed", len(left), len(pending))
		pending = left
		return struct{}{}, err
	}, backoff.WithBackOff(b), backoff.WithMaxElapsedTime(2*time.Minute))
	return err
}

// itemFrom decodes one stored item.
func itemFrom(av map[string]types.AttributeValue) (meta.Item, error) {
	pk, ok1 := av[attrPK].(*types.AttributeValueMemberS)
	sk, ok2 := av[attrSK].(*types.AttributeValueMemberS)
	if !ok1 || !ok2 {
		return meta.Item{}, errors.New("stored item without string pk and sk")
	}
	ver, err := parseVer(av)
	if err != nil {
		return meta.Item{}, fmt.Errorf("item pk=%s sk=%s: %w", pk.Value, sk.Value, err)
	}
	it := meta.Item{PK: pk.Value, SK: sk.Value, Ver: ver, Val: []byte{}}
	switch v := av[attrVal].(type) {
	case *types.AttributeValueMemberB:
		if v.Value != nil {
			it.Val = v.Value
		}
	case nil:
	default:
		return meta.Item{}, fmt.Errorf("item pk=%s sk=%s: val is not binary", pk.Value, sk.Value)
	}
	return it, nil
}

func parseVer(av map[string]types.AttributeValue) (int64, error) {
	n, ok := av[attrVer].(*types.AttributeValueMemberN)
	if !ok {
		return 0, errors.New("item without numeric ver")
	}
	v, err := strconv.ParseInt(n.Value, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("ver %q: %w", n.Value, err)
	}
	return v, nil
}

// Attempt counting: a Finalize middleware placed after the SDK's retry
// middleware runs once per attempt and bumps the counter the call's
// context carries.

type attemptsKey struct{}

func countingContext(ctx context.Context) (context.Context, *atomic.Int32) {
	n := new(atomic.Int32)
	return context.WithValue(ctx, attemptsKey{}, n), n
}

var countAttempt = middleware.FinalizeMiddlewareFunc("starlogCountAttempt",
	func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (
		middleware.FinalizeOutput, middleware.Metadata, error,
	) {
		if n, ok := ctx.Value(attemptsKey{}).(*atomic.Int32); ok {
			n.Add(1)
		}
		return next.HandleFinalize(ctx, in)
	})

func withAttemptCounter(o *dynamodb.Options) {
	o.APIOptions = append(o.APIOptions, func(st *middleware.Stack) error {
		return st.Finalize.Insert(countAttempt, "Retry", middleware.After)
	})
}

// condWrite is a conditional write as the retry judgement needs it.
type condWrite struct {
	kind condKind
	ver  int64 // the version the condition requires (IfVer)
	val  []byte
}

type condKind uint8

const (
	condPutIfAbsent condKind = iota
	condPutIfVer
	condDeleteIfVer
)

// newVer is the version a successful put leaves.
func (w condWrite) newVer() int64 {
	if w.kind == condPutIfVer {
		return w.ver + 1
	}
	return 1
}

type outcome uint8

const (
	unknown outcome = iota
	applied
	notApplied
)

func (o outcome) String() string {
	switch o {
	case applied:
		return "applied"
	case notApplied:
		return "not applied"
	}
	return "unknown"
}

// judge decides a retried conditional write that failed its condition,
// given the item as it stands now (nil: missing). Pure.
func (w condWrite) judge(cur *meta.Item) outcome {
	if w.kind == condDeleteIfVer || cur == nil {
		// A delete leaves nothing to recognise, and a missing item may be
		// this write's, deleted since.
		return unknown
	}
	if cur.Ver != w.newVer() {
		// Past the version this write would have made, later writes may
		// sit on top of it; below it, the item was deleted and recreated.
		return unknown
	}
	// Exactly one write makes any given version from the one before it.
	if bytes.Equal(cur.Val, w.val) {
		return applied
	}
	return notApplied
}
