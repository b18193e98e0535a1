package functions_test

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/starlog/starlog/functions/internal/rehearse"
	"github.com/starlog/starlog/infra/iamcheck"
	"github.com/starlog/starlog/shared/awsrecord"
)

// IAM coverage (issue 12): every AWS call the star and each function made
// in the rehearsal (recorded by shared/awsrecord through their real SDK
// clients) must be allowed by the synthesized policy of that component's
// role; the grants nothing used are listed, and those unused by a wide
// margin (the component never performed the action, or never touched the
// resource: rehearse.Check) fail unless unusedAllowed gives the reason.

const starComponent = "star"

func (r *rehearsal) opsFile(component string) string {
	return filepath.Join(r.opsDir, component+".jsonl")
}

// unusedAllowed are the grants the rehearsal does not exercise, each with
// why the component needs it anyway. An entry that no longer matches an
// unused grant fails the check.
var unusedAllowed = []rehearse.Allow{
	{Component: starComponent, Action: "s3:GetObject", Resource: "arn:aws:s3:::cdk-*-assets-*",
		Reason: "the user data downloads the star binary with the AWS CLI before the star runs"},
	// Issue 12 item 3: without ListBucket S3 answers a GET or HEAD of a
	// missing key 403, and these read a missing key as absent.
	{Component: starComponent, Action: "s3:ListBucket", Resource: "arn:aws:s3:::*",
		Reason: "the reader's stale-row retry and the chain probe at open read missing keys; the rehearsal's star reads none on Standard"},
	{Component: "settle", Action: "s3:ListBucket", Resource: "arn:aws:s3:::*",
		Reason: "the adoption read of a settled object reads a missing key; the rehearsal's settle publishes without one"},
	{Component: "janitor", Action: "s3:DeleteObject", Resource: "arn:aws:s3:::*/streams/*",
		Reason: "it reclaims deleted streams' settled objects and superseded or trimmed ones after the read grace; the rehearsal deletes and trims no stream"},
	{Component: "janitor", Action: "s3:ListBucket", Resource: "arn:aws:s3:::*",
		Reason: "it lists a deleted stream's settled objects to delete them; the rehearsal deletes no stream"},
	{Component: "plan", Action: "sqs:SendMessage", Resource: "arn:aws:sqs:*:*:*-trim",
		Reason: "plan queues trim jobs when a chain's slots are retirable; the rehearsal's plan finds none (the test sends one)"},
	{Component: "plan", Action: "sqs:SendMessage", Resource: "arn:aws:sqs:*:*:*-chain-settle",
		Reason: "plan queues chain-settle for halted epochs it finds; in the rehearsal the janitor queued them first"},
	{Component: "settle", Action: "s3:GetObject", Resource: "arn:aws:s3:::*/chains/*",
		Reason: "settle reads a Standard era's bundles there; the rehearsal settles an Express era"},
	// The rehearsal's trim finds no retired slot (one settled era, and the
	// chain's cursors short of it): it queries and stops. What it does on
	// a retirable chain (delete slots, poison the garbage window) is not
	// exercised here.
	{Component: "trim", Action: "s3:GetObject", Resource: "arn:aws:s3:::*/chains/*", Reason: "trim reads envelopes of the garbage window it reaps"},
	{Component: "trim", Action: "s3:PutObject", Resource: "arn:aws:s3:::*/chains/*", Reason: "trim poisons the garbage window it reaps"},
	{Component: "trim", Action: "s3:DeleteObject", Resource: "arn:aws:s3:::*/chains/*", Reason: "trim deletes retired slots: the one deleter of slots"},
	{Component: "trim", Action: "s3:ListBucket", Resource: "arn:aws:s3:::*", Reason: "trim's probes rely on a missing key reading 404"},
	{Component: "trim", Action: "s3express:CreateSession", Resource: "arn:aws:s3express:*", Reason: "trim deletes and poisons Express slots"},
}

// sqsConsume are what an event source mapping polls its queue with, under
// the function's role: the Lambda service calls them, not the function.
var sqsConsume = []string{"sqs:changemessagevisibility", "sqs:deletemessage", "sqs:getqueueattributes", "sqs:getqueueurl", "sqs:receivemessage"}

func (r *rehearsal) components() map[string]string {
	t := r.t
	roles := map[string]string{}
	star, err := r.tm.StarRole()
	if err != nil {
		t.Fatal(err)
	}
	roles[starComponent] = star
	for _, f := range auditorFunctions(t, r.tm) {
		role, err := r.tm.FunctionRole(f)
		if err != nil {
			t.Fatal(err)
		}
		roles[jobOf(t, r.tm, f)] = role
	}
	return roles
}

