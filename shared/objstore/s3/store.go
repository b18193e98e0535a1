// Package s3 is the objstore backend over Amazon S3 (and S3-compatible
// servers such as versitygw) with aws-sdk-go-v2.
package s3

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"iter"
	"math"
	"net/http"
	"net/url"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/starlog/starlog/shared/objstore"
)

// deleteBatch is S3's DeleteObjects limit.
const deleteBatch = 1000

// Store is an objstore.Store over one S3 client.
type Store struct {
	// client sends with the SDK's retries.
	client *awss3.Client
	// once sends conditional writes (PutIfAbsent, Complete) in a single
	// attempt: if a first attempt lands but its reply is lost, a retry gets
	// 412 and would report a write this call won as ErrExists. Detecting
	// retried attempts instead would not help: after a retry a 412 cannot
	// tell our own first attempt from a rival's, so the honest report is
	// indefinite either way. Without retries every unanswered attempt
	// surfaces as indefinite at once (no hidden backoff inside the caller's
	// deadline), and the caller probes the envelope's nonce. A client of
	// its own rather than a per-call option, so that S3 Express session
	// fetches stay single-flight (session.go).
	once     *awss3.Client
	listPage int32
	sessions *refusedSessions
}

// Option configures a Store.
type Option func(*Store)

// WithListPageSize sets ListObjectsV2's MaxKeys (default and maximum 1000),
// so tests can cross page boundaries with few keys.
func WithListPageSize(n int) Option {
	return func(s *Store) {
		if n > 0 && n <= 1000 {
			s.listPage = int32(n)
		}
	}
}

// New wraps client: the Store sends through clients derived from its
// options (session.go), and client itself opens S3 Express sessions.
func New(client *awss3.Client, opts ...Option) *Store {
	retrying, once, sessions := clients(client)
	s := &Store{client: retrying, once: once, listPage: 1000, sessions: sessions}
	for _, o := range opts {
		o(s)
	}
	return s
}

// SessionStats counts the S3 Express sessions the service refused
// (InvalidToken, ExpiredToken) and those the Store opened to replace them.
type SessionStats struct {
	Refused, Reopened uint64
}

// SessionStats returns the counts so far (zero on general purpose
// buckets, which have no sessions).
func (s *Store) SessionStats() SessionStats {
	return SessionStats{Refused: s.sessions.refusals.Load(), Reopened: s.sessions.reopened.Load()}
}

// Bucket implements objstore.Store. An invalid name makes every call fail.
func (s *Store) Bucket(name string) objstore.Bucket {
	return &bucket{s: s, name: name, nameErr: objstore.ValidateBucketName(name)}
}

type bucket struct {
	s       *Store
	name    string
	nameErr error
}

var _ objstore.Bucket = (*bucket)(nil)

func (b *bucket) Name() string { return b.name }

