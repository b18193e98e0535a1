// Package iamcheck walks every IAM policy statement in a synthesized
// CloudFormation template and reports least-privilege violations on data
// services: wildcard actions, NotAction grants, and data actions on every
// resource. It reads plain template JSON, so it needs no CDK.
package iamcheck

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// DataServices are the IAM service prefixes whose actions read or change
// starlog's data (objects, metastore rows, job messages).
var DataServices = []string{"s3", "s3express", "dynamodb", "sqs", "secretsmanager"}

// Statement is one policy statement, flattened for checking.
type Statement struct {
	// Policy is the logical ID of the resource that holds the statement
	// (an AWS::IAM::Policy, ManagedPolicy or Role).
	Policy string
	// Roles are the logical IDs of the roles the statement applies to.
	Roles []string
	Sid   string
	Allow bool
	// Actions are lower-cased; NotAction is true when they came from
	// NotAction.
	Actions   []string
	NotAction bool
	// Resources are rendered to text by Render; NotResource is true when
	// they came from NotResource.
	Resources   []string
	NotResource bool
	Condition   map[string]any
}

// Finding is one violation.
type Finding struct {
	Policy string
	Sid    string
	Reason string
}

func (f Finding) String() string {
	if f.Sid != "" {
		return fmt.Sprintf("%s (Sid %s): %s", f.Policy, f.Sid, f.Reason)
	}
	return fmt.Sprintf("%s: %s", f.Policy, f.Reason)
}

// CheckTemplateJSON parses a template and checks it.
func CheckTemplateJSON(b []byte) ([]Finding, error) {
	var t map[string]any
	if err := json.Unmarshal(b, &t); err != nil {
		return nil, fmt.Errorf("parse template: %w", err)
	}
	stmts, err := Statements(t)
	if err != nil {
		return nil, err
	}
	return Check(stmts), nil
}

// Statements extracts every statement of every identity policy in the
// template: AWS::IAM::Policy, AWS::IAM::ManagedPolicy and the inline
// Policies of AWS::IAM::Role. Resource policies (bucket and queue policies)
// are not identity grants and are skipped.
func Statements(tmpl map[string]any) ([]Statement, error) {
	return StatementsRendered(tmpl, func(v any) (string, error) { return Render(v), nil })
}

// StatementsRendered is Statements with every action and resource
// rendered by render: to the ARNs a deploy would resolve, say, so Evaluate
// can match requests against them.
func StatementsRendered(tmpl map[string]any, render func(any) (string, error)) ([]Statement, error) {
	resources, _ := tmpl["Resources"].(map[string]any)
	var out []Statement
	for _, id := range sortedKeys(resources) {
		res, ok := resources[id].(map[string]any)
		if !ok {
			return nil, fmt.Errorf("resource %s: not an object", id)
		}
		props, _ := res["Properties"].(map[string]any)
		var docs []any
		var roles []string
		switch res["Type"] {
		case "AWS::IAM::Policy", "AWS::IAM::ManagedPolicy":
			docs = []any{props["PolicyDocument"]}
			roles = refs(props["Roles"])
		case "AWS::IAM::Role":
			pols, _ := props["Policies"].([]any)
			for _, p := range pols {
				pm, _ := p.(map[string]any)
				docs = append(docs, pm["PolicyDocument"])
			}
			roles = []string{id}
		default:
			continue
		}
		for _, doc := range docs {
			stmts, err := docStatements(id, roles, doc, render)
			if err != nil {
				return nil, err
			}
			out = append(out, stmts...)
		}
	}
	return out, nil
}

func docStatements(id string, roles []string, doc any, render func(any) (string, error)) ([]Statement, error) {
	dm, ok := doc.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s: policy document is %T, not an object", id, doc)
	}
	var raw []any
	switch s := dm["Statement"].(type) {
	case []any:
		raw = s
	case map[string]any:
		raw = []any{s}
	default:
		return nil, fmt.Errorf("%s: Statement is %T", id, dm["Statement"])
	}
	out := make([]Statement, 0, len(raw))
	for i, r := range raw {
		sm, ok := r.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s: statement %d is %T", id, i, r)
		}
		st := Statement{Policy: id, Roles: roles, Allow: sm["Effect"] == "Allow"}
		st.Sid, _ = sm["Sid"].(string)
		st.Condition, _ = sm["Condition"].(map[string]any)
		a, ok := sm["NotAction"]
		if !ok {
			a = sm["Action"]
		}
		st.NotAction = ok
		acts, err := list(a, render)
		if err != nil {
			return nil, fmt.Errorf("%s: statement %d: action: %w", id, i, err)
		}
		for _, x := range acts {
			st.Actions = append(st.Actions, strings.ToLower(x))
		}
		r, ok := sm["NotResource"]
		if !ok {
			r = sm["Resource"]
		}
		st.NotResource = ok
		if st.Resources, err = list(r, render); err != nil {
			return nil, fmt.Errorf("%s: statement %d: resource: %w", id, i, err)
		}
		out = append(out, st)
	}
	return out, nil
}

