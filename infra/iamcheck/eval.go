package iamcheck

import (
	"fmt"
	"slices"
	"strings"
)

// Identity-policy evaluation, enough to answer "may this role do that":
// an explicit Deny wins, else any matching Allow allows, else it is denied.
// Actions match case-insensitively and resources case-sensitively, both
// with IAM's wildcards (* any run of characters, ? one); NotAction and
// NotResource invert their match. Conditions are the String*, Arn* and
// Bool operators (with IfExists); any other operator is an error rather
// than a guess, so a new kind of condition in the stack must be taught
// here first. Resource policies, permission boundaries and SCPs are not
// modelled: the stack uses none on these roles.

// Request is one authorization question.
type Request struct {
	Action   string
	Resource string
	// Context holds the request's condition keys (e.g.
	// "s3express:SessionMode": "ReadWrite"); a key that is absent is not
	// in the request.
	Context map[string]string
}

func (r Request) String() string {
	s := r.Action + " on " + r.Resource
	for _, k := range sortedKeys(r.Context) {
		s += fmt.Sprintf(" [%s=%s]", k, r.Context[k])
	}
	return s
}

// Grant is one action × one resource of an Allow statement: the unit a
// coverage check marks used or unused.
type Grant struct {
	// Statement is the statement's index in the slice Grants and Evaluate
	// were given; Policy and Sid name it for people.
	Statement   int
	Policy, Sid string
	Action      string
	Resource    string
	Conditioned bool
}

func (g Grant) String() string {
	s := g.Action + " on " + g.Resource
	if g.Conditioned {
		s += " (conditioned)"
	}
	if g.Sid != "" {
		return s + " [" + g.Policy + " Sid " + g.Sid + "]"
	}
	return s + " [" + g.Policy + "]"
}

// Grants lists the grants of the Allow statements (NotAction and
// NotResource statements have no finite grants and are left out; Check
// flags them anyway).
func Grants(stmts []Statement) []Grant {
	var out []Grant
	for i, s := range stmts {
		if !s.Allow || s.NotAction || s.NotResource {
			continue
		}
		for _, a := range s.Actions {
			for _, r := range s.Resources {
				out = append(out, Grant{Statement: i, Policy: s.Policy, Sid: s.Sid, Action: a, Resource: r, Conditioned: len(s.Condition) > 0})
			}
		}
	}
	return out
}

// Decision is Evaluate's answer.
type Decision struct {
	Allowed bool
	// Grants are the Allow grants that match the request.
	Grants []Grant
	// DeniedBy are the indexes of the Deny statements that match.
	DeniedBy []int
}

// Evaluate answers req against stmts (the statements of one role).
func Evaluate(stmts []Statement, req Request) (Decision, error) {
	var d Decision
	for i, s := range stmts {
		acts := matching(s.Actions, req.Action, true)
		if s.NotAction == (len(acts) > 0) {
			continue
		}
		res := matching(s.Resources, req.Resource, false)
		if s.NotResource == (len(res) > 0) {
			continue
		}
		ok, err := conditionsHold(s.Condition, req.Context)
		if err != nil {
			return Decision{}, fmt.Errorf("%s (Sid %s): %w", s.Policy, s.Sid, err)
		}
		if !ok {
			continue
		}
		if !s.Allow {
			d.DeniedBy = append(d.DeniedBy, i)
			continue
		}
		if s.NotAction || s.NotResource {
			d.Grants = append(d.Grants, Grant{Statement: i, Policy: s.Policy, Sid: s.Sid, Action: req.Action, Resource: req.Resource})
			continue
		}
		for _, a := range acts {
			for _, r := range res {
				d.Grants = append(d.Grants, Grant{Statement: i, Policy: s.Policy, Sid: s.Sid, Action: a, Resource: r, Conditioned: len(s.Condition) > 0})
			}
		}
	}
	d.Allowed = len(d.Grants) > 0 && len(d.DeniedBy) == 0
	return d, nil
}

