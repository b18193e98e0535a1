package kafka

import (
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/starlog/starlog/shared/api"
)

// A basin's quota refusing a produce or a topic's creation is
// POLICY_VIOLATION: like S2's 403 quota_exhausted it is definite and not
// retried (docs/kafka.md), where TOPIC_AUTHORIZATION_FAILED would send the
// operator after the client's credentials.
func TestQuotaExhaustedIsPolicyViolation(t *testing.T) {
	err := fmt.Errorf("append: %w", api.QuotaExhausted("basin's append quota is exhausted"))
	if got := produceCode(err); got != kerr.PolicyViolation.Code {
		t.Errorf("produce: code %d (%v), want POLICY_VIOLATION", got, kerr.ErrorForCode(got))
	}
	if got := codeOf(err); got != kerr.PolicyViolation.Code {
		t.Errorf("create topics: code %d (%v), want POLICY_VIOLATION", got, kerr.ErrorForCode(got))
	}
	if got := codeOf(api.PermissionDenied("no")); got != kerr.TopicAuthorizationFailed.Code {
		t.Errorf("permission denied: code %d, want TOPIC_AUTHORIZATION_FAILED", got)
	}
}