// okWildcard are the only shapes a data-action resource may use a `*` in:
// the objects under a prefix of a named bucket, and a named table's
// indexes. The base is a literal ARN or a reference to a resource of the
// template (${X.Arn}), never itself a wildcard.
var okWildcard = []*regexp.Regexp{
	regexp.MustCompile(`^(arn:` + partition + `:s3:::[^*/]+|\$\{[^}*]+\})/[^*]*\*$`),
	regexp.MustCompile(`^(arn:` + partition + `:dynamodb:[^:*]+:[^:*]+:table/[^*/]+|\$\{[^}*]+\})/index/\*$`),
}

// partition matches a literal partition or the AWS::Partition pseudo
// parameter as Render prints it.
const partition = `(aws[a-z-]*|\$\{AWS::Partition\})`

// Check applies the rules to every Allow statement.
func Check(stmts []Statement) []Finding {
	var out []Finding
	for _, s := range stmts {
		if !s.Allow {
			continue
		}
		add := func(format string, args ...any) {
			out = append(out, Finding{Policy: s.Policy, Sid: s.Sid, Reason: fmt.Sprintf(format, args...)})
		}
		if s.NotAction {
			add("Allow with NotAction %v grants everything else", s.Actions)
			continue
		}
		var data []string
		for _, a := range s.Actions {
			if a == "*" {
				add("action * grants every action")
				continue
			}
			svc, _, _ := strings.Cut(a, ":")
			if !slices.Contains(DataServices, svc) {
				continue
			}
			data = append(data, a)
			if strings.Contains(a, "*") {
				add("wildcard data action %q", a)
			}
		}
		if len(data) == 0 {
			continue
		}
		if s.NotResource {
			add("data actions %v with NotResource apply to every other resource", data)
			continue
		}
		if len(s.Resources) == 0 {
			add("data actions %v without a resource", data)
		}
		for _, r := range s.Resources {
			if r == "*" {
				add("data actions %v on every resource (*)", data)
				continue
			}
			if strings.Contains(r, "*") && !matchesAny(okWildcard, r) {
				add("data actions %v on wildcard resource %q", data, r)
			}
		}
	}
	return out
}

func matchesAny(res []*regexp.Regexp, s string) bool {
	for _, re := range res {
		if re.MatchString(s) {
			return true
		}
	}
	return false
}

func list(v any, render func(any) (string, error)) ([]string, error) {
	var items []any
	switch x := v.(type) {
	case nil:
		return nil, nil
	case []any:
		items = x
	default:
		items = []any{x}
	}
	out := make([]string, 0, len(items))
	for _, e := range items {
		s, err := render(e)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

func refs(v any) []string {
	l, _ := v.([]any)
	var out []string
	for _, e := range l {
		if m, ok := e.(map[string]any); ok {
			if r, ok := m["Ref"].(string); ok {
				out = append(out, r)
			}
		}
	}
	return out
}

// Render flattens a template value to text: Fn::Join is joined, Ref X
// becomes ${X}, Fn::GetAtt [X, A] becomes ${X.A}, and pseudo parameters
// stay as ${AWS::Name}. Other intrinsics render as their JSON. The result is
// meant for pattern checks, not for deployment.
func Render(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case map[string]any:
		if len(x) == 1 {
			for k, arg := range x {
				switch k {
				case "Ref":
					if s, ok := arg.(string); ok {
						return "${" + s + "}"
					}
				case "Fn::GetAtt":
					if l, ok := arg.([]any); ok && len(l) == 2 {
						return "${" + Render(l[0]) + "." + Render(l[1]) + "}"
					}
				case "Fn::Join":
					if l, ok := arg.([]any); ok && len(l) == 2 {
						sep, _ := l[0].(string)
						parts, _ := l[1].([]any)
						ss := make([]string, len(parts))
						for i, p := range parts {
							ss[i] = Render(p)
						}
						return strings.Join(ss, sep)
					}
				case "Fn::Sub":
					if s, ok := arg.(string); ok {
						return s
					}
				}
			}
		}
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// ForRole returns the statements that apply to the role with the given
// logical ID.
func ForRole(stmts []Statement, role string) []Statement {
	var out []Statement
	for _, s := range stmts {
		if slices.Contains(s.Roles, role) {
			out = append(out, s)
		}
	}
	return out
}

// Allowed reports whether any Allow statement among stmts grants action on
// a resource whose rendered text matches the pattern.
func Allowed(stmts []Statement, action string, resource *regexp.Regexp) bool {
	action = strings.ToLower(action)
	for _, s := range stmts {
		if !s.Allow || s.NotAction || !slices.Contains(s.Actions, action) {
			continue
		}
		for _, r := range s.Resources {
			if resource.MatchString(r) {
				return true
			}
		}
	}
	return false
}

// Actions returns the sorted set of actions granted by Allow statements.
func Actions(stmts []Statement) []string {
	set := map[string]bool{}
	for _, s := range stmts {
		if s.Allow && !s.NotAction {
			for _, a := range s.Actions {
				set[a] = true
			}
		}
	}
	return sortedKeys(set)
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
