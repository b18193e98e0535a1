// Package awsrecord records every AWS operation a process performs through
// starlog's SDK clients (S3 and S3 Express, DynamoDB, SQS), one JSON line
// per call, with the resources it named: bucket and key (or list prefix,
// or the keys of a batch delete), table and index, queue. The deploy
// rehearsal turns it on (STARLOG_RECORD_OPS=<file>) for the star and every
// Lambda and checks each line against the synthesized IAM policy of that
// component's role (functions/internal/rehearse/iam.go).
//
// It is an SDK middleware, not an objstore or meta wrapper, so it sees what
// the SDK sends: the real operation names, the CreateSession calls the S3
// Express credentials provider makes on its own (with their session mode),
// and how many attempts each call took. It is test-only: off unless a path
// is given, and it never changes a request.
package awsrecord

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"sync"

	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// Record is one SDK call.
type Record struct {
	// Service is the SDK's service ID ("S3", "DynamoDB", "SQS") and Op the
	// operation name ("GetObject", "CreateSession", "BatchWriteItem").
	Service string `json:"service"`
	Op      string `json:"op"`

	Bucket string `json:"bucket,omitempty"`
	Key    string `json:"key,omitempty"`
	// Prefix is a list's key prefix (nil: the call takes none).
	Prefix *string `json:"prefix,omitempty"`
	// Keys are a DeleteObjects call's keys.
	Keys []string `json:"keys,omitempty"`
	// CopySource is UploadPartCopy's or CopyObject's "bucket/key".
	CopySource string `json:"copy_source,omitempty"`
	// SessionMode is CreateSession's requested mode ("" when the call sets
	// none, and S3 Express grants the most the policy allows).
	SessionMode string `json:"session_mode,omitempty"`

	Table string `json:"table,omitempty"`
	Index string `json:"index,omitempty"`
	// Tables are a batch call's tables.
	Tables []string `json:"tables,omitempty"`

	QueueURL string `json:"queue_url,omitempty"`

	// SecretID is GetSecretValue's secret (an ARN or a name).
	SecretID string `json:"secret_id,omitempty"`

	// Status is the last attempt's HTTP status (0: none arrived), Code the
	// error code of a failed call, Attempts how many attempts it took.
	Status   int    `json:"status,omitempty"`
	Code     string `json:"code,omitempty"`
	Attempts int    `json:"attempts,omitempty"`
}

// Recorder appends records to a file.
type Recorder struct {
	mu sync.Mutex
	f  *os.File
}

// Open appends to the file at path (created if missing). Several processes
// may share one file: each record is one write of one line in append mode.
func Open(path string) (*Recorder, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("awsrecord: %w", err)
	}
	return &Recorder{f: f}, nil
}

// Close closes the file.
func (r *Recorder) Close() error {
	if r == nil {
		return nil
	}
	return r.f.Close()
}

// APIOptions are the SDK client options that install the recorder (for
// config.WithAPIOptions or a client's Options.APIOptions). A nil Recorder
// installs nothing.
func (r *Recorder) APIOptions() []func(*middleware.Stack) error {
	if r == nil {
		return nil
	}
	return []func(*middleware.Stack) error{func(st *middleware.Stack) error {
		// After the service metadata (operation name) is set; once per
		// call, outside the retry loop, so Attempts counts the retries.
		return st.Initialize.Add(recordMiddleware{r}, middleware.After)
	}}
}

type recordMiddleware struct{ r *Recorder }

func (recordMiddleware) ID() string { return "StarlogAWSRecord" }

func (m recordMiddleware) HandleInitialize(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (
	middleware.InitializeOutput, middleware.Metadata, error,
) {
	rec := describe(in.Parameters)
	rec.Service, rec.Op = awsmiddleware.GetServiceID(ctx), awsmiddleware.GetOperationName(ctx)
	out, md, err := next.HandleInitialize(ctx, in)
	if resp, ok := awsmiddleware.GetRawResponse(md).(*smithyhttp.Response); ok && resp != nil {
		rec.Status = resp.StatusCode
	}
	if res, ok := retry.GetAttemptResults(md); ok {
		rec.Attempts = len(res.Results)
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		rec.Code = ae.ErrorCode()
	} else if err != nil {
		rec.Code = "client-error"
	}
	m.r.write(rec)
	return out, md, err
}

func (r *Recorder) write(rec Record) {
	b, err := json.Marshal(rec)
	if err != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	// A lost record fails the check that reads them; the call goes on.
	_, _ = r.f.Write(append(b, '\n'))
}

// describe reads the resource fields of an operation's input. The SDK's
// inputs name them alike across operations (Bucket, Key, TableName…), so
// one reflective reader serves every operation without listing them.
func describe(params any) Record {
	var rec Record
	v := reflect.ValueOf(params)
	if v.Kind() == reflect.Pointer {
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct {
		return rec
	}
	str := func(name string) (string, bool) {
		f := v.FieldByName(name)
		switch {
		case !f.IsValid():
			return "", false
		case f.Kind() == reflect.Pointer && f.Type().Elem().Kind() == reflect.String:
			if f.IsNil() {
				return "", false
			}
			return f.Elem().String(), true
		case f.Kind() == reflect.String:
			return f.String(), f.String() != ""
		}
		return "", false
	}
	rec.Bucket, _ = str("Bucket")
	rec.Key, _ = str("Key")
	if p, ok := str("Prefix"); ok {
		rec.Prefix = &p
	} else if f := v.FieldByName("Prefix"); f.IsValid() {
		empty := ""
		rec.Prefix = &empty
	}
	rec.CopySource, _ = str("CopySource")
	rec.SessionMode, _ = str("SessionMode")
	rec.Table, _ = str("TableName")
	rec.Index, _ = str("IndexName")
	rec.QueueURL, _ = str("QueueUrl")
	rec.SecretID, _ = str("SecretId")
	// DeleteObjects: Delete.Objects[].Key.
	if d := v.FieldByName("Delete"); d.IsValid() && d.Kind() == reflect.Pointer && !d.IsNil() {
		if objs := d.Elem().FieldByName("Objects"); objs.IsValid() && objs.Kind() == reflect.Slice {
			for i := range objs.Len() {
				if k := objs.Index(i).FieldByName("Key"); k.IsValid() && k.Kind() == reflect.Pointer && !k.IsNil() {
					rec.Keys = append(rec.Keys, k.Elem().String())
				}
			}
		}
	}
	// BatchWriteItem, BatchGetItem: RequestItems is keyed by table.
	if items := v.FieldByName("RequestItems"); items.IsValid() && items.Kind() == reflect.Map {
		for _, k := range items.MapKeys() {
			rec.Tables = append(rec.Tables, k.String())
		}
		slices.Sort(rec.Tables)
	}
	return rec
}

// ReadFile reads the records of a file (none if it does not exist).
func ReadFile(path string) ([]Record, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("awsrecord: %w", err)
	}
	defer f.Close()
	var out []Record
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for n := 1; sc.Scan(); n++ {
		var rec Record
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			return nil, fmt.Errorf("awsrecord: %s line %d: %w", path, n, err)
		}
		out = append(out, rec)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("awsrecord: %s: %w", path, err)
	}
	return out, nil
}
