// Package awssecret reads a secret string from AWS Secrets Manager: the
// stack hands the star and its admin commands their credentials this way.
package awssecret

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/smithy-go/middleware"

	"github.com/starlog/starlog/shared/awsretry"
)

// FetchTimeout bounds reading one secret from Secrets Manager at
// start (the SDK retries within it).
const FetchTimeout = 30 * time.Second

// Fetch reads a Secrets Manager secret's string by ARN (what the
// stack passes) or name. An ARN names its region; a name uses the SDK's
// default region. The endpoint is the SDK's (AWS_ENDPOINT_URL_SECRETS_MANAGER
// overrides it, as the rehearsal does).
// apiOptions are added to the client's middleware (an operation recorder).
func Fetch(ctx context.Context, id string, apiOptions ...func(*middleware.Stack) error) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, FetchTimeout)
	defer cancel()
	opts := []func(*config.LoadOptions) error{config.WithRetryer(awsretry.New(0))}
	if region := arnRegion(id); region != "" {
		opts = append(opts, config.WithRegion(region))
	}
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return "", fmt.Errorf("secret %s: aws config: %w", id, err)
	}
	if cfg.Region == "" {
		return "", fmt.Errorf("secret %s: no region: give the secret's ARN or set AWS_REGION", id)
	}
	client := secretsmanager.NewFromConfig(cfg, func(o *secretsmanager.Options) { o.APIOptions = append(o.APIOptions, apiOptions...) })
	out, err := client.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(id)})
	if err != nil {
		return "", fmt.Errorf("secret %s: %w", id, err)
	}
	if out.SecretString == nil {
		return "", errors.New("secret " + id + ": not a string secret")
	}
	return *out.SecretString, nil
}

// arnRegion is the region field of arn:partition:secretsmanager:region:…,
// or "" for a name.
func arnRegion(id string) string {
	f := strings.SplitN(id, ":", 6)
	if len(f) < 6 || f[0] != "arn" || f[2] != "secretsmanager" {
		return ""
	}
	return f[3]
}
