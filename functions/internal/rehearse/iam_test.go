package rehearse

import (
	"slices"
	"strings"
	"testing"

	"github.com/starlog/starlog/infra/iamcheck"
	"github.com/starlog/starlog/shared/awsrecord"
)

// A small stack: one role that reads and writes chains, lists the bucket,
// opens ReadOnly sessions, reads the table and sends to one queue.
func iamTemplate(t *testing.T) *Template {
	return tmpl(t, `{
		"Bucket": {"Type": "AWS::S3::Bucket", "Properties": {"BucketName": "std"}},
		"Dir": {"Type": "AWS::S3Express::DirectoryBucket", "Properties": {"BucketName": "d--use1-az4--x-s3"}},
		"Table": {"Type": "AWS::DynamoDB::Table", "Properties": {"TableName": "meta"}},
		"Q": {"Type": "AWS::SQS::Queue", "Properties": {"QueueName": "jobs"}},
		"Role": {"Type": "AWS::IAM::Role", "Properties": {}},
		"Pol": {"Type": "AWS::IAM::Policy", "Properties": {"Roles": [{"Ref": "Role"}], "PolicyDocument": {"Statement": [
			{"Sid": "Chains", "Effect": "Allow", "Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"], "Resource": {"Fn::Join": ["", [{"Fn::GetAtt": ["Bucket", "Arn"]}, "/chains/*"]]}},
			{"Sid": "Settled", "Effect": "Allow", "Action": "s3:GetObject", "Resource": {"Fn::Join": ["", [{"Fn::GetAtt": ["Bucket", "Arn"]}, "/streams/*"]]}},
			{"Sid": "List", "Effect": "Allow", "Action": "s3:ListBucket", "Resource": {"Fn::GetAtt": ["Bucket", "Arn"]}},
			{"Sid": "RO", "Effect": "Allow", "Action": "s3express:CreateSession", "Resource": {"Fn::GetAtt": ["Dir", "Arn"]}, "Condition": {"StringEquals": {"s3express:SessionMode": "ReadOnly"}}},
			{"Sid": "Meta", "Effect": "Allow", "Action": ["dynamodb:GetItem", "dynamodb:Query"], "Resource": {"Fn::GetAtt": ["Table", "Arn"]}},
			{"Sid": "Send", "Effect": "Allow", "Action": "sqs:SendMessage", "Resource": {"Fn::GetAtt": ["Q", "Arn"]}},
			{"Sid": "Other", "Effect": "Allow", "Action": "sqs:SendMessage", "Resource": "arn:aws:sqs:us-east-1:123456789012:other"},
			{"Sid": "Logs", "Effect": "Allow", "Action": "logs:PutLogEvents", "Resource": {"Fn::GetAtt": ["Logs", "Arn"]}}
		]}}}
	}`)
}

func prefix(s string) *string { return &s }