// allowlist is unusedAllowed plus the queue-consumption grants of every
// function an event source mapping feeds.
func (r *rehearsal) allowlist() []rehearse.Allow {
	out := slices.Clone(unusedAllowed)
	for fn, m := range r.mappings() {
		arn := m.queue.ARN
		if i := strings.LastIndexByte(arn, ':'); i >= 0 {
			arn = "arn:aws:sqs:*:*:" + arn[i+1:]
		}
		for _, a := range sqsConsume {
			out = append(out, rehearse.Allow{Component: strings.TrimPrefix(fn, r.tm.Pseudo.StackName+"-"), Action: a, Resource: arn,
				Reason: "the event source mapping polls and deletes with the function's role"})
		}
	}
	return out
}

func (r *rehearsal) iamCoverage(t *testing.T) {
	stmts, err := r.tm.RoleStatements()
	if err != nil {
		t.Fatal(err)
	}
	recs := map[string][]awsrecord.Record{}
	for c := range r.components() {
		if recs[c], err = awsrecord.ReadFile(r.opsFile(c)); err != nil {
			t.Fatal(err)
		}
		if len(recs[c]) == 0 {
			t.Fatalf("%s recorded no AWS call (is STARLOG_RECORD_OPS reaching it?)", c)
		}
	}
	failures := r.coverage(t, stmts, recs, true)
	for _, f := range failures {
		t.Error(f)
	}

	// The check itself: the stack without a grant the code needs fails,
	// naming the call and the role (chain-settle's probe of a missing key
	// reads 404 only with ListBucket: item 3); without an allowlisted one
	// the allowlist entry goes stale and fails.
	for _, m := range []struct {
		component, sid, action, want string
	}{
		{starComponent, "ChainObjects", "s3:putobject", "denied: S3 PutObject"},
		{"chain-settle", "ListBucket", "s3:listbucket", "denied: S3 GetObject"},
		{"settle", "ExpressSessionReadOnly", "s3express:createsession", "denied: S3 CreateSession"},
		{"trim", "ChainObjects", "s3:deleteobject", "allowlist entry s3:DeleteObject"},
		{starComponent, "StarSecrets", "secretsmanager:getsecretvalue", "denied: Secrets Manager GetSecretValue"},
	} {
		role := r.components()[m.component]
		var cut []iamcheck.Statement
		removed := false
		for _, s := range stmts {
			if slices.Contains(s.Roles, role) && s.Sid == m.sid && slices.Contains(s.Actions, m.action) {
				s.Actions = slices.DeleteFunc(slices.Clone(s.Actions), func(a string) bool { return a == m.action })
				removed = true
			}
			cut = append(cut, s)
		}
		if !removed {
			t.Errorf("mutation: %s has no %s in Sid %s", m.component, m.action, m.sid)
			continue
		}
		got := r.coverage(t, cut, recs, false)
		want := fmt.Sprintf("%s (role %s): %s", m.component, role, m.want)
		if !slices.ContainsFunc(got, func(f string) bool { return strings.HasPrefix(f, want) }) {
			t.Errorf("without %s for %s the check found %q, want a failure starting %q", m.action, m.component, got, want)
		} else {
			t.Logf("mutation: without %s for %s: %s", m.action, m.component, got[slices.IndexFunc(got, func(f string) bool { return strings.HasPrefix(f, want) })])
		}
	}
}

// coverage checks every component and returns the failures; report logs
// the figures and the unused grants.
func (r *rehearsal) coverage(t *testing.T, stmts []iamcheck.Statement, recs map[string][]awsrecord.Record, report bool) []string {
	t.Helper()
	var failures []string
	roles := r.components()
	allow := r.allowlist()
	for _, c := range slices.Sorted(func(yield func(string) bool) {
		for c := range roles {
			if !yield(c) {
				return
			}
		}
	}) {
		cov, err := rehearse.Check(c, roles[c], iamcheck.ForRole(stmts, roles[c]), recs[c], r.tm.Pseudo, allow)
		if err != nil {
			t.Fatalf("%s: %v", c, err)
		}
		failures = append(failures, cov.Failed()...)
		if !report {
			continue
		}
		t.Logf("iam %s (role %s): %d calls, %d distinct operations %v, %d distinct IAM requests, %d denied; %d data grants used, %d unused",
			c, cov.Role, cov.Calls, len(cov.Ops), cov.Ops, cov.Requests, len(cov.Denied), len(cov.Used), len(cov.Unused))
		for _, u := range cov.Unused {
			why := "narrow: reported only"
			switch {
			case u.Allowed != "":
				why = "allowlisted: " + u.Allowed
			case u.Wide:
				why = "WIDE"
			}
			t.Logf("iam %s unused: %s (%s)", c, u.Grant, why)
		}
	}
	return failures
}
