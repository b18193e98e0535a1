package stack

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"

	"github.com/starlog/starlog/infra/config"
	"github.com/starlog/starlog/infra/iamcheck"
)

// sharedRoot holds the binaries and assembly of the shared default synth;
// a test's TempDir would vanish when that test ends.
var sharedRoot string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "starlog-infra-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	sharedRoot = dir
	code := m.Run()
	// Stop the node child process jsii started.
	jsii.Close()
	os.RemoveAll(dir)
	os.Exit(code)
}

// synthesized is one synthesized stack with its template in both forms.
type synthesized struct {
	s      *Starlog
	tmpl   assertions.Template
	json   map[string]any
	outdir string
}

// cdkJSONContext is the context block of the repository's cdk.json, so the
// tests run with the same feature flags and defaults as `make synth`.
func cdkJSONContext(t *testing.T) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "cdk.json"))
	if err != nil {
		t.Fatalf("read cdk.json: %v", err)
	}
	var doc struct {
		Context map[string]any `json:"context"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("parse cdk.json: %v", err)
	}
	return doc.Context
}

// fakeBinaries writes a star binary and one bootstrap per job under dir (not
// real executables: the stack only packages them).
func fakeBinaries(t *testing.T, dir string) {
	t.Helper()
	write := func(rel, body string) {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write("build/star-linux-arm64/star", "\x7fELF fake star for infra tests")
	for _, job := range config.Jobs {
		write(filepath.Join("build/lambda", job, "bootstrap"), "\x7fELF fake "+job+" for infra tests")
	}
}

// newApp makes an app whose context is cdk.json's plus overrides (a nil
// value deletes a key), with fake binaries under a temp root.
func newApp(t *testing.T, root string, overrides map[string]any) (awscdk.App, string) {
	t.Helper()
	if root == "" {
		root = t.TempDir()
	}
	fakeBinaries(t, root)
	ctx := cdkJSONContext(t)
	for k, v := range overrides {
		if v == nil {
			delete(ctx, k)
		} else {
			ctx[k] = v
		}
	}
	outdir := filepath.Join(root, "cdk.out")
	app := awscdk.NewApp(&awscdk.AppProps{Context: &ctx, Outdir: jsii.String(outdir)})
	return app, root
}

func synth(t *testing.T, overrides map[string]any, extra func(*Starlog)) *synthesized {
	t.Helper()
	return synthIn(t, "", overrides, extra)
}

func synthIn(t *testing.T, root string, overrides map[string]any, extra func(*Starlog)) *synthesized {
	t.Helper()
	app, root := newApp(t, root, overrides)
	s, err := Build(app, BuildOptions{Root: root})
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	if extra != nil {
		extra(s)
	}
	var out synthesized
	if err := catch(func() {
		out.tmpl = assertions.Template_FromStack(s.Stack, nil)
		out.json = *out.tmpl.ToJSON()
		app.Synth(nil)
	}); err != nil {
		t.Fatalf("synth: %v", err)
	}
	out.s = s
	out.outdir = filepath.Join(root, "cdk.out")
	return &out
}

var (
	defaultOnce  sync.Once
	defaultSynth *synthesized
)

// defaults is the stack as cdk.json configures it, synthesized once for
// every test that only reads it.
func defaults(t *testing.T) *synthesized {
	t.Helper()
	defaultOnce.Do(func() {
		// A failure here fails the first test that asks (with the cause);
		// every later one reports that the shared synth is missing.
		defaultSynth = synthIn(t, sharedRoot, nil, nil)
	})
	if defaultSynth == nil {
		t.Fatal("the default synth failed (see the first test that ran)")
	}
	return defaultSynth
}

// catch runs f and turns a panic (how jsii reports a failed assertion or a
// synthesis error) into an error.
func catch(f func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	f()
	return nil
}

// check runs an assertion and reports its failure as a test error.
func check(t *testing.T, what string, f func()) {
	t.Helper()
	if err := catch(f); err != nil {
		t.Errorf("%s: %v", what, firstLines(err.Error(), 40))
	}
}

func firstLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = append(lines[:n], fmt.Sprintf("… (%d more lines)", len(lines)-n))
	}
	return strings.Join(lines, "\n")
}

// resources returns the template's resources of one type, by logical ID.
func (x *synthesized) resources(typ string) map[string]map[string]any {
	out := map[string]map[string]any{}
	res, _ := x.json["Resources"].(map[string]any)
	for id, r := range res {
		m, _ := r.(map[string]any)
		if m["Type"] == typ {
			out[id] = m
		}
	}
	return out
}

func props(r map[string]any) map[string]any {
	p, _ := r["Properties"].(map[string]any)
	return p
}

// statements is every IAM statement of the template.
func (x *synthesized) statements(t *testing.T) []iamcheck.Statement {
	t.Helper()
	st, err := iamcheck.Statements(x.json)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func m(kv ...any) *map[string]any {
	out := map[string]any{}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i].(string)] = kv[i+1]
	}
	return &out
}

func arr(xs ...any) *[]any { return &xs }

func like(kv ...any) assertions.Matcher { return assertions.Match_ObjectLike(m(kv...)) }

func re(pattern string) assertions.Matcher {
	regexp.MustCompile(pattern)
	return assertions.Match_StringLikeRegexp(jsii.String(pattern))
}
