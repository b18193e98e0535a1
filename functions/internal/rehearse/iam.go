package rehearse

import (
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"

	"github.com/starlog/starlog/infra/iamcheck"
	"github.com/starlog/starlog/shared/awsrecord"
)

// IAM coverage (issue 12): every AWS call a component made in the
// rehearsal, as shared/awsrecord recorded it, is mapped to the IAM
// requests AWS authorizes it by, and each must be allowed by the
// synthesized policy of that component's role. The grants nothing used are
// reported; those unused by a wide margin fail (WideUnused).

// Need is one authorization a call depends on: it holds when any of the
// alternatives is allowed (a CreateSession without a mode gets the most
// the policy allows: ReadWrite, else ReadOnly).
type Need struct {
	Any []iamcheck.Request
}

func (n Need) String() string {
	parts := make([]string, len(n.Any))
	for i, r := range n.Any {
		parts[i] = r.String()
	}
	return strings.Join(parts, " or ")
}

func one(action, resource string) Need {
	return Need{Any: []iamcheck.Request{{Action: action, Resource: resource}}}
}

// The S3 Express session modes and the condition key that names them.
const (
	modeReadWrite  = "ReadWrite"
	modeReadOnly   = "ReadOnly"
	sessionModeKey = "s3express:SessionMode"
)

// expressReadOnlyOps are the calls a ReadOnly session may make (the
// CreateSession API reference); every other call needs ReadWrite.
var expressReadOnlyOps = []string{"GetObject", "HeadObject", "ListObjectsV2", "GetObjectAttributes", "ListParts", "ListMultipartUploads"}

// IsDirectoryBucket reports an S3 Express directory bucket name.
func IsDirectoryBucket(name string) bool { return strings.HasSuffix(name, "--x-s3") }

// Needs maps one recorded call to what IAM must allow for it, in the
// partition, region and account of p. A call it does not know is an error:
// teach it the call's actions rather than let it pass unchecked.
func Needs(rec awsrecord.Record, p Pseudo) ([]Need, error) {
	switch rec.Service {
	case "S3":
		return s3Needs(rec, p)
	case "DynamoDB":
		return dynamoNeeds(rec, p)
	case "SQS":
		return sqsNeeds(rec, p)
	case "Secrets Manager":
		if rec.Op != "GetSecretValue" || !strings.HasPrefix(rec.SecretID, "arn:") {
			return nil, fmt.Errorf("rehearse: IAM mapping: Secrets Manager %s of %q is not mapped (the stack passes ARNs)", rec.Op, rec.SecretID)
		}
		return []Need{one("secretsmanager:GetSecretValue", rec.SecretID)}, nil
	}
	return nil, fmt.Errorf("rehearse: IAM mapping: unknown service %q (%s)", rec.Service, rec.Op)
}

func s3Needs(rec awsrecord.Record, p Pseudo) ([]Need, error) {
	if rec.Bucket == "" {
		return nil, fmt.Errorf("rehearse: IAM mapping: S3 %s without a bucket", rec.Op)
	}
	if IsDirectoryBucket(rec.Bucket) {
		return expressNeeds(rec, p)
	}
	bucket := "arn:aws:s3:::" + rec.Bucket
	object := bucket + "/" + rec.Key
	switch rec.Op {
	case "GetObject", "HeadObject":
		if rec.Status == 404 {
			// S3 answers a missing key 404 only to a caller that may list
			// the bucket, 403 to any other: code that relies on absence
			// needs ListBucket (issue 12 item 3).
			return []Need{one("s3:GetObject", object), one("s3:ListBucket", bucket)}, nil
		}
		return []Need{one("s3:GetObject", object)}, nil
	case "PutObject", "CreateMultipartUpload", "UploadPart", "CompleteMultipartUpload":
		return []Need{one("s3:PutObject", object)}, nil
	case "UploadPartCopy", "CopyObject":
		src, err := copySource(rec.CopySource)
		if err != nil {
			return nil, err
		}
		read, err := s3Needs(awsrecord.Record{Service: "S3", Op: "GetObject", Bucket: src[0], Key: src[1]}, p)
		if err != nil {
			return nil, err
		}
		return append([]Need{one("s3:PutObject", object)}, read...), nil
	case "DeleteObject":
		return []Need{one("s3:DeleteObject", object)}, nil
	case "DeleteObjects":
		var out []Need
		for _, k := range rec.Keys {
			out = append(out, one("s3:DeleteObject", bucket+"/"+k))
		}
		return out, nil
	case "AbortMultipartUpload":
		return []Need{one("s3:AbortMultipartUpload", object)}, nil
	case "ListParts":
		return []Need{one("s3:ListMultipartUploadParts", object)}, nil
	case "ListObjectsV2", "ListObjects", "HeadBucket":
		return []Need{one("s3:ListBucket", bucket)}, nil
	case "ListMultipartUploads":
		return []Need{one("s3:ListBucketMultipartUploads", bucket)}, nil
	}
	return nil, fmt.Errorf("rehearse: IAM mapping: S3 %s is not mapped", rec.Op)
}

