package servecmd

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/starlog/starlog/shared/testsvc/secretsfront"
	"github.com/starlog/starlog/star/auth"
)

// The stack's way: both credentials come from Secrets Manager by ARN,
// read with the instance's keys; a secret the keys may not read stops the
// start with an error naming the flag.
func TestCredentialsFromSecretsManager(t *testing.T) {
	const (
		adminARN = "arn:aws:secretsmanager:us-east-1:123456789012:secret:AdminToken-AbCdEf"
		keyARN   = "arn:aws:secretsmanager:us-east-1:123456789012:secret:InternalKey-GhIjKl"
		otherARN = "arn:aws:secretsmanager:us-east-1:123456789012:secret:Other-MnOpQr"
	)
	admin, key := strings.Repeat("a", 48), strings.Repeat("k", 64)
	f, err := secretsfront.New(secretsfront.Config{
		Region: "us-east-1",
		Secrets: []secretsfront.Secret{
			{ARN: adminARN, Name: "AdminToken", Value: admin},
			{ARN: keyARN, Name: "InternalKey", Value: key},
			{ARN: otherARN, Name: "Other", Value: "x"},
		},
		Principals: []secretsfront.Principal{{AccessKey: "starrole", SecretKey: "starrolesecret", Readable: []string{adminARN, keyARN}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(f)
	defer srv.Close()
	for k, v := range map[string]string{
		"AWS_ENDPOINT_URL_SECRETS_MANAGER": srv.URL, "AWS_ACCESS_KEY_ID": "starrole", "AWS_SECRET_ACCESS_KEY": "starrolesecret",
		"AWS_EC2_METADATA_DISABLED": "true", "AWS_CONFIG_FILE": "/nonexistent", "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
		EnvAdminToken: "", EnvInternalKey: "",
	} {
		t.Setenv(k, v)
	}
	load := func(args ...string) (auth.Config, error) {
		var c credentials
		fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
		c.register(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return c.load(context.Background())
	}
	cfg, err := load("--admin-token-secret", adminARN, "--internal-key-secret", keyARN)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.AdminToken != admin || string(cfg.InternalKey) != key {
		t.Fatalf("loaded %q / %q", cfg.AdminToken, cfg.InternalKey)
	}
	_, err = load("--admin-token-secret", adminARN, "--internal-key-secret", otherARN)
	if err == nil || !strings.Contains(err.Error(), "--internal-key-secret (STARLOG_INTERNAL_KEY_SECRET)") || !strings.Contains(err.Error(), "AccessDeniedException") {
		t.Fatalf("an ungranted secret: %v", err)
	}
	_, err = load()
	if err == nil || !strings.Contains(err.Error(), "--admin-token-secret (STARLOG_ADMIN_TOKEN_SECRET)") {
		t.Fatalf("no source: %v", err)
	}
}
