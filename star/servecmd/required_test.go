package servecmd

import (
	"context"
	"strings"
	"testing"
)

func TestRequiredSettings(t *testing.T) {
	noRegion := func(context.Context) string { return "" }
	awsRegion := func(context.Context) string { return "us-east-1" }
	s3 := required{table: "t", dynamoRegion: "us-east-1", s3Region: "us-east-1", standardGiven: true, expressGiven: true}
	for name, c := range map[string]struct {
		r      required
		region func(context.Context) string
		want   []string // every one must appear; nil: no error
	}{
		"production":             {r: s3, region: noRegion},
		"local cluster":          {r: required{sqlite: "m.db", fsRoot: "objs"}, region: noRegion},
		"dynamo region from AWS": {r: required{table: "t", fsRoot: "objs"}, region: awsRegion},
		"nothing": {r: required{}, region: noRegion, want: []string{
			"--dynamo-table (STARLOG_DYNAMO_TABLE)", "--sqlite (STARLOG_SQLITE)",
			"--s3-region (STARLOG_S3_REGION)", "--fs-root (STARLOG_FS_ROOT)"}},
		// The unit of issue 12: every star exited with "no directory and
		// no S3 region configured".
		"no S3 region": {r: required{table: "t", dynamoRegion: "us-east-1", standardGiven: true, expressGiven: true}, region: awsRegion,
			want: []string{"--s3-region (STARLOG_S3_REGION)"}},
		"no dynamo region": {r: required{table: "t", fsRoot: "objs"}, region: noRegion,
			want: []string{"--dynamo-region (STARLOG_DYNAMO_REGION)"}},
		"default buckets on S3": {r: required{table: "t", dynamoRegion: "r", s3Region: "r"}, region: noRegion,
			want: []string{"--standard-buckets (STARLOG_STANDARD_BUCKETS)", "--express-buckets (STARLOG_EXPRESS_BUCKETS)"}},
	} {
		t.Run(name, func(t *testing.T) {
			err := c.r.check(context.Background(), c.region)
			if c.want == nil {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error, want one naming %v", c.want)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %s", err, w)
				}
			}
		})
	}
}
