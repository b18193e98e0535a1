package stack

import (
	"slices"

	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/jsii-runtime-go"

	"github.com/starlog/starlog/infra/config"
)

// Metastore action sets. The contract (shared/meta) needs single-item
// get/put/delete with conditions, range queries and batched writes; no role
// scans the table. Only the star batches (a basin's stream tombstones):
// no auditor job calls BatchPut or BatchDelete (the rehearsal's IAM
// coverage check found BatchWriteItem unused by every function).
var (
	metaRead     = []string{"dynamodb:GetItem", "dynamodb:Query"}
	metaWrite    = []string{"dynamodb:GetItem", "dynamodb:Query", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem"}
	metaWriteAll = append(slices.Clone(metaWrite), "dynamodb:BatchWriteItem")
)

// S3 Express session modes: a session authorises every object operation in
// its directory bucket, so the mode is the only narrowing there is.
const (
	expressNone      = ""
	expressReadOnly  = "ReadOnly"
	expressReadWrite = "ReadWrite"
)

// grant is what one role may do with starlog's data.
type grant struct {
	meta []string
	// objects maps a Standard-bucket key prefix to the object actions on
	// the keys under it.
	objects map[string][]string
	// list allows ListBucket on the Standard bucket: reclamation lists,
	// and every role that relies on a missing key reading as absent needs
	// it (without it S3 answers a GET or HEAD of a missing key 403, which
	// the code never takes for absence: objstore.ErrAccessDenied).
	list    bool
	express string
	// sendTo are the queue jobs this role enqueues to.
	sendTo []string
}

// starGrant: stars write and read chain slots (their own and, when they
// settle a predecessor, its poison) and read settled objects; their probes
// and the reader's stale-row retry rely on a missing key reading as
// absent. Slot deletion belongs to the auditor's trim.
var starGrant = grant{
	meta: metaWriteAll,
	objects: map[string][]string{
		ChainsPrefix:  {"s3:GetObject", "s3:PutObject"},
		StreamsPrefix: {"s3:GetObject"},
	},
	list:    true,
	express: expressReadWrite,
}

// jobGrants is exactly what each auditor job needs (docs/design.md §10, §11).
var jobGrants = map[string]grant{
	// plan reads chains, markers and cursors and enqueues work.
	config.JobPlan: {
		meta:   metaRead,
		sendTo: []string{config.JobSettle, config.JobTrim, config.JobChainSettle},
	},
	// janitor: dead stars (heartbeat rows), settle duty (enqueued), and
	// reclamation of settled objects: it lists a deleted stream's settled
	// objects and deletes them, and deletes superseded and trimmed ones
	// after the read grace (reclaim.ReclaimStreams, reclaim.Reclaim). It
	// touches no chain slot and no directory bucket.
	config.JobJanitor: {
		meta:    metaWrite,
		objects: map[string][]string{StreamsPrefix: {"s3:DeleteObject"}},
		list:    true,
		sendTo:  []string{config.JobChainSettle},
	},
	// settle reads an era's bundles (either class) and the standing tail
	// object, publishes settled objects create-once (one PUT, or a
	// multipart upload from 5 MiB), and
	// commits catalog rows.
	config.JobSettle: {
		meta: metaWrite,
		objects: map[string][]string{
			ChainsPrefix:  {"s3:GetObject"},
			StreamsPrefix: {"s3:GetObject", "s3:PutObject", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts"},
		},
		list:    true, // the adoption read of a settled object relies on absence
		express: expressReadOnly,
	},
	// trim advances cursors, deletes retired slots from every bucket of
	// the set, and at a settled epoch's cut reaps its garbage window (reads
	// envelopes, replaces flight copies with poison): the one deleter of
	// slots.
	config.JobTrim: {
		meta:    metaWrite,
		objects: map[string][]string{ChainsPrefix: {"s3:GetObject", "s3:PutObject", "s3:DeleteObject"}},
		list:    true,
		express: expressReadWrite,
	},
	// chain-settle fences (poison puts), walks (footer reads), absorbs
	// (span refs) and poisons the garbage window; it deletes nothing.
	config.JobChainSettle: {
		meta:    metaWrite,
		objects: map[string][]string{ChainsPrefix: {"s3:GetObject", "s3:PutObject"}},
		list:    true,
		express: expressReadWrite,
	},
}

// statements renders a grant as policy statements on this stack's
// resources.
func (s *Starlog) statements(g grant) []awsiam.PolicyStatement {
	var out []awsiam.PolicyStatement
	allow := func(sid string, actions []string, resources []string, cond map[string]any) {
		props := &awsiam.PolicyStatementProps{
			Sid:       jsii.String(sid),
			Effect:    awsiam.Effect_ALLOW,
			Actions:   jsii.Strings(actions...),
			Resources: jsii.Strings(resources...),
		}
		if cond != nil {
			props.Conditions = &cond
		}
		out = append(out, awsiam.NewPolicyStatement(props))
	}
	if len(g.meta) > 0 {
		allow("Metastore", g.meta, []string{*s.Table.TableArn()}, nil)
	}
	for _, prefix := range []string{ChainsPrefix, StreamsPrefix} {
		if acts := g.objects[prefix]; len(acts) > 0 {
			sid := "ChainObjects"
			if prefix == StreamsPrefix {
				sid = "SettledObjects"
			}
			allow(sid, acts, []string{*s.Bucket.ArnForObjects(jsii.String(prefix + "*"))}, nil)
		}
	}
	if g.list {
		// Unconditioned: S3 decides 404 versus 403 for a missing key by
		// whether the caller may list the bucket, and a GET carries no
		// s3:prefix for a condition to match.
		allow("ListBucket", []string{"s3:ListBucket"}, []string{*s.Bucket.BucketArn()}, nil)
	}
	switch g.express {
	case expressReadOnly:
		allow("ExpressSessionReadOnly", []string{"s3express:CreateSession"}, s.expressBucketArns(), map[string]any{
			"StringEquals": map[string]any{"s3express:SessionMode": expressReadOnly},
		})
	case expressReadWrite:
		allow("ExpressSession", []string{"s3express:CreateSession"}, s.expressBucketArns(), nil)
	}
	if len(g.sendTo) > 0 {
		var arns []string
		for _, job := range g.sendTo {
			arns = append(arns, *s.Queues[job].QueueArn())
		}
		allow("Enqueue", []string{"sqs:SendMessage"}, arns, nil)
	}
	return out
}