// expressNeeds: on a directory bucket IAM sees only CreateSession (with
// its mode); the session authorizes the data calls, so a data call needs a
// session of a mode that allows it.
func expressNeeds(rec awsrecord.Record, p Pseudo) ([]Need, error) {
	arn := fmt.Sprintf("arn:aws:s3express:%s:%s:bucket/%s", p.Region, p.AccountID, rec.Bucket)
	session := func(modes ...string) Need {
		var n Need
		for _, m := range modes {
			n.Any = append(n.Any, iamcheck.Request{Action: "s3express:CreateSession", Resource: arn, Context: map[string]string{sessionModeKey: m}})
		}
		return n
	}
	switch {
	case rec.Op == "CreateSession" && rec.SessionMode == "":
		return []Need{session(modeReadWrite, modeReadOnly)}, nil
	case rec.Op == "CreateSession":
		return []Need{session(rec.SessionMode)}, nil
	case slices.Contains(expressReadOnlyOps, rec.Op):
		return []Need{session(modeReadOnly, modeReadWrite)}, nil
	}
	return []Need{session(modeReadWrite)}, nil
}

// copySource splits "bucket/key" (URL-encoded, maybe with ?versionId).
func copySource(s string) ([2]string, error) {
	s, _, _ = strings.Cut(s, "?")
	s = strings.TrimPrefix(s, "/")
	if u, err := url.PathUnescape(s); err == nil {
		s = u
	}
	b, k, ok := strings.Cut(s, "/")
	if !ok || b == "" || k == "" {
		return [2]string{}, fmt.Errorf("rehearse: IAM mapping: copy source %q is not bucket/key", s)
	}
	return [2]string{b, k}, nil
}

func dynamoNeeds(rec awsrecord.Record, p Pseudo) ([]Need, error) {
	table := func(name string) string {
		return fmt.Sprintf("arn:aws:dynamodb:%s:%s:table/%s", p.Region, p.AccountID, name)
	}
	action := "dynamodb:" + rec.Op
	switch rec.Op {
	case "GetItem", "PutItem", "UpdateItem", "DeleteItem":
		if rec.Table == "" {
			break
		}
		return []Need{one(action, table(rec.Table))}, nil
	case "Query", "Scan":
		if rec.Table == "" {
			break
		}
		arn := table(rec.Table)
		if rec.Index != "" {
			arn += "/index/" + rec.Index
		}
		return []Need{one(action, arn)}, nil
	case "BatchWriteItem", "BatchGetItem":
		var out []Need
		for _, t := range rec.Tables {
			out = append(out, one(action, table(t)))
		}
		if len(out) > 0 {
			return out, nil
		}
	}
	return nil, fmt.Errorf("rehearse: IAM mapping: DynamoDB %s (table %q) is not mapped", rec.Op, rec.Table)
}

func sqsNeeds(rec awsrecord.Record, p Pseudo) ([]Need, error) {
	u, err := url.Parse(rec.QueueURL)
	var parts []string
	if err == nil {
		parts = strings.Split(strings.Trim(u.Path, "/"), "/")
	}
	if len(parts) != 2 {
		return nil, fmt.Errorf("rehearse: IAM mapping: SQS %s: queue URL %q is not <endpoint>/<account>/<name>", rec.Op, rec.QueueURL)
	}
	region := p.Region
	if r, ok := strings.CutPrefix(u.Hostname(), "sqs."); ok {
		region, _, _ = strings.Cut(r, ".")
	}
	arn := fmt.Sprintf("arn:aws:sqs:%s:%s:%s", region, parts[0], parts[1])
	switch rec.Op {
	case "SendMessage", "SendMessageBatch":
		return []Need{one("sqs:SendMessage", arn)}, nil
	case "ReceiveMessage", "DeleteMessage", "ChangeMessageVisibility", "GetQueueAttributes":
		return []Need{one("sqs:"+rec.Op, arn)}, nil
	case "DeleteMessageBatch":
		return []Need{one("sqs:DeleteMessage", arn)}, nil
	}
	return nil, fmt.Errorf("rehearse: IAM mapping: SQS %s is not mapped", rec.Op)
}

