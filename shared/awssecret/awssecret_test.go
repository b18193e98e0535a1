package awssecret

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/starlog/starlog/shared/testsvc/secretsfront"
)

const testSecretARN = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:starlog-admin-AbCdEf"

// The star reads a secret by ARN through the SDK (region from the ARN,
// endpoint from the SDK's own override variable); a secret its keys are
// not granted is an error naming the secret.
func TestFetchSecretThroughTheSDK(t *testing.T) {
	f, err := secretsfront.New(secretsfront.Config{
		Region: "eu-west-1",
		Secrets: []secretsfront.Secret{
			{ARN: testSecretARN, Name: "starlog-admin", Value: "the-admin-token"},
			{ARN: testSecretARN + "x", Name: "other", Value: "no"},
		},
		Principals: []secretsfront.Principal{{AccessKey: "starrole", SecretKey: "starrolesecret", Readable: []string{testSecretARN}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(f)
	defer srv.Close()
	t.Setenv("AWS_ENDPOINT_URL_SECRETS_MANAGER", srv.URL)
	t.Setenv("AWS_ACCESS_KEY_ID", "starrole")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "starrolesecret")
	t.Setenv("AWS_REGION", "")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	t.Setenv("AWS_CONFIG_FILE", "/nonexistent")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
	got, err := Fetch(context.Background(), testSecretARN)
	if err != nil || got != "the-admin-token" {
		t.Fatalf("Fetch = %q, %v", got, err)
	}
	if _, err := Fetch(context.Background(), testSecretARN+"x"); err == nil || !strings.Contains(err.Error(), "AccessDeniedException") || !strings.Contains(err.Error(), testSecretARN+"x") {
		t.Fatalf("ungranted secret: %v", err)
	}
	if _, err := Fetch(context.Background(), "starlog-admin"); err == nil || !strings.Contains(err.Error(), "no region") {
		t.Fatalf("a name without a region: %v", err)
	}
}
