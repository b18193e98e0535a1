package iamcheck

import (
	"encoding/json"
	"strings"
	"testing"
)

// resolve renders the test templates' references as a deploy would.
func resolve(v any) (string, error) {
	s := Render(v)
	s = strings.ReplaceAll(s, "${Bucket.Arn}", "arn:aws:s3:::bkt")
	s = strings.ReplaceAll(s, "${Table.Arn}", "arn:aws:dynamodb:us-east-1:1:table/tbl")
	s = strings.ReplaceAll(s, "${Dir1.Arn}", "arn:aws:s3express:us-east-1:1:bucket/d--use1-az4--x-s3")
	if strings.Contains(s, "${") {
		return "", &json.UnsupportedValueError{Str: s}
	}
	return s, nil
}

func evalStatements(t *testing.T, statements string) []Statement {
	t.Helper()
	var tm map[string]any
	if err := json.Unmarshal(tmpl(statements), &tm); err != nil {
		t.Fatal(err)
	}
	st, err := StatementsRendered(tm, resolve)
	if err != nil {
		t.Fatal(err)
	}
	return ForRole(st, "Role1")
}

func TestEvaluate(t *testing.T) {
	stmts := evalStatements(t, `[
  {"Sid":"Chains","Effect":"Allow","Action":["s3:GetObject","s3:PutObject"],"Resource":`+chainObjects+`},
  {"Sid":"List","Effect":"Allow","Action":"s3:ListBucket","Resource":{"Fn::GetAtt":["Bucket","Arn"]}},
  {"Sid":"Meta","Effect":"Allow","Action":["dynamodb:GetItem","dynamodb:Query"],"Resource":[`+tableArn+`,{"Fn::Join":["",[`+tableArn+`,"/index/*"]]}]},
  {"Sid":"RO","Effect":"Allow","Action":"s3express:CreateSession","Resource":{"Fn::GetAtt":["Dir1","Arn"]},"Condition":{"StringEquals":{"s3express:SessionMode":"ReadOnly"}}},
  {"Sid":"NoPoison","Effect":"Deny","Action":"s3:PutObject","Resource":"arn:aws:s3:::bkt/chains/poison/*"},
  {"Sid":"Q","Effect":"Allow","Action":"SQS:Send*","Resource":"arn:aws:sqs:us-east-1:1:q?"}
]`)
	ro := map[string]string{"s3express:SessionMode": "ReadOnly"}
	rw := map[string]string{"s3express:sessionmode": "ReadWrite"}
	cases := []struct {
		req  Request
		want bool
		sid  string
	}{
		{Request{Action: "s3:GetObject", Resource: "arn:aws:s3:::bkt/chains/a/b"}, true, "Chains"},
		{Request{Action: "S3:getobject", Resource: "arn:aws:s3:::bkt/chains/a/b"}, true, "Chains"},
		{Request{Action: "s3:GetObject", Resource: "arn:aws:s3:::bkt/streams/a"}, false, ""},
		{Request{Action: "s3:GetObject", Resource: "arn:aws:s3:::bkt/Chains/a"}, false, ""},
		{Request{Action: "s3:GetObject", Resource: "arn:aws:s3:::other/chains/a"}, false, ""},
		{Request{Action: "s3:DeleteObject", Resource: "arn:aws:s3:::bkt/chains/a"}, false, ""},
		{Request{Action: "s3:ListBucket", Resource: "arn:aws:s3:::bkt"}, true, "List"},
		{Request{Action: "s3:ListBucket", Resource: "arn:aws:s3:::bkt/chains/"}, false, ""},
		{Request{Action: "s3:PutObject", Resource: "arn:aws:s3:::bkt/chains/poison/x"}, false, ""},
		{Request{Action: "dynamodb:Query", Resource: "arn:aws:dynamodb:us-east-1:1:table/tbl/index/byStar"}, true, "Meta"},
		{Request{Action: "dynamodb:Query", Resource: "arn:aws:dynamodb:us-east-1:1:table/tbl2"}, false, ""},
		{Request{Action: "dynamodb:PutItem", Resource: "arn:aws:dynamodb:us-east-1:1:table/tbl"}, false, ""},
		{Request{Action: "s3express:CreateSession", Resource: "arn:aws:s3express:us-east-1:1:bucket/d--use1-az4--x-s3", Context: ro}, true, "RO"},
		{Request{Action: "s3express:CreateSession", Resource: "arn:aws:s3express:us-east-1:1:bucket/d--use1-az4--x-s3", Context: rw}, false, ""},
		{Request{Action: "s3express:CreateSession", Resource: "arn:aws:s3express:us-east-1:1:bucket/d--use1-az4--x-s3"}, false, ""},
		{Request{Action: "sqs:SendMessage", Resource: "arn:aws:sqs:us-east-1:1:q1"}, true, "Q"},
		{Request{Action: "sqs:SendMessage", Resource: "arn:aws:sqs:us-east-1:1:q12"}, false, ""},
		{Request{Action: "sqs:ReceiveMessage", Resource: "arn:aws:sqs:us-east-1:1:q1"}, false, ""},
	}
	for _, c := range cases {
		d, err := Evaluate(stmts, c.req)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed != c.want {
			t.Errorf("%v: allowed %v, want %v (%+v)", c.req, d.Allowed, c.want, d)
			continue
		}
		if c.want && (len(d.Grants) != 1 || d.Grants[0].Sid != c.sid) {
			t.Errorf("%v: allowed by %v, want Sid %s", c.req, d.Grants, c.sid)
		}
	}
	if n := len(Grants(stmts)); n != 2+1+2*2+1+1 {
		t.Errorf("%d grants, want 9: %v", n, Grants(stmts))
	}
}

