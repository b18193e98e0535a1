// Package rehearse renders a synthesized starlog CloudFormation template the
// way a deploy would resolve it, so tests can run what the stack runs: the
// stars' systemd unit from the launch template's user data (its ExecStart,
// Environment= and EnvironmentFile) and every auditor function's
// environment. Pseudo parameters and generated resource names are made
// deterministic (Pseudo, Name); everything else comes from the template.
//
// Nothing here knows starlog's flags or variables: a setting the stack
// forgets is missing in what this returns, and the rehearsal fails on it.
package rehearse

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Pseudo are the pseudo parameters a deploy resolves.
type Pseudo struct {
	Region, AccountID, StackName string
}

// Template is a parsed template with its pseudo parameters.
type Template struct {
	Pseudo    Pseudo
	Resources map[string]Resource
}

// Resource is one template resource.
type Resource struct {
	Type       string         `json:"Type"`
	Properties map[string]any `json:"Properties"`
	DependsOn  any            `json:"DependsOn"`
}

// LoadAssembly reads the one stack template of a cloud assembly directory
// (cdk.out) and takes its account and region from the assembly manifest,
// as the deploy would.
func LoadAssembly(dir string) (*Template, error) {
	b, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		return nil, fmt.Errorf("rehearse: %w", err)
	}
	var m struct {
		Artifacts map[string]struct {
			Type        string `json:"type"`
			Environment string `json:"environment"`
			Properties  struct {
				TemplateFile string `json:"templateFile"`
			} `json:"properties"`
		} `json:"artifacts"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("rehearse: manifest: %w", err)
	}
	var stacks []string
	for name, a := range m.Artifacts {
		if a.Type == "aws:cloudformation:stack" {
			stacks = append(stacks, name)
		}
	}
	if len(stacks) != 1 {
		return nil, fmt.Errorf("rehearse: %s holds %d stacks (%v), want 1", dir, len(stacks), stacks)
	}
	a := m.Artifacts[stacks[0]]
	env, ok := strings.CutPrefix(a.Environment, "aws://")
	account, region, ok2 := strings.Cut(env, "/")
	if !ok || !ok2 {
		return nil, fmt.Errorf("rehearse: stack %s has environment %q, want aws://<account>/<region>", stacks[0], a.Environment)
	}
	return Load(filepath.Join(dir, a.Properties.TemplateFile), Pseudo{Region: region, AccountID: account, StackName: stacks[0]})
}

// Load reads a template file.
func Load(path string, p Pseudo) (*Template, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("rehearse: %w", err)
	}
	var doc struct {
		Resources map[string]Resource `json:"Resources"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("rehearse: %s: %w", path, err)
	}
	return &Template{Pseudo: p, Resources: doc.Resources}, nil
}

