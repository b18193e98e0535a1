package servecmd

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/config"
)

// required is what `star serve` cannot start without. A star that lacks a
// setting exits at once with a message naming the flag and its variable,
// rather than failing later inside the store it could not reach.
type required struct {
	sqlite, table, dynamoRegion string
	fsRoot, s3Region            string
	// standardGiven and expressGiven say whether the bucket sets were set
	// (flag or variable) rather than left at the local defaults.
	standardGiven, expressGiven bool
}

// flagRef names a flag and its environment fallback: --s3-region
// (STARLOG_S3_REGION).
func flagRef(flag string) string { return fmt.Sprintf("--%s (%s)", flag, EnvName(flag)) }

// check reports every missing setting. region resolves the AWS SDK's
// default region (AWS_REGION, the shared config) for a DynamoDB table
// without --dynamo-region.
func (r required) check(ctx context.Context, region func(context.Context) string) error {
	var errs []error
	switch {
	case r.sqlite == "" && r.table == "":
		errs = append(errs, fmt.Errorf("metastore: set %s to a DynamoDB table, or %s to a SQLite file", flagRef("dynamo-table"), flagRef("sqlite")))
	case r.table != "" && r.dynamoRegion == "" && region(ctx) == "":
		errs = append(errs, fmt.Errorf("metastore: DynamoDB table %q has no region: set %s (or AWS_REGION)", r.table, flagRef("dynamo-region")))
	}
	switch {
	case r.fsRoot == "" && r.s3Region == "":
		errs = append(errs, fmt.Errorf("object store: set %s for S3, or %s to a directory", flagRef("s3-region"), flagRef("fs-root")))
	case r.fsRoot == "":
		// On S3 the local default names ("standard", "express-a"…) are
		// someone else's buckets.
		if !r.standardGiven {
			errs = append(errs, fmt.Errorf("object store: S3 needs the Standard bucket set: set %s", flagRef("standard-buckets")))
		}
		if !r.expressGiven {
			errs = append(errs, fmt.Errorf("object store: S3 needs the Express bucket set (one directory bucket per zone): set %s", flagRef("express-buckets")))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("star serve: missing settings:\n%w", err)
	}
	return nil
}

// defaultAWSRegion is the region the AWS SDK would use when none is given.
func defaultAWSRegion(ctx context.Context) string {
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return ""
	}
	return cfg.Region
}
