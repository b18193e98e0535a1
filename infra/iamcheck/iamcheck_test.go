package iamcheck

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
)

// tmpl builds a template with one AWS::IAM::Policy holding the statements.
func tmpl(statements string) []byte {
	return []byte(`{"Resources":{
  "Role1":{"Type":"AWS::IAM::Role","Properties":{"AssumeRolePolicyDocument":{}}},
  "Pol1":{"Type":"AWS::IAM::Policy","Properties":{"Roles":[{"Ref":"Role1"}],
    "PolicyDocument":{"Version":"2012-10-17","Statement":` + statements + `}}}}}`)
}

const tableArn = `{"Fn::GetAtt":["Table","Arn"]}`
const chainObjects = `{"Fn::Join":["",[{"Fn::GetAtt":["Bucket","Arn"]},"/chains/*"]]}`

func TestCheckFindsViolations(t *testing.T) {
	cases := map[string]struct {
		stmt string
		want string
	}{
		"s3 star":            {`[{"Effect":"Allow","Action":"s3:*","Resource":` + chainObjects + `}]`, `wildcard data action "s3:*"`},
		"dynamodb star":      {`[{"Effect":"Allow","Action":["dynamodb:*"],"Resource":` + tableArn + `}]`, "wildcard data action"},
		"sqs star":           {`[{"Effect":"Allow","Action":["sqs:*"],"Resource":"arn:aws:sqs:us-east-1:1:q"}]`, "wildcard data action"},
		"partial wildcard":   {`[{"Effect":"Allow","Action":["s3:GetObject*"],"Resource":` + chainObjects + `}]`, "wildcard data action"},
		"upper case":         {`[{"Effect":"Allow","Action":["S3:*"],"Resource":` + chainObjects + `}]`, "wildcard data action"},
		"all actions":        {`[{"Effect":"Allow","Action":"*","Resource":"*"}]`, "every action"},
		"data on star":       {`[{"Effect":"Allow","Action":["dynamodb:GetItem"],"Resource":"*"}]`, "every resource"},
		"data on star2":      {`[{"Effect":"Allow","Action":["s3express:CreateSession"],"Resource":["arn:aws:s3express:us-east-1:1:bucket/b--use1-az4--x-s3","*"]}]`, "every resource"},
		"not action":         {`[{"Effect":"Allow","NotAction":["iam:*"],"Resource":"*"}]`, "NotAction"},
		"not resource":       {`[{"Effect":"Allow","Action":["s3:GetObject"],"NotResource":"arn:aws:s3:::x/y"}]`, "NotResource"},
		"all tables":         {`[{"Effect":"Allow","Action":["dynamodb:Query"],"Resource":"arn:aws:dynamodb:us-east-1:1:table/*"}]`, "wildcard resource"},
		"all buckets":        {`[{"Effect":"Allow","Action":["s3:GetObject"],"Resource":"arn:aws:s3:::*"}]`, "wildcard resource"},
		"all buckets pseudo": {`[{"Effect":"Allow","Action":["s3:GetObject"],"Resource":{"Fn::Join":["",["arn:",{"Ref":"AWS::Partition"},":s3:::*/x"]]}}]`, "wildcard resource"},
		"all queues":         {`[{"Effect":"Allow","Action":["sqs:SendMessage"],"Resource":{"Fn::Join":["",["arn:",{"Ref":"AWS::Partition"},":sqs:us-east-1:1:*"]]}}]`, "wildcard resource"},
		"single statement":   {`{"Effect":"Allow","Action":"dynamodb:PutItem","Resource":"*"}`, "every resource"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			fs, err := CheckTemplateJSON(tmpl(tc.stmt))
			if err != nil {
				t.Fatal(err)
			}
			if len(fs) == 0 {
				t.Fatalf("no finding for %s", tc.stmt)
			}
			var all []string
			for _, f := range fs {
				all = append(all, f.String())
			}
			if !strings.Contains(strings.Join(all, "\n"), tc.want) {
				t.Errorf("findings %v do not mention %q", all, tc.want)
			}
		})
	}
}

func TestCheckAcceptsLeastPrivilege(t *testing.T) {
	ok := `[
  {"Effect":"Allow","Action":["s3:GetObject","s3:PutObject"],"Resource":` + chainObjects + `},
  {"Effect":"Allow","Action":["dynamodb:GetItem","dynamodb:Query"],"Resource":[` + tableArn + `,{"Fn::Join":["",[` + tableArn + `,"/index/*"]]}]},
  {"Effect":"Allow","Action":"s3express:CreateSession","Resource":{"Fn::GetAtt":["Dir1","Arn"]},"Condition":{"StringEquals":{"s3express:SessionMode":"ReadOnly"}}},
  {"Effect":"Allow","Action":["cloudwatch:PutMetricData","ec2:DescribeTags"],"Resource":"*"},
  {"Effect":"Deny","Action":"s3:*","Resource":"*"},
  {"Effect":"Allow","Action":"s3:ListBucket","Resource":{"Fn::Join":["",["arn:",{"Ref":"AWS::Partition"},":s3:::named/streams/*"]]}},
  {"Effect":"Allow","Action":"autoscaling:CompleteLifecycleAction","Resource":"arn:aws:autoscaling:us-east-1:1:autoScalingGroup:*:autoScalingGroupName/x"}
]`
	fs, err := CheckTemplateJSON(tmpl(ok))
	if err != nil {
		t.Fatal(err)
	}
	if len(fs) != 0 {
		t.Errorf("least-privilege policy flagged: %v", fs)
	}
}