// matching returns the patterns that match s.
func matching(patterns []string, s string, fold bool) []string {
	var out []string
	for _, p := range patterns {
		if fold {
			if Match(strings.ToLower(p), strings.ToLower(s)) {
				out = append(out, p)
			}
		} else if Match(p, s) {
			out = append(out, p)
		}
	}
	return out
}

// Match reports whether s matches the IAM pattern p (* any run of
// characters, ? exactly one; nothing else is special).
func Match(p, s string) bool {
	// Iterative glob with one backtrack point: linear in practice.
	pi, si, star, mark := 0, 0, -1, 0
	for si < len(s) {
		switch {
		case pi < len(p) && (p[pi] == '?' || p[pi] == s[si]):
			pi++
			si++
		case pi < len(p) && p[pi] == '*':
			star, mark = pi, si
			pi++
		case star >= 0:
			pi, mark = star+1, mark+1
			si = mark
		default:
			return false
		}
	}
	for pi < len(p) && p[pi] == '*' {
		pi++
	}
	return pi == len(p)
}

// conditionsHold evaluates a Condition block: every operator, every key
// under it, must hold; a key holds when any of its values matches.
func conditionsHold(cond map[string]any, ctx map[string]string) (bool, error) {
	for _, op := range sortedKeys(cond) {
		keys, ok := cond[op].(map[string]any)
		if !ok {
			return false, fmt.Errorf("condition %s is %T, not an object", op, cond[op])
		}
		base, ifExists := strings.CutSuffix(op, "IfExists")
		match, negated, err := operator(base)
		if err != nil {
			return false, err
		}
		for _, key := range sortedKeys(keys) {
			vals, err := condValues(keys[key])
			if err != nil {
				return false, fmt.Errorf("condition %s %s: %w", op, key, err)
			}
			got, present := lookupFold(ctx, key)
			if !present {
				// A missing key matches nothing: a negated operator
				// holds, and IfExists holds either way.
				if !ifExists && !negated {
					return false, nil
				}
				continue
			}
			if slices.ContainsFunc(vals, func(v string) bool { return match(v, got) }) == negated {
				return false, nil
			}
		}
	}
	return true, nil
}

// operator returns a condition operator's value test and whether it is
// negated.
func operator(op string) (func(want, got string) bool, bool, error) {
	eq := func(want, got string) bool { return want == got }
	fold := func(want, got string) bool { return strings.EqualFold(want, got) }
	switch op {
	case "StringEquals", "ArnEquals":
		return eq, false, nil
	case "StringNotEquals", "ArnNotEquals":
		return eq, true, nil
	case "StringEqualsIgnoreCase":
		return fold, false, nil
	case "StringNotEqualsIgnoreCase":
		return fold, true, nil
	case "StringLike", "ArnLike":
		return Match, false, nil
	case "StringNotLike", "ArnNotLike":
		return Match, true, nil
	case "Bool":
		return fold, false, nil
	}
	return nil, false, fmt.Errorf("condition operator %q is not evaluated (add it to iamcheck)", op)
}

func condValues(v any) ([]string, error) {
	switch x := v.(type) {
	case string:
		return []string{x}, nil
	case bool:
		return []string{fmt.Sprint(x)}, nil
	case []any:
		out := make([]string, 0, len(x))
		for _, e := range x {
			s, ok := e.(string)
			if !ok {
				return nil, fmt.Errorf("value %v is %T, not a string", e, e)
			}
			out = append(out, s)
		}
		return out, nil
	}
	return nil, fmt.Errorf("value %v is %T, not a string", v, v)
}

// lookupFold finds a condition key case-insensitively, as IAM does.
func lookupFold(ctx map[string]string, key string) (string, bool) {
	for k, v := range ctx {
		if strings.EqualFold(k, key) {
			return v, true
		}
	}
	return "", false
}
