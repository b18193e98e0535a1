package s3_test

import (
	"context"
	"errors"
	"testing"

	"github.com/starlog/starlog/shared/objstore"
	"github.com/starlog/starlog/shared/testsvc/stores"
)

// A missing key on S3 Standard answers 404 to a caller with s3:ListBucket
// and 403 AccessDenied to one without: the backend reports ErrNotFound for
// the first and ErrAccessDenied (never ErrNotFound) for the second, so no
// caller takes a refusal for absence.
func TestMissingKeyWithAndWithoutListBucket(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		want error
		not  error
		st   func(testing.TB, ...string) objstore.Store
	}{
		{"with s3:ListBucket", objstore.ErrNotFound, objstore.ErrAccessDenied, func(tb testing.TB, b ...string) objstore.Store { return stores.S3(tb, b...) }},
		{"without s3:ListBucket", objstore.ErrAccessDenied, objstore.ErrNotFound, func(tb testing.TB, b ...string) objstore.Store { return stores.S3NoListBucket(tb, b...) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.st(t, "std").Bucket("std")
			if _, err := b.PutIfAbsent(ctx, "present", []byte("x")); err != nil {
				t.Fatal(err)
			}
			if got, err := b.Get(ctx, "present", 0, -1); err != nil || string(got) != "x" {
				t.Fatalf("present key: %q %v", got, err)
			}
			_, err := b.Get(ctx, "missing", 0, 60)
			if !errors.Is(err, tc.want) || errors.Is(err, tc.not) {
				t.Fatalf("GET of a missing key: %v (want %v)", err, tc.want)
			}
			_, err = b.Head(ctx, "missing")
			if !errors.Is(err, tc.want) || errors.Is(err, tc.not) {
				t.Fatalf("HEAD of a missing key: %v (want %v)", err, tc.want)
			}
		})
	}
}