func TestEvaluateConditions(t *testing.T) {
	one := func(cond string) []Statement {
		return evalStatements(t, `[{"Effect":"Allow","Action":"s3:GetObject","Resource":"*","Condition":`+cond+`}]`)
	}
	req := func(ctx map[string]string) Request {
		return Request{Action: "s3:GetObject", Resource: "arn:aws:s3:::b/k", Context: ctx}
	}
	cases := []struct {
		cond string
		ctx  map[string]string
		want bool
	}{
		{`{"StringEquals":{"k":["a","b"]}}`, map[string]string{"k": "b"}, true},
		{`{"StringEquals":{"k":"a"}}`, map[string]string{"k": "A"}, false},
		{`{"StringEqualsIgnoreCase":{"k":"a"}}`, map[string]string{"k": "A"}, true},
		{`{"StringEquals":{"k":"a"}}`, nil, false},
		{`{"StringEqualsIfExists":{"k":"a"}}`, nil, true},
		{`{"StringEqualsIfExists":{"k":"a"}}`, map[string]string{"k": "b"}, false},
		{`{"StringNotEquals":{"k":"a"}}`, nil, true},
		{`{"StringNotEquals":{"k":"a"}}`, map[string]string{"k": "a"}, false},
		{`{"StringLike":{"k":"chains/*"}}`, map[string]string{"k": "chains/x/y"}, true},
		{`{"StringNotLike":{"k":"chains/*"}}`, map[string]string{"k": "chains/x"}, false},
		{`{"StringEquals":{"k":"a","j":"b"}}`, map[string]string{"k": "a"}, false},
		{`{"StringEquals":{"k":"a"},"StringLike":{"j":"b*"}}`, map[string]string{"k": "a", "j": "bc"}, true},
		{`{"Bool":{"aws:SecureTransport":"true"}}`, map[string]string{"aws:SecureTransport": "true"}, true},
	}
	for _, c := range cases {
		d, err := Evaluate(one(c.cond), req(c.ctx))
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed != c.want {
			t.Errorf("%s with %v: allowed %v, want %v", c.cond, c.ctx, d.Allowed, c.want)
		}
	}
	if _, err := Evaluate(one(`{"NumericLessThan":{"k":"1"}}`), req(map[string]string{"k": "0"})); err == nil || !strings.Contains(err.Error(), "NumericLessThan") {
		t.Errorf("an unknown operator: %v, want an error naming it", err)
	}
}

func TestEvaluateNot(t *testing.T) {
	stmts := evalStatements(t, `[
  {"Effect":"Allow","NotAction":"s3:DeleteObject","Resource":"arn:aws:s3:::bkt/*"},
  {"Effect":"Allow","Action":"sqs:SendMessage","NotResource":"arn:aws:sqs:us-east-1:1:secret"}
]`)
	for _, c := range []struct {
		req  Request
		want bool
	}{
		{Request{Action: "s3:PutObject", Resource: "arn:aws:s3:::bkt/k"}, true},
		{Request{Action: "s3:DeleteObject", Resource: "arn:aws:s3:::bkt/k"}, false},
		{Request{Action: "sqs:SendMessage", Resource: "arn:aws:sqs:us-east-1:1:open"}, true},
		{Request{Action: "sqs:SendMessage", Resource: "arn:aws:sqs:us-east-1:1:secret"}, false},
	} {
		d, err := Evaluate(stmts, c.req)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed != c.want {
			t.Errorf("%v: allowed %v, want %v", c.req, d.Allowed, c.want)
		}
	}
}

func TestMatch(t *testing.T) {
	for _, c := range []struct {
		p, s string
		want bool
	}{
		{"*", "", true}, {"a*", "a", true}, {"a*b", "axxb", true}, {"a*b", "axxbc", false},
		{"a*b*c", "abbbc", true}, {"a?c", "abc", true}, {"a?c", "ac", false},
		{"arn:aws:s3:::b/chains/*", "arn:aws:s3:::b/chains/", true}, {"arn:aws:s3:::b/chains/*", "arn:aws:s3:::b/chainsx", false},
		{"*x", "aaaax", true}, {"*x*", "ab", false},
	} {
		if got := Match(c.p, c.s); got != c.want {
			t.Errorf("Match(%q, %q) = %v, want %v", c.p, c.s, got, c.want)
		}
	}
}
