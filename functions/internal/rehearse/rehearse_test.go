package rehearse

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

func tmpl(t *testing.T, resources string) *Template {
	t.Helper()
	var res map[string]Resource
	if err := json.Unmarshal([]byte(resources), &res); err != nil {
		t.Fatal(err)
	}
	return &Template{Pseudo: Pseudo{Region: "us-east-1", AccountID: "123456789012", StackName: "Starlog"}, Resources: res}
}

func TestRender(t *testing.T) {
	tm := tmpl(t, `{
		"Table1": {"Type": "AWS::DynamoDB::Table", "Properties": {}},
		"Bucket1": {"Type": "AWS::S3::Bucket", "Properties": {}},
		"Dir1": {"Type": "AWS::S3Express::DirectoryBucket", "Properties": {"BucketName": "b--use1-az4--x-s3"}},
		"Q1": {"Type": "AWS::SQS::Queue", "Properties": {"QueueName": "Starlog-settle"}},
		"Sec1": {"Type": "AWS::SecretsManager::Secret", "Properties": {}}
	}`)
	for in, want := range map[string]string{
		`{"Ref": "AWS::Region"}`:                      "us-east-1",
		`{"Ref": "Table1"}`:                           "Starlog-Table1",
		`{"Ref": "Bucket1"}`:                          "starlog-bucket1",
		`{"Ref": "Sec1"}`:                             "arn:aws:secretsmanager:us-east-1:123456789012:secret:Starlog-Sec1-AbCdEf",
		`{"Ref": "Dir1"}`:                             "b--use1-az4--x-s3",
		`{"Ref": "Q1"}`:                               "https://sqs.us-east-1.amazonaws.com/123456789012/Starlog-settle",
		`{"Fn::GetAtt": ["Q1", "Arn"]}`:               "arn:aws:sqs:us-east-1:123456789012:Starlog-settle",
		`{"Fn::GetAtt": ["Table1", "Arn"]}`:           "arn:aws:dynamodb:us-east-1:123456789012:table/Starlog-Table1",
		`{"Fn::Join": [",", [{"Ref": "Dir1"}, "x"]]}`: "b--use1-az4--x-s3,x",
		`{"Fn::Base64": {"Fn::Join": ["", ["a=", {"Ref": "AWS::StackName"}]]}}`: "a=Starlog",
		`{"Fn::Sub": "cdk-${AWS::AccountId}-${Dir1.Arn}"}`:                      "cdk-123456789012-arn:aws:s3express:us-east-1:123456789012:bucket/b--use1-az4--x-s3",
		`{"Fn::Select": [1, ["a", {"Ref": "AWS::Partition"}]]}`:                 "aws",
	} {
		var v any
		if err := json.Unmarshal([]byte(in), &v); err != nil {
			t.Fatal(err)
		}
		got, err := tm.Render(v)
		if err != nil || got != want {
			t.Errorf("Render(%s) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{`{"Ref": "Nope"}`, `{"Fn::ImportValue": "x"}`, `{"Fn::GetAtt": ["Bucket1", "DomainName"]}`} {
		var v any
		json.Unmarshal([]byte(in), &v)
		if got, err := tm.Render(v); err == nil {
			t.Errorf("Render(%s) = %q, want an error", in, got)
		}
	}
}

const script = `#!/bin/bash
cat > /etc/a.env <<EOF
ID=${INSTANCE_ID}
ADDR=${LOCAL_IP}:8081
EOF

cat > /etc/systemd/system/x.service <<'EOF'
[Unit]
Description=x
StartLimitIntervalSec=0

[Service]
EnvironmentFile=/etc/a.env
Environment=AWS_REGION=us-east-1 B=2
ExecStart=/opt/x serve \
  --listen=:8080 \
  --id=${ID}
Restart=always
EOF
`

func TestServiceRunning(t *testing.T) {
	s, err := ServiceRunning(script, "serve")
	if err != nil {
		t.Fatal(err)
	}
	argv, env, err := s.Instance(map[string]string{"INSTANCE_ID": "i-1", "LOCAL_IP": "10.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(argv, " "); got != "/opt/x serve --listen=:8080 --id=i-1" {
		t.Errorf("argv %q", got)
	}
	if !slices.Equal(env, []string{"ADDR=10.0.0.1:8081", "AWS_REGION=us-east-1", "B=2", "ID=i-1"}) {
		t.Errorf("env %q", env)
	}
	if _, _, err := s.Instance(map[string]string{"INSTANCE_ID": "i-1"}); err == nil {
		t.Error("an instance variable the rehearsal does not know expanded anyway")
	}
	out, err := Replace(argv, "listen", func(old string) string { return "127.0.0.1:1" + old })
	if err != nil || out[2] != "--listen=127.0.0.1:1:8080" || argv[2] != "--listen=:8080" {
		t.Errorf("Replace: %q %v", out, err)
	}
	if _, err := Replace(argv, "nope", func(string) string { return "" }); err == nil {
		t.Error("Replace of a missing flag")
	}
	if f := Flags(argv); f["id"] != "i-1" || f["listen"] != ":8080" || len(f) != 2 {
		t.Errorf("Flags %v", f)
	}
}

func TestUnsupportedSyntaxFails(t *testing.T) {
	for _, exec := range []string{`/opt/x serve --a="b c"`, `/opt/x serve $FOO`, `/opt/x serve %i`, `-/opt/x serve`} {
		u, err := ParseUnit("[Service]\nExecStart=" + exec + "\n")
		if err != nil {
			t.Fatal(err)
		}
		if argv, err := u.ExecStart(); err == nil {
			t.Errorf("ExecStart=%s parsed as %q", exec, argv)
		}
	}
	if _, err := (Heredoc{Path: "p", Body: "A=$(hostname)\n"}).Expand(nil); err == nil {
		t.Error("a command substitution in an unquoted heredoc expanded")
	}
}
