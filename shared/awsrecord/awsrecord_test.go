package awsrecord_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/starlog/starlog/shared/awsrecord"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/meta/dynamo"
	"github.com/starlog/starlog/shared/objstore/s3"
	"github.com/starlog/starlog/shared/testsvc"
)

var dynamoLocal testsvc.SharedDynamo

func TestMain(m *testing.M) {
	code := m.Run()
	dynamoLocal.Stop()
	os.Exit(code)
}

// read reads the records back.
func read(t *testing.T, path string) []awsrecord.Record {
	t.Helper()
	recs, err := awsrecord.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

func find(recs []awsrecord.Record, service, op string) []awsrecord.Record {
	var out []awsrecord.Record
	for _, r := range recs {
		if r.Service == service && r.Op == op {
			out = append(out, r)
		}
	}
	return out
}

// The s3 backend's calls on a general-purpose and on a directory bucket,
// through versitygw and the S3 Express front, are recorded with their
// resources, including the CreateSession the SDK's session provider makes
// on its own, and a missing key's 404.
func TestRecordsS3AndExpress(t *testing.T) {
	std, dir := "recstd", testsvc.DirectoryBucket("recexp", "use1-az4")
	e := testsvc.StartExpress(t, testsvc.StartVersity(t, std, dir))
	path := filepath.Join(t.TempDir(), "ops.jsonl")
	rec, err := awsrecord.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	ctx := context.Background()
	c, err := s3.NewClient(ctx, s3.Config{Endpoint: e.Endpoint, Region: e.Region, AccessKey: e.AccessKey, SecretKey: e.SecretKey,
		HTTPClient: e.HTTPClient, APIOptions: rec.APIOptions()})
	if err != nil {
		t.Fatal(err)
	}
	store := s3.New(c)
	for _, b := range []string{std, dir} {
		bk := store.Bucket(b)
		if _, err := bk.PutIfAbsent(ctx, "chains/a/1", []byte("x")); err != nil {
			t.Fatal(err)
		}
		if _, err := bk.Get(ctx, "chains/a/1", 0, 1); err != nil {
			t.Fatal(err)
		}
		if _, err := bk.Head(ctx, "chains/a/missing"); err == nil {
			t.Fatal("head of a missing key succeeded")
		}
		for _, err := range bk.List(ctx, "chains/") {
			if err != nil {
				t.Fatal(err)
			}
		}
		if err := bk.DeleteMany(ctx, []string{"chains/a/1", "chains/a/2"}); err != nil {
			t.Fatal(err)
		}
	}
	recs := read(t, path)
	for _, b := range []string{std, dir} {
		var got []string
		for _, r := range recs {
			if r.Bucket == b && r.Op != "CreateSession" {
				got = append(got, r.Op)
			}
		}
		for _, op := range []string{"PutObject", "GetObject", "HeadObject", "ListObjectsV2"} {
			if !slices.Contains(got, op) {
				t.Errorf("bucket %s: no %s recorded (got %v)", b, op, got)
			}
		}
	}
	put := find(recs, "S3", "PutObject")
	if len(put) == 0 || put[0].Key != "chains/a/1" || put[0].Status != 200 || put[0].Attempts != 1 {
		t.Errorf("PutObject records %+v", put)
	}
	heads := find(recs, "S3", "HeadObject")
	if len(heads) == 0 || heads[0].Key != "chains/a/missing" || heads[0].Status != 404 {
		t.Errorf("HeadObject records %+v: want the missing key's 404", heads)
	}
	lists := find(recs, "S3", "ListObjectsV2")
	if len(lists) == 0 || lists[0].Prefix == nil || *lists[0].Prefix != "chains/" {
		t.Errorf("ListObjectsV2 records %+v: want prefix chains/", lists)
	}
	var deleted []string
	for _, r := range recs {
		if r.Op == "DeleteObjects" || r.Op == "DeleteObject" {
			deleted = append(deleted, r.Keys...)
			if r.Key != "" {
				deleted = append(deleted, r.Key)
			}
		}
	}
	if !slices.Contains(deleted, "chains/a/2") {
		t.Errorf("deletes recorded %v: want chains/a/2", deleted)
	}
	sessions := find(recs, "S3", "CreateSession")
	if len(sessions) == 0 || sessions[0].Bucket != dir {
		t.Errorf("CreateSession records %+v: want one on %s", sessions, dir)
	}
	for _, s := range sessions {
		if s.Bucket == std {
			t.Errorf("CreateSession on the general-purpose bucket: %+v", s)
		}
	}
}

// The dynamo backend's calls are recorded with their table, batch writes
// with every table they name.
func TestRecordsDynamo(t *testing.T) {
	srv := dynamoLocal.Get(t)
	table := srv.TableName(t)
	if err := dynamo.CreateTable(context.Background(), testsvc.DynamoClient(srv.Endpoint), table); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "ops.jsonl")
	rec, err := awsrecord.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	ctx := context.Background()
	c, err := dynamo.NewClient(ctx, dynamo.Config{Endpoint: srv.Endpoint, Region: "us-east-1", AccessKey: "x", SecretKey: "y", APIOptions: rec.APIOptions()})
	if err != nil {
		t.Fatal(err)
	}
	ms := dynamo.New(c, table)
	if _, err := ms.Put(ctx, "p", "s", []byte("v"), meta.IfAbsent()); err != nil {
		t.Fatal(err)
	}
	if _, err := ms.Get(ctx, "p", "s"); err != nil {
		t.Fatal(err)
	}
	if _, err := ms.Query(ctx, meta.Query{PK: "p"}); err != nil {
		t.Fatal(err)
	}
	if err := ms.BatchPut(ctx, []meta.Item{{PK: "p", SK: "t", Val: []byte("w")}}); err != nil {
		t.Fatal(err)
	}
	recs := read(t, path)
	for _, op := range []string{"PutItem", "GetItem", "Query"} {
		rs := find(recs, "DynamoDB", op)
		if len(rs) == 0 || rs[0].Table != table {
			t.Errorf("%s records %+v: want table %s", op, rs, table)
		}
	}
	if rs := find(recs, "DynamoDB", "BatchWriteItem"); len(rs) == 0 || !slices.Equal(rs[0].Tables, []string{table}) {
		t.Errorf("BatchWriteItem records %+v: want tables [%s]", rs, table)
	}
}

// Off means off: a nil recorder installs nothing.
func TestNilRecorder(t *testing.T) {
	var rec *awsrecord.Recorder
	if rec.APIOptions() != nil || rec.Close() != nil {
		t.Fatal("a nil recorder installs middleware")
	}
}
