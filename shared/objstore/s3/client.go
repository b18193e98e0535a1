package s3

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go/middleware"

	"github.com/starlog/starlog/shared/awsretry"
)

// Config is what NewClient needs to reach an S3 endpoint with static keys
// (tests and local development; production loads the default AWS chain).
type Config struct {
	Endpoint  string // e.g. http://127.0.0.1:7070; empty for AWS
	Region    string
	AccessKey string
	SecretKey string
	// PathStyle addresses buckets as /bucket/key (needed by versitygw).
	// Leave it off for S3 Express on AWS: directory buckets take
	// virtual-hosted requests only.
	PathStyle bool
	// HTTPClient, if set, sends every request (tests route virtual-hosted
	// names such as "<bucket>.s3express.test" to a loopback stand-in).
	// Nil: the SDK's default client.
	HTTPClient config.HTTPClient
	// APIOptions are extra SDK middleware on every call (the rehearsal's
	// operation recorder, shared/awsrecord); nil in production.
	APIOptions []func(*middleware.Stack) error
}

// NewClient builds an S3 client from cfg.
func NewClient(ctx context.Context, cfg Config) (*awss3.Client, error) {
	if cfg.Region == "" {
		return nil, errors.New("s3: config: empty region")
	}
	opts := []func(*config.LoadOptions) error{
		config.WithRegion(cfg.Region),
		// Ranged GETs carry no full-object checksum; validate only when the
		// object's checksum comes back (see Get).
		config.WithResponseChecksumValidation(aws.ResponseChecksumValidationWhenRequired),
	}
	// One deliberate retry policy (no client-side retry quota); the
	// conditional writes still make a single attempt (session.go clients).
	opts = append(opts, config.WithRetryer(awsretry.New(0)))
	if len(cfg.APIOptions) > 0 {
		opts = append(opts, config.WithAPIOptions(cfg.APIOptions))
	}
	if cfg.HTTPClient != nil {
		opts = append(opts, config.WithHTTPClient(cfg.HTTPClient))
	}
	if cfg.AccessKey != "" {
		opts = append(opts, config.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(cfg.AccessKey, cfg.SecretKey, "")))
	}
	awsCfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("s3: load aws config: %w", err)
	}
	return awss3.NewFromConfig(awsCfg, func(o *awss3.Options) {
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
		o.UsePathStyle = cfg.PathStyle
		o.DisableLogOutputChecksumValidationSkipped = true
	}), nil
}