func TestCheckCoverage(t *testing.T) {
	tm := iamTemplate(t)
	stmts, err := tm.RoleStatements()
	if err != nil {
		t.Fatal(err)
	}
	stmts = iamcheck.ForRole(stmts, "Role")
	good := []awsrecord.Record{
		{Service: "S3", Op: "GetObject", Bucket: "std", Key: "chains/s1/0001"},
		{Service: "S3", Op: "HeadObject", Bucket: "std", Key: "streams/b/s/1"},
		{Service: "S3", Op: "PutObject", Bucket: "std", Key: "chains/s1/0002"},
		{Service: "S3", Op: "ListObjectsV2", Bucket: "std", Prefix: prefix("chains/")},
		{Service: "S3", Op: "CreateSession", Bucket: "d--use1-az4--x-s3"},
		{Service: "S3", Op: "GetObject", Bucket: "d--use1-az4--x-s3", Key: "chains/s1/0001"},
		{Service: "DynamoDB", Op: "Query", Table: "meta"},
		{Service: "DynamoDB", Op: "GetItem", Table: "meta"},
		{Service: "SQS", Op: "SendMessageBatch", QueueURL: "https://sqs.us-east-1.amazonaws.com/123456789012/jobs"},
	}
	allow := []Allow{{Component: "c", Action: "sqs:SendMessage", Resource: "arn:aws:sqs:*:other", Reason: "sends there only on Sundays"}}
	c, err := Check("c", "Role", stmts, good, tm.Pseudo, allow)
	if err != nil {
		t.Fatal(err)
	}
	if f := c.Failed(); len(f) != 0 {
		t.Fatalf("a covered component fails: %v", f)
	}
	// Unused: DeleteObject on chains/* (narrow: chains/* is read and
	// written), the other queue (wide, allowlisted).
	if len(c.Unused) != 2 || c.Unused[0].Grant.Action != "s3:deleteobject" || c.Unused[0].Wide ||
		c.Unused[1].Grant.Resource != "arn:aws:sqs:us-east-1:123456789012:other" || !c.Unused[1].Wide || c.Unused[1].Allowed == "" {
		t.Fatalf("unused %+v: want the narrow DeleteObject and the allowlisted queue", c.Unused)
	}
	if len(c.Ops) != 8 || c.Calls != 9 || c.Requests != 8 {
		t.Errorf("ops %v calls %d", c.Ops, c.Calls)
	}

	// Denials name the call and what it needed.
	for name, tc := range map[string]struct {
		rec  awsrecord.Record
		want string
	}{
		"settled put":        {awsrecord.Record{Service: "S3", Op: "PutObject", Bucket: "std", Key: "streams/b/s/1"}, "s3:PutObject on arn:aws:s3:::std/streams/b/s/1"},
		"express write":      {awsrecord.Record{Service: "S3", Op: "PutObject", Bucket: "d--use1-az4--x-s3", Key: "chains/x"}, "s3express:CreateSession on arn:aws:s3express:us-east-1:123456789012:bucket/d--use1-az4--x-s3 [s3express:SessionMode=ReadWrite]"},
		"read-write session": {awsrecord.Record{Service: "S3", Op: "CreateSession", Bucket: "d--use1-az4--x-s3", SessionMode: "ReadWrite"}, "SessionMode=ReadWrite"},
		"batch delete":       {awsrecord.Record{Service: "S3", Op: "DeleteObjects", Bucket: "std", Keys: []string{"chains/a", "streams/b"}}, "s3:DeleteObject on arn:aws:s3:::std/streams/b"},
		"table write":        {awsrecord.Record{Service: "DynamoDB", Op: "BatchWriteItem", Tables: []string{"meta"}}, "dynamodb:BatchWriteItem on arn:aws:dynamodb:us-east-1:123456789012:table/meta"},
		"other queue":        {awsrecord.Record{Service: "SQS", Op: "SendMessage", QueueURL: "https://sqs.us-east-1.amazonaws.com/123456789012/third"}, "sqs:SendMessage on arn:aws:sqs:us-east-1:123456789012:third"},
		"secret":             {awsrecord.Record{Service: "Secrets Manager", Op: "GetSecretValue", SecretID: "arn:aws:secretsmanager:us-east-1:123456789012:secret:x-AbCdEf"}, "secretsmanager:GetSecretValue on arn:aws:secretsmanager:us-east-1:123456789012:secret:x-AbCdEf"},
		"copy onto streams":  {awsrecord.Record{Service: "S3", Op: "UploadPartCopy", Bucket: "std", Key: "streams/x", CopySource: "std/chains%2Fy"}, "s3:PutObject on arn:aws:s3:::std/streams/x"},
	} {
		t.Run(name, func(t *testing.T) {
			c, err := Check("c", "Role", stmts, append(good, tc.rec), tm.Pseudo, allow)
			if err != nil {
				t.Fatal(err)
			}
			f := strings.Join(c.Failed(), "\n")
			if len(c.Denied) != 1 || !strings.Contains(f, tc.want) || !strings.Contains(f, "role Role") || !strings.Contains(f, tc.rec.Op) {
				t.Errorf("failures %q: want one denial naming %q", f, tc.want)
			}
		})
	}

	// An unused grant with no reason fails when it is wide; a stale
	// allowlist entry fails.
	c, err = Check("c", "Role", stmts, good, tm.Pseudo, nil)
	if err != nil {
		t.Fatal(err)
	}
	if f := c.Failed(); len(f) != 1 || !strings.Contains(f[0], "unused by a wide margin: sqs:sendmessage on arn:aws:sqs:us-east-1:123456789012:other") {
		t.Errorf("failures %q: want the unused queue only", f)
	}
	stale := append(allow, Allow{Component: "c", Action: "s3:GetObject", Resource: "arn:aws:s3:::std/chains/*", Reason: "used"})
	if c, err = Check("c", "Role", stmts, good, tm.Pseudo, stale); err != nil {
		t.Fatal(err)
	}
	if f := strings.Join(c.Failed(), "\n"); !strings.Contains(f, "allowlist entry s3:GetObject") {
		t.Errorf("failures %q: want the stale allowlist entry", f)
	}
	// A missing key on a general-purpose bucket reads 404 only with
	// ListBucket: the call needs it.
	noList := iamcheck.ForRole(stmts, "Role")
	noList = slices.DeleteFunc(slices.Clone(noList), func(s iamcheck.Statement) bool { return s.Sid == "List" })
	miss := awsrecord.Record{Service: "S3", Op: "HeadObject", Bucket: "std", Key: "chains/s1/0009", Status: 404}
	if c, err = Check("c", "Role", noList, []awsrecord.Record{miss}, tm.Pseudo, nil); err != nil {
		t.Fatal(err)
	}
	if len(c.Denied) != 1 || !strings.Contains(c.Denied[0], "s3:ListBucket on arn:aws:s3:::std") {
		t.Errorf("a 404 without ListBucket: denied %q", c.Denied)
	}
	// A call the mapping does not know is an error, not a pass.
	if _, err := Check("c", "Role", stmts, []awsrecord.Record{{Service: "S3", Op: "PutBucketPolicy", Bucket: "std"}}, tm.Pseudo, nil); err == nil {
		t.Error("an unmapped call passed")
	}
}
