package stack

import (
	"fmt"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/aws-cdk-go/awscdk/v2/awss3"
	"github.com/aws/aws-cdk-go/awscdk/v2/awss3express"
	"github.com/aws/jsii-runtime-go"
)

// Key prefixes of the Standard bucket (docs/design.md §4.2). Policies are scoped to
// them.
const (
	ChainsPrefix  = "chains/"
	StreamsPrefix = "streams/"
)

// storage builds the metastore table, the Standard bucket and one S3
// Express One Zone directory bucket per availability zone.
func (s *Starlog) storage() {
	c := s.Config
	s.Table = awsdynamodb.NewTable(s.Stack, jsii.String("Metastore"), &awsdynamodb.TableProps{
		PartitionKey: &awsdynamodb.Attribute{Name: jsii.String("pk"), Type: awsdynamodb.AttributeType_STRING},
		SortKey:      &awsdynamodb.Attribute{Name: jsii.String("sk"), Type: awsdynamodb.AttributeType_STRING},
		BillingMode:  awsdynamodb.BillingMode_PAY_PER_REQUEST,
		PointInTimeRecoverySpecification: &awsdynamodb.PointInTimeRecoverySpecification{
			PointInTimeRecoveryEnabled: jsii.Bool(true),
		},
		// Deletion protection is switched on by protectTable, last, so a
		// first create that fails anywhere can still delete the table.
		Encryption:    awsdynamodb.TableEncryption_AWS_MANAGED,
		RemovalPolicy: s.removalPolicy(),
	})

	s.Bucket = awss3.NewBucket(s.Stack, jsii.String("Standard"), &awss3.BucketProps{
		Encryption:        awss3.BucketEncryption_S3_MANAGED,
		BlockPublicAccess: awss3.BlockPublicAccess_BLOCK_ALL(),
		EnforceSSL:        jsii.Bool(true),
		MinimumTLSVersion: jsii.Number(1.2),
		ObjectOwnership:   awss3.ObjectOwnership_BUCKET_OWNER_ENFORCED,
		// Objects are created once and never overwritten: versioning would
		// only keep deleted slots and settled objects billable.
		Versioned:     jsii.Bool(false),
		RemovalPolicy: s.removalPolicy(),
		LifecycleRules: &[]*awss3.LifecycleRule{{
			Id: jsii.String("abort-incomplete-multipart-uploads"),
			// A settle that crashed mid-assembly leaves its upload behind.
			AbortIncompleteMultipartUploadAfter: awscdk.Duration_Days(jsii.Number(1)),
		}},
	})

	for i, name := range c.DirectoryBucketNames() {
		b := awss3express.NewCfnDirectoryBucket(s.Stack, jsii.String(fmt.Sprintf("Express%d", i+1)), &awss3express.CfnDirectoryBucketProps{
			BucketName:     jsii.String(name),
			DataRedundancy: jsii.String("SingleAvailabilityZone"),
			LocationName:   jsii.String(c.AvailabilityZoneIDs[i]),
			BucketEncryption: &awss3express.CfnDirectoryBucket_BucketEncryptionProperty{
				ServerSideEncryptionConfiguration: []any{&awss3express.CfnDirectoryBucket_ServerSideEncryptionRuleProperty{
					ServerSideEncryptionByDefault: &awss3express.CfnDirectoryBucket_ServerSideEncryptionByDefaultProperty{
						SseAlgorithm: jsii.String("AES256"),
					},
				}},
			},
			LifecycleConfiguration: &awss3express.CfnDirectoryBucket_LifecycleConfigurationProperty{
				Rules: []any{&awss3express.CfnDirectoryBucket_RuleProperty{
					Id:     jsii.String("abort-incomplete-multipart-uploads"),
					Status: jsii.String("Enabled"),
					AbortIncompleteMultipartUpload: &awss3express.CfnDirectoryBucket_AbortIncompleteMultipartUploadProperty{
						DaysAfterInitiation: jsii.Number(1),
					},
				}},
			},
		})
		b.ApplyRemovalPolicy(s.removalPolicy(), nil)
		s.DirectoryBuckets = append(s.DirectoryBuckets, b)
	}
}

// expressBucketRefs are the directory bucket names as deploy-time references,
// so whatever uses them depends on the buckets.
func (s *Starlog) expressBucketRefs() []string {
	out := make([]string, len(s.DirectoryBuckets))
	for i, b := range s.DirectoryBuckets {
		out[i] = *b.Ref()
	}
	return out
}

func (s *Starlog) expressBucketArns() []string {
	out := make([]string, len(s.DirectoryBuckets))
	for i, b := range s.DirectoryBuckets {
		out[i] = *b.AttrArn()
	}
	return out
}