// Unused is a grant nothing of its component used, and why it may stay.
type Unused struct {
	Grant iamcheck.Grant
	// Wide: no call of the component touched the grant's resource (the
	// object prefix, bucket, table, directory bucket or queue) with any
	// action. Such a grant fails the check unless Allowed names its
	// reason. A narrow one (another action was used there) is reported.
	Wide bool
	// Allowed is the allowlist's reason ("" when not allowlisted).
	Allowed string
}

// Allow is an allowlist entry: a grant known to go unused in the
// rehearsal, and why it is needed anyway.
type Allow struct {
	Component string
	Action    string
	// Resource is an iamcheck.Match pattern on the grant's resource.
	Resource string
	Reason   string
}

// Coverage is one component's result.
type Coverage struct {
	Component, Role string
	// Calls is the number of recorded calls, Ops the distinct
	// "Service Op" among them, Requests the distinct IAM requests they
	// needed.
	Calls    int
	Ops      []string
	Requests int
	// Denied lists every call the policy does not allow, with its need.
	Denied []string
	Used   []iamcheck.Grant
	Unused []Unused
	// StaleAllow are allowlist entries of this component that matched a
	// used grant or none at all: the list must say only what is true.
	StaleAllow []Allow
}

// Failed reports the failures: denials, wide unused grants not
// allowlisted, stale allowlist entries.
func (c Coverage) Failed() []string {
	var out []string
	for _, d := range c.Denied {
		out = append(out, fmt.Sprintf("%s (role %s): denied: %s", c.Component, c.Role, d))
	}
	for _, u := range c.Unused {
		if u.Wide && u.Allowed == "" {
			out = append(out, fmt.Sprintf("%s (role %s): grant unused by a wide margin: %s", c.Component, c.Role, u.Grant))
		}
	}
	for _, a := range c.StaleAllow {
		out = append(out, fmt.Sprintf("%s (role %s): allowlist entry %s on %s matches no unused grant: remove it", c.Component, c.Role, a.Action, a.Resource))
	}
	return out
}

// CheckedServices are the services whose grants Check accounts: the data
// services and the star's secrets. The others (logs, metrics, the drain
// hook, the stack signal) are not called through the recorded clients.
var CheckedServices = append(slices.Clone(iamcheck.DataServices), "secretsmanager")

// Check evaluates one component's calls against its role's statements.
func Check(component, role string, stmts []iamcheck.Statement, recs []awsrecord.Record, p Pseudo, allow []Allow) (Coverage, error) {
	c := Coverage{Component: component, Role: role, Calls: len(recs)}
	ops := map[string]bool{}
	used := map[iamcheck.Grant]bool{}
	requests := map[string]iamcheck.Request{}
	denied := map[string]bool{}
	for _, rec := range recs {
		ops[rec.Service+" "+rec.Op] = true
		needs, err := Needs(rec, p)
		if err != nil {
			return c, err
		}
		for _, n := range needs {
			ok := false
			for _, req := range n.Any {
				d, err := iamcheck.Evaluate(stmts, req)
				if err != nil {
					return c, err
				}
				if d.Allowed {
					ok = true
					requests[req.String()] = req
					for _, g := range d.Grants {
						used[g] = true
					}
					break
				}
			}
			if !ok {
				denied[fmt.Sprintf("%s %s %s: needs %s", rec.Service, rec.Op, resourceOf(rec), n)] = true
			}
		}
	}
	c.Ops = slices.Sorted(maps.Keys(ops))
	c.Requests = len(requests)
	c.Denied = slices.Sorted(maps.Keys(denied))
	matchedAllow := make([]bool, len(allow))
	for _, g := range iamcheck.Grants(stmts) {
		svc, _, _ := strings.Cut(g.Action, ":")
		if !slices.Contains(CheckedServices, svc) {
			continue
		}
		if used[g] {
			c.Used = append(c.Used, g)
			continue
		}
		u := Unused{Grant: g, Wide: wide(g, requests)}
		for i, a := range allow {
			if a.Component == component && strings.EqualFold(a.Action, g.Action) && iamcheck.Match(a.Resource, g.Resource) {
				u.Allowed, matchedAllow[i] = a.Reason, true
			}
		}
		c.Unused = append(c.Unused, u)
	}
	for i, a := range allow {
		if a.Component == component && !matchedAllow[i] {
			c.StaleAllow = append(c.StaleAllow, a)
		}
	}
	return c, nil
}