func (b *bucket) check(key string) error {
	if b.nameErr != nil {
		return b.nameErr
	}
	return objstore.ValidateKey(key)
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// crc32c is S3's x-amz-checksum-crc32c: base64 of the big-endian CRC-32C.
// Sent precomputed, so the SDK need not read the body twice.
func crc32c(body []byte) *string {
	var sum [4]byte
	binary.BigEndian.PutUint32(sum[:], crc32.Checksum(body, castagnoli))
	return aws.String(base64.StdEncoding.EncodeToString(sum[:]))
}

func etag(s *string) string { return strings.Trim(aws.ToString(s), `"`) }

func (b *bucket) what(key string) string { return b.name + "/" + key }

func (b *bucket) PutIfAbsent(ctx context.Context, key string, body []byte) (objstore.ObjectInfo, error) {
	if err := b.check(key); err != nil {
		return objstore.ObjectInfo{}, err
	}
	ctx, call := track(ctx)
	out, err := b.s.once.PutObject(ctx, &awss3.PutObjectInput{
		Bucket:            aws.String(b.name),
		Key:               aws.String(key),
		Body:              bytes.NewReader(body), // seekable: plain HTTP needs it
		ContentLength:     aws.Int64(int64(len(body))),
		IfNoneMatch:       aws.String("*"),
		ChecksumAlgorithm: types.ChecksumAlgorithmCrc32c,
		ChecksumCRC32C:    crc32c(body),
	})
	if err != nil {
		return objstore.ObjectInfo{}, classifyCall(err, call, objstore.OpPut, b.what(key))
	}
	return objstore.ObjectInfo{Key: key, Size: int64(len(body)), ETag: etag(out.ETag)}, nil
}

func (b *bucket) Get(ctx context.Context, key string, off, n int64) ([]byte, error) {
	if err := b.check(key); err != nil {
		return nil, err
	}
	if off < 0 {
		return nil, fmt.Errorf("s3: get %s: negative offset %d", b.what(key), off)
	}
	if n == 0 {
		// No HTTP range is empty; still report a missing key.
		if _, err := b.Head(ctx, key); err != nil {
			return nil, err
		}
		return []byte{}, nil
	}
	in := &awss3.GetObjectInput{Bucket: aws.String(b.name), Key: aws.String(key)}
	switch {
	case n > 0 && n <= math.MaxInt64-off:
		in.Range = aws.String(fmt.Sprintf("bytes=%d-%d", off, off+n-1))
	case off > 0:
		in.Range = aws.String(fmt.Sprintf("bytes=%d-", off))
	default:
		// A whole-object read can check S3's stored checksum.
		in.ChecksumMode = types.ChecksumModeEnabled
	}
	ctx, call := track(ctx)
	out, err := b.s.client.GetObject(ctx, in)
	if err != nil {
		var re *smithyhttp.ResponseError
		if errors.As(err, &re) && re.HTTPStatusCode() == http.StatusRequestedRangeNotSatisfiable {
			// The object exists and the range starts at or past its end.
			return []byte{}, nil
		}
		return nil, classifyCall(err, call, objstore.OpGet, b.what(key))
	}
	defer out.Body.Close()
	var data []byte
	if cl := aws.ToInt64(out.ContentLength); cl > 0 {
		data = make([]byte, cl)
		if _, err = io.ReadFull(out.Body, data); err != nil {
			return nil, fmt.Errorf("s3: get %s: read body: %w", b.what(key), err)
		}
	} else if data, err = io.ReadAll(out.Body); err != nil {
		return nil, fmt.Errorf("s3: get %s: read body: %w", b.what(key), err)
	}
	return data, nil
}

func (b *bucket) Head(ctx context.Context, key string) (objstore.ObjectInfo, error) {
	if err := b.check(key); err != nil {
		return objstore.ObjectInfo{}, err
	}
	ctx, call := track(ctx)
	out, err := b.s.client.HeadObject(ctx, &awss3.HeadObjectInput{Bucket: aws.String(b.name), Key: aws.String(key)})
	if err != nil {
		return objstore.ObjectInfo{}, classifyCall(err, call, objstore.OpHead, b.what(key))
	}
	return objstore.ObjectInfo{Key: key, Size: aws.ToInt64(out.ContentLength), ETag: etag(out.ETag)}, nil
}

func (b *bucket) Delete(ctx context.Context, key string) error {
	if err := b.check(key); err != nil {
		return err
	}
	ctx, call := track(ctx)
	_, err := b.s.client.DeleteObject(ctx, &awss3.DeleteObjectInput{Bucket: aws.String(b.name), Key: aws.String(key)})
	if err != nil {
		cerr := classifyCall(err, call, objstore.OpDelete, b.what(key))
		// A missing key is fine, a missing bucket is not (a session that
		// could not be opened names a bucket, never a key).
		if errors.Is(cerr, objstore.ErrNotFound) && !isNoSuchBucket(err) && call.sessionErr() == nil {
			return nil
		}
		return cerr
	}
	return nil
}

func (b *bucket) DeleteMany(ctx context.Context, keys []string) error {
	for _, k := range keys {
		if err := b.check(k); err != nil {
			return err
		}
	}
	for chunk := range slicesChunk(keys, deleteBatch) {
		ids := make([]types.ObjectIdentifier, len(chunk))
		for i, k := range chunk {
			ids[i] = types.ObjectIdentifier{Key: aws.String(k)}
		}
		ctx, call := track(ctx)
		out, err := b.s.client.DeleteObjects(ctx, &awss3.DeleteObjectsInput{
			Bucket: aws.String(b.name),
			Delete: &types.Delete{Objects: ids, Quiet: aws.Bool(true)},
		})
		if err != nil {
			return classifyCall(err, call, objstore.OpDeleteMany, fmt.Sprintf("%s (%d keys)", b.name, len(chunk)))
		}
		for _, e := range out.Errors {
			if aws.ToString(e.Code) == "NoSuchKey" {
				continue
			}
			return fmt.Errorf("s3: delete_many %s: %s: %s", b.what(aws.ToString(e.Key)), aws.ToString(e.Code), aws.ToString(e.Message))
		}
	}
	return nil
}

func slicesChunk(keys []string, n int) iter.Seq[[]string] {
	return func(yield func([]string) bool) {
		for len(keys) > 0 {
			c := keys[:min(n, len(keys))]
			keys = keys[len(c):]
			if !yield(c) {
				return
			}
		}
	}
}

// List pages through ListObjectsV2. On S3 Express directory buckets only
// prefixes ending in '/' are supported: list by folder.
func (b *bucket) List(ctx context.Context, prefix string) iter.Seq2[objstore.ObjectInfo, error] {
	return func(yield func(objstore.ObjectInfo, error) bool) {
		if b.nameErr != nil {
			yield(objstore.ObjectInfo{}, b.nameErr)
			return
		}
		p := awss3.NewListObjectsV2Paginator(b.s.client, &awss3.ListObjectsV2Input{
			Bucket:  aws.String(b.name),
			Prefix:  aws.String(prefix),
			MaxKeys: aws.Int32(b.s.listPage),
		})
		for p.HasMorePages() {
			pctx, call := track(ctx)
			page, err := p.NextPage(pctx)
			if err != nil {
				yield(objstore.ObjectInfo{}, classifyCall(err, call, objstore.OpList, b.name+"/"+prefix+"*"))
				return
			}
			for _, o := range page.Contents {
				k := aws.ToString(o.Key)
				if strings.HasSuffix(k, "/") {
					continue // a folder marker, never one of ours
				}
				if !yield(objstore.ObjectInfo{Key: k, Size: aws.ToInt64(o.Size), ETag: etag(o.ETag)}, nil) {
					return
				}
			}
		}
	}
}

// copySource is UploadPartCopy's x-amz-copy-source: bucket/key, URL-encoded
// with the '/' separators kept.
func copySource(bucket, key string) string {
	segs := strings.Split(key, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return bucket + "/" + strings.Join(segs, "/")
}
