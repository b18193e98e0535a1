package awsretry

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// throttled serves DynamoDB's throttling answer to every request.
func throttled(t *testing.T, requests *atomic.Int64) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.Header().Set("X-Amzn-ErrorType", "ThrottlingException")
		w.WriteHeader(http.StatusBadRequest)
		w.Write([]byte(`{"__type":"com.amazonaws.dynamodb.v20120810#ThrottlingException","message":"Rate of requests exceeds the allowed throughput."}`))
	}))
	t.Cleanup(srv.Close)
	return srv
}

func client(url string, r func() aws.Retryer) *dynamodb.Client {
	return dynamodb.New(dynamodb.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(url),
		Credentials:  credentials.NewStaticCredentialsProvider("a", "b", ""),
		Retryer:      r(),
	})
}

// Sustained throttling: with the SDK's default quota, calls soon fail at
// once with "retry quota exceeded" (no attempt made); with this package's
// retryer every call makes its attempts, backing off, and fails with the
// throttling error itself.
func TestSustainedThrottlingNeverExhaustsAQuota(t *testing.T) {
	const calls, attempts = 80, 3
	run := func(r func() aws.Retryer) (quota int, requests int64) {
		var n atomic.Int64
		c := client(throttled(t, &n).URL, r)
		for range calls {
			_, err := c.GetItem(context.Background(), &dynamodb.GetItemInput{
				TableName: aws.String("t"), Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "x"}},
			})
			if err == nil {
				t.Fatal("a throttled call succeeded")
			}
			if strings.Contains(err.Error(), "retry quota exceeded") {
				quota++
			}
		}
		return quota, n.Load()
	}
	sdkDefault := func() aws.Retryer {
		return retry.NewStandard(func(o *retry.StandardOptions) { o.MaxAttempts, o.MaxBackoff = attempts, time.Millisecond })
	}
	q, n := run(sdkDefault)
	if q == 0 {
		t.Fatalf("the SDK's default retryer never ran out of quota (%d requests): the test shows nothing", n)
	}
	t.Logf("SDK default: %d of %d calls failed with retry quota exceeded, %d requests", q, calls, n)
	q, n = run(newRetryer(attempts, time.Millisecond))
	if q != 0 || n != calls*attempts {
		t.Fatalf("awsretry: %d calls out of quota, %d requests (want 0 and %d)", q, n, calls*attempts)
	}
}
