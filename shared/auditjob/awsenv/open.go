package awsenv

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/starlog/starlog/shared/awsrecord"
	"github.com/starlog/starlog/shared/awsretry"
	"github.com/starlog/starlog/shared/meta/dynamo"
	s3store "github.com/starlog/starlog/shared/objstore/s3"
	"github.com/starlog/starlog/shared/settle"
)

// Runtime is what a function builds once, at cold start, and reuses for
// every invocation.
type Runtime struct {
	Env    Env
	Stores *settle.Stores
	// Queues sends jobs to the queues whose URLs are set (nil: none is).
	Queues *Queues
	// Registry holds the settle metrics; the plan function reads its
	// gauges back to publish them (EMF).
	Registry *prometheus.Registry
	Logger   *slog.Logger
}

// Logger is the JSON logger a function writes to stderr (CloudWatch Logs
// takes it as is) at the level e names (default info).
func Logger(e Env) (*slog.Logger, error) {
	var lvl slog.Level
	if e.LogLevel != "" {
		if err := lvl.UnmarshalText([]byte(e.LogLevel)); err != nil {
			return nil, fmt.Errorf("awsenv: %s=%q: %w", EnvLogLevel, e.LogLevel, err)
		}
	}
	return slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: lvl})), nil
}

// Open builds the clients e describes. It makes no request: a bad
// endpoint or credential shows in the first job.
func Open(ctx context.Context, e Env, log *slog.Logger) (*Runtime, error) {
	// The recorder lives as long as the function's process (it writes
	// each record unbuffered, so nothing is lost when Lambda freezes it).
	var rec *awsrecord.Recorder
	if e.RecordOps != "" {
		var err error
		if rec, err = awsrecord.Open(e.RecordOps); err != nil {
			return nil, fmt.Errorf("awsenv: %s: %w", EnvRecordOps, err)
		}
	}
	dc, err := dynamo.NewClient(ctx, dynamo.Config{Endpoint: e.DynamoEndpoint, Region: e.DynamoRegion,
		AccessKey: e.AccessKey, SecretKey: e.SecretKey, APIOptions: rec.APIOptions()})
	if err != nil {
		return nil, fmt.Errorf("awsenv: metastore: %w", err)
	}
	sc, err := s3store.NewClient(ctx, s3store.Config{Endpoint: e.S3Endpoint, Region: e.S3Region, PathStyle: e.S3PathStyle,
		AccessKey: e.AccessKey, SecretKey: e.SecretKey, APIOptions: rec.APIOptions()})
	if err != nil {
		return nil, fmt.Errorf("awsenv: object store: %w", err)
	}
	reg := prometheus.NewRegistry()
	ms := dynamo.New(dc, e.Table)
	rt := &Runtime{
		Env: e,
		Stores: &settle.Stores{
			Meta:          ms,
			Objects:       s3store.New(sc),
			SettledBucket: e.SettledBucket,
			Streams:       settle.MetaStreams{Meta: ms},
			Config:        e.Settle,
			Metrics:       settle.NewMetrics(reg),
			Logger:        log,
		},
		Registry: reg,
		Logger:   log,
	}
	if len(e.QueueURLs) > 0 {
		client, err := sqsClient(ctx, e, rec)
		if err != nil {
			return nil, err
		}
		rt.Queues = NewQueues(client, e.QueueURLs)
	}
	return rt, nil
}

func sqsClient(ctx context.Context, e Env, rec *awsrecord.Recorder) (*sqs.Client, error) {
	region := e.Region
	if region == "" {
		region = e.S3Region
	}
	opts := []func(*config.LoadOptions) error{config.WithRegion(region), config.WithRetryer(awsretry.New(0))}
	if e.AccessKey != "" {
		opts = append(opts, config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(e.AccessKey, e.SecretKey, "")))
	}
	if o := rec.APIOptions(); o != nil {
		opts = append(opts, config.WithAPIOptions(o))
	}
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("awsenv: sqs config: %w", err)
	}
	return sqs.NewFromConfig(cfg, func(o *sqs.Options) {
		if e.SQSEndpoint != "" {
			o.BaseEndpoint = aws.String(e.SQSEndpoint)
		}
	}), nil
}