// wide: no allowed request touched the grant's resource with any action.
func wide(g iamcheck.Grant, requests map[string]iamcheck.Request) bool {
	for _, r := range requests {
		if iamcheck.Match(g.Resource, r.Resource) {
			return false
		}
	}
	return true
}

func resourceOf(rec awsrecord.Record) string {
	switch {
	case rec.Bucket != "" && rec.Key != "":
		return rec.Bucket + "/" + rec.Key
	case rec.Bucket != "" && rec.Prefix != nil:
		return rec.Bucket + " prefix " + *rec.Prefix
	case rec.Bucket != "" && len(rec.Keys) > 0:
		return fmt.Sprintf("%s %v", rec.Bucket, rec.Keys)
	case rec.Bucket != "":
		return rec.Bucket + sessionSuffix(rec)
	case rec.Table != "":
		return rec.Table
	case len(rec.Tables) > 0:
		return strings.Join(rec.Tables, ",")
	case rec.SecretID != "":
		return rec.SecretID
	}
	return rec.QueueURL
}

func sessionSuffix(rec awsrecord.Record) string {
	if rec.Op == "CreateSession" {
		return " mode " + cmpOr(rec.SessionMode, "(none)")
	}
	return ""
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// RoleStatements are the policy statements of every role of the template,
// rendered as the deploy resolves them (what the renderer cannot resolve,
// such as a log group's ARN, stays symbolic and matches no request).
func (t *Template) RoleStatements() ([]iamcheck.Statement, error) {
	res := make(map[string]any, len(t.Resources))
	for id, r := range t.Resources {
		res[id] = map[string]any{"Type": r.Type, "Properties": r.Properties}
	}
	return iamcheck.StatementsRendered(map[string]any{"Resources": res}, func(v any) (string, error) {
		if s, err := t.Render(v); err == nil {
			return s, nil
		}
		return iamcheck.Render(v), nil
	})
}

// StarRole is the logical ID of the role of the stars' instance profile.
func (t *Template) StarRole() (string, error) {
	ids := t.OfType("AWS::EC2::LaunchTemplate")
	if len(ids) != 1 {
		return "", fmt.Errorf("rehearse: %d launch templates, want 1", len(ids))
	}
	data, _ := t.Resources[ids[0]].Properties["LaunchTemplateData"].(map[string]any)
	prof, _ := data["IamInstanceProfile"].(map[string]any)
	profile, err := getAttID(prof["Arn"])
	if err != nil {
		return "", fmt.Errorf("rehearse: launch template %s instance profile: %w", ids[0], err)
	}
	roles, _ := t.Resources[profile].Properties["Roles"].([]any)
	if len(roles) != 1 {
		return "", fmt.Errorf("rehearse: instance profile %s has %d roles, want 1", profile, len(roles))
	}
	ref, _ := roles[0].(map[string]any)
	id, _ := ref["Ref"].(string)
	if id == "" {
		return "", fmt.Errorf("rehearse: instance profile %s role is %v, not a Ref", profile, roles[0])
	}
	return id, nil
}

// FunctionRole is the logical ID of a function's execution role.
func (t *Template) FunctionRole(f Function) (string, error) {
	id, err := getAttID(t.Resources[f.LogicalID].Properties["Role"])
	if err != nil {
		return "", fmt.Errorf("rehearse: function %s role: %w", f.LogicalID, err)
	}
	return id, nil
}

func getAttID(v any) (string, error) {
	m, _ := v.(map[string]any)
	parts, _ := m["Fn::GetAtt"].([]any)
	if len(parts) != 2 {
		return "", fmt.Errorf("%v is not Fn::GetAtt", v)
	}
	id, _ := parts[0].(string)
	return id, nil
}
