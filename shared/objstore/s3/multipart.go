package s3

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/starlog/starlog/shared/objstore"
)

func (b *bucket) NewMultipart(ctx context.Context, key string) (objstore.Multipart, error) {
	if err := b.check(key); err != nil {
		return nil, err
	}
	ctx, call := track(ctx)
	out, err := b.s.client.CreateMultipartUpload(ctx, &awss3.CreateMultipartUploadInput{
		Bucket:            aws.String(b.name),
		Key:               aws.String(key),
		ChecksumAlgorithm: types.ChecksumAlgorithmCrc32c,
	})
	if err != nil {
		return nil, classifyCall(err, call, objstore.OpMultipartCreate, b.what(key))
	}
	return &multipart{b: b, key: key, uploadID: aws.ToString(out.UploadId)}, nil
}

// multipart is one upload. Parts are numbered in the order they are added;
// a mutex keeps that order if a caller shares it between goroutines.
type multipart struct {
	b        *bucket
	key      string
	uploadID string

	mu    sync.Mutex
	parts []types.CompletedPart
	sizes []int64
	done  bool // completed or aborted: Abort is then a no-op
}

func (m *multipart) what() string { return m.b.what(m.key) }

func (m *multipart) nextPart() (int32, error) {
	if m.done {
		return 0, fmt.Errorf("s3: multipart %s: already completed or aborted", m.what())
	}
	if len(m.parts) >= objstore.MaxParts {
		return 0, fmt.Errorf("s3: multipart %s: more than %d parts", m.what(), objstore.MaxParts)
	}
	return int32(len(m.parts) + 1), nil
}

func (m *multipart) AddCopyPart(ctx context.Context, srcBucket, srcKey string, off, n int64) error {
	if err := objstore.ValidateBucketName(srcBucket); err != nil {
		return err
	}
	if err := objstore.ValidateKey(srcKey); err != nil {
		return err
	}
	if off < 0 || n <= 0 {
		return fmt.Errorf("s3: multipart %s: invalid copy range off=%d n=%d", m.what(), off, n)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	num, err := m.nextPart()
	if err != nil {
		return err
	}
	ctx, call := track(ctx)
	out, err := m.b.s.client.UploadPartCopy(ctx, &awss3.UploadPartCopyInput{
		Bucket:          aws.String(m.b.name),
		Key:             aws.String(m.key),
		UploadId:        aws.String(m.uploadID),
		PartNumber:      aws.Int32(num),
		CopySource:      aws.String(copySource(srcBucket, srcKey)),
		CopySourceRange: aws.String(fmt.Sprintf("bytes=%d-%d", off, off+n-1)),
	})
	if err != nil {
		return classifyCall(err, call, objstore.OpMultipartCopy, fmt.Sprintf("%s part %d from %s/%s", m.what(), num, srcBucket, srcKey))
	}
	r := out.CopyPartResult
	if r == nil {
		return fmt.Errorf("s3: multipart %s part %d: copy result missing", m.what(), num)
	}
	m.parts = append(m.parts, types.CompletedPart{PartNumber: aws.Int32(num), ETag: r.ETag, ChecksumCRC32C: r.ChecksumCRC32C})
	m.sizes = append(m.sizes, n)
	return nil
}

func (m *multipart) AddPart(ctx context.Context, body []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	num, err := m.nextPart()
	if err != nil {
		return err
	}
	sum := crc32c(body)
	ctx, call := track(ctx)
	out, err := m.b.s.client.UploadPart(ctx, &awss3.UploadPartInput{
		Bucket:            aws.String(m.b.name),
		Key:               aws.String(m.key),
		UploadId:          aws.String(m.uploadID),
		PartNumber:        aws.Int32(num),
		Body:              bytes.NewReader(body),
		ContentLength:     aws.Int64(int64(len(body))),
		ChecksumAlgorithm: types.ChecksumAlgorithmCrc32c,
		ChecksumCRC32C:    sum,
	})
	if err != nil {
		return classifyCall(err, call, objstore.OpMultipartPart, fmt.Sprintf("%s part %d", m.what(), num))
	}
	m.parts = append(m.parts, types.CompletedPart{PartNumber: aws.Int32(num), ETag: out.ETag, ChecksumCRC32C: sum})
	m.sizes = append(m.sizes, int64(len(body)))
	return nil
}

// Complete publishes the object create-once. A definite refusal (the key
// exists, a nested-key conflict, a small part) aborts the upload; an
// indefinite outcome leaves it for the caller's Abort, which tolerates an
// upload that did complete.
func (m *multipart) Complete(ctx context.Context) (objstore.ObjectInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.done {
		return objstore.ObjectInfo{}, fmt.Errorf("s3: multipart %s: already completed or aborted", m.what())
	}
	var size int64
	for _, s := range m.sizes {
		size += s
	}
	if err := objstore.CheckParts(m.sizes); err != nil {
		return objstore.ObjectInfo{}, m.abortAfter(ctx, fmt.Errorf("s3: multipart %s: %w", m.what(), err))
	}
	ctx, call := track(ctx)
	out, err := m.b.s.once.CompleteMultipartUpload(ctx, &awss3.CompleteMultipartUploadInput{
		Bucket:          aws.String(m.b.name),
		Key:             aws.String(m.key),
		UploadId:        aws.String(m.uploadID),
		IfNoneMatch:     aws.String("*"),
		MultipartUpload: &types.CompletedMultipartUpload{Parts: m.parts},
	})
	if err != nil {
		cerr := classifyCall(err, call, objstore.OpMultipartComplete, m.what())
		if objstore.IsIndefinite(cerr) {
			return objstore.ObjectInfo{}, cerr
		}
		return objstore.ObjectInfo{}, m.abortAfter(ctx, cerr)
	}
	m.done = true
	return objstore.ObjectInfo{Key: m.key, Size: size, ETag: etag(out.ETag)}, nil
}

// abortAfter aborts after a definite failure and returns cause, joined with
// the abort's own error if that failed too.
func (m *multipart) abortAfter(ctx context.Context, cause error) error {
	if err := m.abort(ctx); err != nil {
		return errors.Join(cause, err)
	}
	return cause
}

func (m *multipart) Abort(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.abort(ctx)
}

func (m *multipart) abort(ctx context.Context) error {
	if m.done {
		return nil
	}
	ctx, call := track(ctx)
	_, err := m.b.s.client.AbortMultipartUpload(ctx, &awss3.AbortMultipartUploadInput{
		Bucket:   aws.String(m.b.name),
		Key:      aws.String(m.key),
		UploadId: aws.String(m.uploadID),
	})
	// NoSuchUpload: already gone (e.g. an indefinite Complete that won).
	if err != nil && !isNoSuchUpload(err) {
		return classifyCall(err, call, objstore.OpMultipartAbort, m.what())
	}
	m.done = true
	return nil
}