func TestRoleInlinePoliciesAreWalked(t *testing.T) {
	b := []byte(`{"Resources":{"R":{"Type":"AWS::IAM::Role","Properties":{"Policies":[
	  {"PolicyName":"p","PolicyDocument":{"Statement":[{"Effect":"Allow","Action":"sqs:*","Resource":"*"}]}}]}}}}`)
	fs, err := CheckTemplateJSON(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(fs) < 2 {
		t.Errorf("inline role policy not checked: %v", fs)
	}
	if fs[0].Policy != "R" {
		t.Errorf("finding names %q, want the role", fs[0].Policy)
	}
}

func TestManagedPolicyIsWalked(t *testing.T) {
	b := []byte(`{"Resources":{"M":{"Type":"AWS::IAM::ManagedPolicy","Properties":{"PolicyDocument":{"Statement":[{"Effect":"Allow","Action":"dynamodb:*","Resource":"*"}]}}}}}`)
	fs, err := CheckTemplateJSON(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(fs) == 0 {
		t.Error("managed policy not checked")
	}
}

func TestResourcePoliciesIgnored(t *testing.T) {
	// A bucket policy's TLS-only Deny uses s3:* on purpose.
	b := []byte(`{"Resources":{"BP":{"Type":"AWS::S3::BucketPolicy","Properties":{"PolicyDocument":{"Statement":[{"Effect":"Deny","Action":"s3:*","Principal":{"AWS":"*"},"Resource":"*"}]}}}}}`)
	fs, err := CheckTemplateJSON(b)
	if err != nil || len(fs) != 0 {
		t.Errorf("resource policy flagged: %v %v", fs, err)
	}
}

func TestRender(t *testing.T) {
	cases := map[string]any{
		"${Bucket.Arn}/chains/*":       map[string]any{"Fn::Join": []any{"", []any{map[string]any{"Fn::GetAtt": []any{"Bucket", "Arn"}}, "/chains/*"}}},
		"arn:${AWS::Partition}:s3:::b": map[string]any{"Fn::Join": []any{"", []any{"arn:", map[string]any{"Ref": "AWS::Partition"}, ":s3:::b"}}},
		"plain":                        "plain",
		`{"Fn::Select":[0,["a"]]}`:     map[string]any{"Fn::Select": []any{0.0, []any{"a"}}},
	}
	for want, v := range cases {
		if got := Render(v); got != want {
			t.Errorf("Render = %q, want %q", got, want)
		}
	}
}

func TestQueries(t *testing.T) {
	stmts, err := Statements(mustMap(t, tmpl(`[
	  {"Effect":"Allow","Action":["s3:GetObject","s3:PutObject"],"Resource":`+chainObjects+`},
	  {"Effect":"Deny","Action":["s3:DeleteObject"],"Resource":`+chainObjects+`}]`)))
	if err != nil {
		t.Fatal(err)
	}
	role := ForRole(stmts, "Role1")
	if len(role) != 2 || len(ForRole(stmts, "Other")) != 0 {
		t.Fatalf("ForRole: %v", role)
	}
	chains := regexp.MustCompile(`/chains/\*$`)
	if !Allowed(role, "s3:PutObject", chains) {
		t.Error("PutObject on chains not seen")
	}
	if Allowed(role, "s3:DeleteObject", chains) {
		t.Error("a Deny counted as a grant")
	}
	if got := strings.Join(Actions(role), ","); got != "s3:getobject,s3:putobject" {
		t.Errorf("Actions = %s", got)
	}
}

func TestMalformed(t *testing.T) {
	for _, b := range []string{
		`not json`,
		`{"Resources":{"P":{"Type":"AWS::IAM::Policy","Properties":{"PolicyDocument":"x"}}}}`,
		`{"Resources":{"P":{"Type":"AWS::IAM::Policy","Properties":{"PolicyDocument":{"Statement":5}}}}}`,
		`{"Resources":{"P":"x"}}`,
	} {
		if _, err := CheckTemplateJSON([]byte(b)); err == nil {
			t.Errorf("accepted malformed template %s", b)
		}
	}
}

func mustMap(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := jsonUnmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// FuzzCheckTemplateJSON: any input gives findings or an error, never a
// panic; and a statement granting s3:* anywhere is always found.
func FuzzCheckTemplateJSON(f *testing.F) {
	f.Add(tmpl(`[{"Effect":"Allow","Action":"s3:GetObject","Resource":` + chainObjects + `}]`))
	f.Add(tmpl(`{"Effect":"Allow","Action":"*","Resource":"*"}`))
	f.Add([]byte(`{"Resources":{"R":{"Type":"AWS::IAM::Role","Properties":{"Policies":[{"PolicyDocument":{"Statement":[]}}]}}}}`))
	f.Add([]byte(`{"Resources":{"R":{"Type":"AWS::IAM::Role","Properties":{"Policies":[7]}}}}`))
	f.Add([]byte(`{"Resources":null}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		fs, err := CheckTemplateJSON(b)
		if err != nil {
			return
		}
		_ = fs
		// Appending a wildcard policy to any template that parsed must be
		// found.
		var m map[string]any
		if jsonUnmarshal(b, &m) != nil {
			return
		}
		res, ok := m["Resources"].(map[string]any)
		if !ok {
			res = map[string]any{}
			m["Resources"] = res
		}
		res["ZZInjected"] = map[string]any{"Type": "AWS::IAM::Policy", "Properties": map[string]any{
			"PolicyDocument": map[string]any{"Statement": []any{map[string]any{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}}}}}
		stmts, err := Statements(m)
		if err != nil {
			return
		}
		found := false
		for _, f := range Check(stmts) {
			if f.Policy == "ZZInjected" {
				found = true
			}
		}
		if !found {
			t.Fatal("injected s3:* policy not found")
		}
	})
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }
