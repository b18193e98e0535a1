// Package objstore is the object store contract the star and the auditor
// need from a bucket (docs/design.md §4.1), with mem, fs and s3 backends, a
// fault-injecting wrapper and request counters.
package objstore

import (
	"context"
	"errors"
	"iter"
)

// ErrExists is the one definite "the key is already there" outcome of a
// create-once write (S3's 412 PreconditionFailed).
var ErrExists = errors.New("objstore: object already exists")

// ErrNotFound reports a missing key (or bucket) on a read or head.
var ErrNotFound = errors.New("objstore: object not found")

// ErrAccessDenied reports a request the store refused for want of
// permission. On S3 Standard a GET or HEAD of a missing key answers it too
// unless the caller may also list the bucket (s3:ListBucket): it is never
// taken for "absent", so the code that relies on absence (the chain's
// probes, the reader's stale-row retry, settle's adoption read) fails
// loudly instead of deciding wrongly. Grant s3:ListBucket.
var ErrAccessDenied = errors.New("objstore: access denied (a missing key answers this without s3:ListBucket)")

// IndefiniteError wraps the outcome of a write that may or may not have taken
// effect: a timeout, a dropped connection, S3's 409
// ConditionalRequestConflict. Callers must never treat it as lost or as won;
// they probe (read the envelope and compare the nonce).
type IndefiniteError struct{ Err error }

func (e *IndefiniteError) Error() string { return "objstore: indefinite outcome: " + e.Err.Error() }
func (e *IndefiniteError) Unwrap() error { return e.Err }

// IsIndefinite reports whether err is (or wraps) an IndefiniteError.
func IsIndefinite(err error) bool {
	var ie *IndefiniteError
	return errors.As(err, &ie)
}

// ObjectInfo describes one stored object.
type ObjectInfo struct {
	Key  string
	Size int64
	ETag string
}

// Store opens buckets by name. Server-side copies (multipart copy parts) may
// read from any bucket of the same Store.
type Store interface {
	Bucket(name string) Bucket
}

// Bucket is one bucket of a Store. Keys never nest: no key is a "folder" of
// another key. All methods are safe for concurrent use.
type Bucket interface {
	// Name is the bucket's name in its Store.
	Name() string
	// PutIfAbsent creates key with body only if it does not exist. It returns
	// ErrExists when the key is definitely there, an *IndefiniteError when
	// the write may or may not have happened, nil when this call created it.
	PutIfAbsent(ctx context.Context, key string, body []byte) (ObjectInfo, error)
	// Get reads n bytes at offset off (n < 0: to the end). A range past the
	// end is truncated to the object; ErrNotFound if the key is missing.
	Get(ctx context.Context, key string, off, n int64) ([]byte, error)
	// Head returns the object's info or ErrNotFound.
	Head(ctx context.Context, key string) (ObjectInfo, error)
	// Delete removes key; deleting a missing key is not an error.
	Delete(ctx context.Context, key string) error
	// DeleteMany removes every key; missing keys are not errors.
	DeleteMany(ctx context.Context, keys []string) error
	// List yields every object whose key starts with prefix. Order is not
	// guaranteed (S3 Express listings are unsorted): never depend on it.
	// Only reclamation and decommission list; the write path never does.
	List(ctx context.Context, prefix string) iter.Seq2[ObjectInfo, error]
	// NewMultipart starts a create-once multipart upload of key.
	NewMultipart(ctx context.Context, key string) (Multipart, error)
}

// MinPartSize is the smallest part S3 accepts except for the last one.
const MinPartSize = 5 << 20

// Multipart builds one object from parts added in order. Every part but the
// last must be at least MinPartSize.
type Multipart interface {
	// AddCopyPart appends bytes [off, off+n) of srcBucket/srcKey by a
	// server-side copy (UploadPartCopy with a range).
	AddCopyPart(ctx context.Context, srcBucket, srcKey string, off, n int64) error
	// AddPart appends body as an uploaded part.
	AddPart(ctx context.Context, body []byte) error
	// Complete publishes the object only if the key does not exist yet:
	// ErrExists if it does (the upload is aborted), an *IndefiniteError when
	// the outcome is unknown.
	Complete(ctx context.Context) (ObjectInfo, error)
	// Abort discards the upload and its parts.
	Abort(ctx context.Context) error
}