// OfType lists the logical IDs of the resources of one type, sorted.
func (t *Template) OfType(typ string) []string {
	var out []string
	for id, r := range t.Resources {
		if r.Type == typ {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// Name is what Ref of a resource resolves to. A name the template fixes
// is used as is; a generated one is made deterministic from the stack name
// and the logical ID, as CloudFormation would make it (without its random
// suffix).
func (t *Template) Name(id string) (string, error) {
	r, ok := t.Resources[id]
	if !ok {
		return "", fmt.Errorf("rehearse: Ref to unknown resource %s", id)
	}
	fixed := func(prop string) (string, bool) {
		v, ok := r.Properties[prop].(string)
		return v, ok && v != ""
	}
	generated := t.Pseudo.StackName + "-" + id
	switch r.Type {
	case "AWS::DynamoDB::Table":
		if n, ok := fixed("TableName"); ok {
			return n, nil
		}
		return generated, nil
	case "AWS::S3::Bucket":
		if n, ok := fixed("BucketName"); ok {
			return n, nil
		}
		return strings.ToLower(generated), nil
	case "AWS::S3Express::DirectoryBucket":
		n, ok := fixed("BucketName")
		if !ok {
			return "", fmt.Errorf("rehearse: directory bucket %s has no fixed name", id)
		}
		return n, nil
	case "AWS::SQS::Queue":
		// Ref of a queue is its URL.
		n, ok := fixed("QueueName")
		if !ok {
			n = generated
		}
		return fmt.Sprintf("https://sqs.%s.amazonaws.com/%s/%s", t.Pseudo.Region, t.Pseudo.AccountID, n), nil
	case "AWS::SecretsManager::Secret":
		// Ref of a secret is its ARN; AWS appends six random characters.
		n, ok := fixed("Name")
		if !ok {
			n = generated
		}
		return fmt.Sprintf("arn:aws:secretsmanager:%s:%s:secret:%s-AbCdEf", t.Pseudo.Region, t.Pseudo.AccountID, n), nil
	case "AWS::Lambda::Function":
		if n, ok := fixed("FunctionName"); ok {
			return n, nil
		}
		return generated, nil
	}
	return generated, nil
}

// attr resolves Fn::GetAtt.
func (t *Template) attr(id, attr string) (string, error) {
	r, ok := t.Resources[id]
	if !ok {
		return "", fmt.Errorf("rehearse: GetAtt of unknown resource %s", id)
	}
	name, err := t.Name(id)
	if err != nil {
		return "", err
	}
	p := t.Pseudo
	switch r.Type + "." + attr {
	case "AWS::DynamoDB::Table.Arn":
		return fmt.Sprintf("arn:aws:dynamodb:%s:%s:table/%s", p.Region, p.AccountID, name), nil
	case "AWS::S3::Bucket.Arn":
		return "arn:aws:s3:::" + name, nil
	case "AWS::S3Express::DirectoryBucket.Arn":
		return fmt.Sprintf("arn:aws:s3express:%s:%s:bucket/%s", p.Region, p.AccountID, name), nil
	case "AWS::SQS::Queue.Arn":
		return fmt.Sprintf("arn:aws:sqs:%s:%s:%s", p.Region, p.AccountID, name[strings.LastIndexByte(name, '/')+1:]), nil
	case "AWS::SQS::Queue.QueueName":
		return name[strings.LastIndexByte(name, '/')+1:], nil
	case "AWS::SQS::Queue.QueueUrl":
		return name, nil
	case "AWS::ElasticLoadBalancingV2::LoadBalancer.DNSName":
		// The shape of an NLB's name (the stars advertise it to Kafka
		// clients; the rehearsal has no load balancer to reach).
		return fmt.Sprintf("%s.elb.%s.amazonaws.com", strings.ToLower(name), p.Region), nil
	}
	return "", fmt.Errorf("rehearse: GetAtt %s.%s (%s) is not rendered", id, attr, r.Type)
}

// Render resolves a template value to text: literals, Ref (pseudo
// parameters and resources), Fn::GetAtt, Fn::Join, Fn::Select, Fn::Sub
// without a variable map, and Fn::Base64 (rendered as its plain text: the
// rehearsal reads what the instance would decode).
func (t *Template) Render(v any) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case float64, bool:
		return fmt.Sprint(x), nil
	case map[string]any:
		if len(x) != 1 {
			return "", fmt.Errorf("rehearse: cannot render %v", x)
		}
		for fn, arg := range x {
			return t.intrinsic(fn, arg)
		}
	}
	return "", fmt.Errorf("rehearse: cannot render %T %v", v, v)
}

func (t *Template) intrinsic(fn string, arg any) (string, error) {
	switch fn {
	case "Ref":
		name, _ := arg.(string)
		switch name {
		case "AWS::Region":
			return t.Pseudo.Region, nil
		case "AWS::AccountId":
			return t.Pseudo.AccountID, nil
		case "AWS::StackName":
			return t.Pseudo.StackName, nil
		case "AWS::Partition":
			return "aws", nil
		case "AWS::URLSuffix":
			return "amazonaws.com", nil
		}
		return t.Name(name)
	case "Fn::GetAtt":
		parts, _ := arg.([]any)
		if len(parts) != 2 {
			return "", fmt.Errorf("rehearse: Fn::GetAtt %v", arg)
		}
		id, _ := parts[0].(string)
		a, _ := parts[1].(string)
		return t.attr(id, a)
	case "Fn::Join":
		parts, _ := arg.([]any)
		if len(parts) != 2 {
			return "", fmt.Errorf("rehearse: Fn::Join %v", arg)
		}
		sep, _ := parts[0].(string)
		items, _ := parts[1].([]any)
		out := make([]string, len(items))
		for i, it := range items {
			s, err := t.Render(it)
			if err != nil {
				return "", err
			}
			out[i] = s
		}
		return strings.Join(out, sep), nil
	case "Fn::Select":
		parts, _ := arg.([]any)
		if len(parts) != 2 {
			return "", fmt.Errorf("rehearse: Fn::Select %v", arg)
		}
		idx, _ := parts[0].(float64)
		items, _ := parts[1].([]any)
		if int(idx) < 0 || int(idx) >= len(items) {
			return "", fmt.Errorf("rehearse: Fn::Select %v out of range", arg)
		}
		return t.Render(items[int(idx)])
	case "Fn::Base64":
		return t.Render(arg)
	case "Fn::Sub":
		s, ok := arg.(string)
		if !ok {
			return "", fmt.Errorf("rehearse: Fn::Sub with a variable map is not rendered")
		}
		var b strings.Builder
		for {
			i := strings.Index(s, "${")
			if i < 0 {
				b.WriteString(s)
				return b.String(), nil
			}
			j := strings.IndexByte(s[i:], '}')
			if j < 0 {
				return "", fmt.Errorf("rehearse: Fn::Sub %q: unclosed ${", arg)
			}
			b.WriteString(s[:i])
			ref := s[i+2 : i+j]
			var v string
			var err error
			if id, a, ok := strings.Cut(ref, "."); ok && !strings.HasPrefix(ref, "AWS::") {
				v, err = t.attr(id, a)
			} else {
				v, err = t.intrinsic("Ref", ref)
			}
			if err != nil {
				return "", err
			}
			b.WriteString(v)
			s = s[i+j+1:]
		}
	}
	return "", fmt.Errorf("rehearse: intrinsic %s is not rendered", fn)
}

// UserData is the launch template's user data as the instance receives it.
func (t *Template) UserData() (string, error) {
	ids := t.OfType("AWS::EC2::LaunchTemplate")
	if len(ids) != 1 {
		return "", fmt.Errorf("rehearse: %d launch templates, want 1", len(ids))
	}
	data, _ := t.Resources[ids[0]].Properties["LaunchTemplateData"].(map[string]any)
	ud, ok := data["UserData"]
	if !ok {
		return "", fmt.Errorf("rehearse: launch template %s has no user data", ids[0])
	}
	return t.Render(ud)
}

// Function is one Lambda function as the template defines it.
type Function struct {
	LogicalID, Name, Runtime, Handler string
	// Env is the function's environment, rendered.
	Env map[string]string
}

// Functions lists the template's Lambda functions of a runtime ("" for
// all), by function name.
func (t *Template) Functions(runtime string) (map[string]Function, error) {
	out := map[string]Function{}
	for _, id := range t.OfType("AWS::Lambda::Function") {
		p := t.Resources[id].Properties
		f := Function{LogicalID: id, Env: map[string]string{}}
		f.Runtime, _ = p["Runtime"].(string)
		f.Handler, _ = p["Handler"].(string)
		if runtime != "" && f.Runtime != runtime {
			continue
		}
		var err error
		if f.Name, err = t.Name(id); err != nil {
			return nil, err
		}
		env, _ := p["Environment"].(map[string]any)
		vars, _ := env["Variables"].(map[string]any)
		for k, v := range vars {
			if f.Env[k], err = t.Render(v); err != nil {
				return nil, fmt.Errorf("rehearse: function %s variable %s: %w", id, k, err)
			}
		}
		out[f.Name] = f
	}
	return out, nil
}

// Table is a DynamoDB table's name and key schema.
type Table struct {
	Name                 string
	AttributeDefinitions []map[string]string
	KeySchema            []map[string]string
}

// Tables are the template's DynamoDB tables.
func (t *Template) Tables() ([]Table, error) {
	var out []Table
	for _, id := range t.OfType("AWS::DynamoDB::Table") {
		p := t.Resources[id].Properties
		name, err := t.Name(id)
		if err != nil {
			return nil, err
		}
		tb := Table{Name: name}
		b, _ := json.Marshal(p["AttributeDefinitions"])
		if err := json.Unmarshal(b, &tb.AttributeDefinitions); err != nil {
			return nil, fmt.Errorf("rehearse: table %s attribute definitions: %w", id, err)
		}
		b, _ = json.Marshal(p["KeySchema"])
		if err := json.Unmarshal(b, &tb.KeySchema); err != nil {
			return nil, fmt.Errorf("rehearse: table %s key schema: %w", id, err)
		}
		out = append(out, tb)
	}
	return out, nil
}

// Names resolves the Ref of every resource of a type.
func (t *Template) Names(typ string) ([]string, error) {
	var out []string
	for _, id := range t.OfType(typ) {
		n, err := t.Name(id)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

// Queue is an SQS queue's name and redrive.
type Queue struct {
	Name              string
	VisibilitySeconds int
	// DeadLetter is the dead-letter queue's name ("" for none) and
	// MaxReceiveCount its redrive bound.
	DeadLetter      string
	MaxReceiveCount int
}

// Queues are the template's SQS queues.
func (t *Template) Queues() ([]Queue, error) {
	var out []Queue
	for _, id := range t.OfType("AWS::SQS::Queue") {
		p := t.Resources[id].Properties
		url, err := t.Name(id)
		if err != nil {
			return nil, err
		}
		q := Queue{Name: url[strings.LastIndexByte(url, '/')+1:]}
		if v, ok := p["VisibilityTimeout"].(float64); ok {
			q.VisibilitySeconds = int(v)
		}
		if rp, ok := p["RedrivePolicy"].(map[string]any); ok {
			arn, err := t.Render(rp["deadLetterTargetArn"])
			if err != nil {
				return nil, err
			}
			q.DeadLetter = arn[strings.LastIndexByte(arn, ':')+1:]
			n, _ := rp["maxReceiveCount"].(float64)
			q.MaxReceiveCount = int(n)
		}
		out = append(out, q)
	}
	return out, nil
}
