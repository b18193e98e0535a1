// Package awsretry is the one retry policy of starlog's AWS clients (S3,
// S3 Express, DynamoDB), set deliberately rather than inherited from the
// SDK's defaults.
//
// The SDK's standard retryer keeps a client-side retry quota (a token
// bucket shared by every call of the client): under sustained throttling
// or 5xx it runs dry, and every later call then fails at once with "retry
// quota exceeded" instead of backing off (aws-sdk-go-v2 issues 1665,
// 3413). starlog's callers already bound their work by context and
// deadlines, and a star facing a throttled table must slow down, not fail
// fast, so the quota is off. Conditional writes whose retry could not tell
// their own landed attempt from a rival's keep a single attempt (the s3
// backend's PutIfAbsent and Complete).
package awsretry

import (
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
)

// Defaults of the policy.
const (
	// MaxAttempts per call, the first included.
	MaxAttempts = 8
	// MaxBackoff caps one wait between attempts (full jitter below it).
	MaxBackoff = 2 * time.Second
)

// New returns the retryer: standard retries (throttling, 5xx, transient
// network errors), maxAttempts per call (0: MaxAttempts), exponential
// backoff with jitter up to MaxBackoff, and no client-side retry quota.
func New(maxAttempts int) func() aws.Retryer { return newRetryer(maxAttempts, MaxBackoff) }

func newRetryer(maxAttempts int, maxBackoff time.Duration) func() aws.Retryer {
	if maxAttempts <= 0 {
		maxAttempts = MaxAttempts
	}
	return func() aws.Retryer {
		return retry.NewStandard(func(o *retry.StandardOptions) {
			o.MaxAttempts = maxAttempts
			o.MaxBackoff = maxBackoff
			o.RateLimiter = ratelimit.None
		})
	}
}
