package s3

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
)

// The session opened after a refusal serves its bucket until freshMargin
// before it expires, then the bucket goes back to the SDK's provider;
// buckets never refused, and every bucket before the first refusal, go
// to the provider at once. (Opening the session itself is
// TestExpressRefusedSessionIsReplaced's.)
func TestRefusedSessionsHandBack(t *testing.T) {
	ctx := context.Background()
	r := newRefusedSessions(nil)
	if _, ok, err := r.retrieve(ctx, "b"); ok || err != nil {
		t.Fatalf("before any refusal: ok %v, %v; want the provider's", ok, err)
	}
	long := aws.Credentials{SessionToken: "long", CanExpire: true, Expires: time.Now().Add(freshMargin + time.Hour)}
	r.any.Store(true)
	r.fresh["b"] = long
	if c, ok, err := r.retrieve(ctx, "b"); !ok || err != nil || c.SessionToken != "long" {
		t.Fatalf("a fresh session far from its end: %q, ok %v, %v", c.SessionToken, ok, err)
	}
	if _, ok, err := r.retrieve(ctx, "other"); ok || err != nil {
		t.Fatalf("a bucket never refused: ok %v, %v; want the provider's", ok, err)
	}
	r.fresh["b"] = aws.Credentials{SessionToken: "ending", CanExpire: true, Expires: time.Now().Add(freshMargin / 2)}
	if _, ok, err := r.retrieve(ctx, "b"); ok || err != nil {
		t.Fatalf("a fresh session within the margin of its end: ok %v, %v; want the provider's", ok, err)
	}
	if _, kept := r.fresh["b"]; kept {
		t.Fatal("the ending session was kept")
	}
	// A refusal drops the fresh session too: the next request opens one.
	r.fresh["b"] = long
	r.refuse("b")
	if _, kept := r.fresh["b"]; kept || !r.refused["b"] {
		t.Fatalf("after a refusal: fresh kept %v, refused %v", kept, r.refused["b"])
	}
}
