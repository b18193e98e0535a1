package docscheck

import (
	"bufio"
	"fmt"
	"go/constant"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// annotation is the comment that names a number's source:
// <!-- go PKG.Name -->, <!-- go PKG.Func().Field -->, <!-- make NAME -->.
var annotation = regexp.MustCompile(`<!--\s*(go|make)\s+(\S+)\s*-->`)

// number is the value right before an annotation: digits (commas group
// them, one decimal point allowed) and an optional unit, the whole
// optionally in backticks: "50 ms", "12,288", "`720h`".
var number = regexp.MustCompile("`?(\\d[\\d,]*(?:\\.\\d+)?) ?([A-Za-zµ]*)`?\\s*$")

// units scale a number to what the code holds: durations in nanoseconds,
// sizes in bytes. No unit: the number as it is.
var units = map[string]int64{
	"":   1,
	"ns": 1, "µs": 1e3, "us": 1e3, "ms": 1e6,
	"s": 1e9, "sec": 1e9, "second": 1e9, "seconds": 1e9,
	"min": 60e9, "minute": 60e9, "minutes": 60e9,
	"h": 3600e9, "hour": 3600e9, "hours": 3600e9,
	"day": 86400e9, "days": 86400e9,
	"B": 1, "bytes": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
}

// checkText returns one problem per annotation in text that names no
// value, follows no number, or disagrees with the value; n is how many
// annotations it checked. Annotations in code (a fenced block, an inline
// code span) are examples and are not checked.
func checkText(r *resolver, name, text string) (problems []string, n int) {
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	fenced := false
	for line := 1; sc.Scan(); line++ {
		s := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(s), "```") {
			fenced = !fenced
		}
		if fenced {
			continue
		}
		for _, m := range annotation.FindAllStringSubmatchIndex(s, -1) {
			if strings.Count(s[:m[0]], "`")%2 == 1 {
				continue // inside a code span: the convention shown, not used
			}
			n++
			kind, ref := s[m[2]:m[3]], s[m[4]:m[5]]
			where := fmt.Sprintf("%s:%d: %s %s", name, line, kind, ref)
			doc, shown, err := docValue(s[:m[0]])
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s: %v", where, err))
				continue
			}
			code, err := r.Value(kind, ref)
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s: %v", where, err))
				continue
			}
			if code.Kind() != constant.Int && code.Kind() != constant.Float {
				problems = append(problems, fmt.Sprintf("%s: the code's value %v is not a number", where, code))
				continue
			}
			if !constant.Compare(doc, token.EQL, code) {
				problems = append(problems, fmt.Sprintf("%s: the doc says %s (%v), the code %v", where, shown, doc, code))
			}
		}
	}
	return problems, n
}

// docValue reads the number (and unit) that ends before, scaled.
func docValue(before string) (constant.Value, string, error) {
	m := number.FindStringSubmatch(before)
	if m == nil {
		return nil, "", fmt.Errorf("no number right before the annotation")
	}
	scale, ok := units[m[2]]
	if !ok {
		return nil, "", fmt.Errorf("unknown unit %q after %s (put the annotation right after the number)", m[2], m[1])
	}
	lit := strings.ReplaceAll(m[1], ",", "")
	kind := token.INT
	if strings.Contains(lit, ".") {
		kind = token.FLOAT
	}
	v := constant.MakeFromLiteral(lit, kind, 0)
	v = constant.BinaryOp(v, token.MUL, constant.MakeInt64(scale))
	return constant.ToInt(v), strings.TrimSpace(m[0]), nil
}

// repoRoot is the directory of the product module's go.mod.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && strings.HasPrefix(string(b), "module "+module+"\n") {
			return dir
		}
		up := filepath.Dir(dir)
		if up == dir {
			t.Fatal("no go.mod of " + module + " above the test")
		}
		dir = up
	}
}

// TestDocNumbersMatchCode: every annotated number in docs/*.md and
// README.md equals the constant it names.
func TestDocNumbersMatchCode(t *testing.T) {
	root := repoRoot(t)
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, filepath.Join(root, "README.md"))
	r := newResolver(root)
	total := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, f)
		problems, n := checkText(r, rel, string(b))
		total += n
		for _, p := range problems {
			t.Error(p)
		}
	}
	// The annotations of docs/design.md §13 alone are more than this: a
	// pattern that stopped matching must not pass in silence.
	if total < 20 {
		t.Fatalf("only %d annotated numbers found", total)
	}
	t.Logf("%d annotated numbers checked", total)
}

// TestCheckerReportsDrift: the check itself finds a wrong number, a wrong
// unit, a missing number and a name that resolves to nothing, and takes
// every form it documents.
func TestCheckerReportsDrift(t *testing.T) {
	r := newResolver(repoRoot(t))
	cases := []struct {
		text string
		want string // a substring of the one problem; "" = no problem
	}{
		{"dead after 30 s<!-- go shared/leader.DefaultDeadAfter -->.", ""},
		{"dead after 31 s<!-- go shared/leader.DefaultDeadAfter -->.", "the doc says 31 s"},
		{"dead after 30 ms<!-- go shared/leader.DefaultDeadAfter -->.", "the doc says 30 ms"},
		{"dead after half a minute<!-- go shared/leader.DefaultDeadAfter -->.", "no number right before"},
		{"12,288 flights<!-- go star/loglet.DefaultBacklogFlights -->", "unknown unit"},
		{"12,288<!-- go star/loglet.DefaultBacklogFlights --> flights", ""},
		{"4 GiB<!-- go star/loglet.DefaultBacklogBytes -->", ""},
		{"50 ms<!-- go star/node.Defaults().Standard.FlushInterval -->", ""},
		{"`50ms`<!-- go star/node.Defaults().Standard.FlushInterval -->", ""},
		{"60 s<!-- go star/node.Defaults().Settle.Standard.Linger -->", ""},
		{"30 s<!-- go star/node.Defaults().DeadAfter -->", ""},
		{"0.25 s<!-- go star/reader.DefaultHedgeAfter -->", ""},
		{"7 days<!-- go shared/api.DefaultRetentionAgeSecs -->", "the doc says 7 days"}, // seconds, not a Duration
		{"604,800<!-- go shared/api.DefaultRetentionAgeSecs -->", ""},
		{"9,223,372,036<!-- go shared/api.MaxDurationSecs -->", ""}, // math.MaxInt64 / int64(time.Second)
		{"9,223,372,037<!-- go shared/api.MaxDurationSecs -->", "the doc says 9,223,372,037"},
		{"10<!-- make VERIFY_MINUTES -->", ""},
		{"3<!-- make NO_SUCH_VARIABLE -->", "no \"NO_SUCH_VARIABLE\""},
		{"3<!-- go star/node.NoSuchConstant -->", "no package-level constant"},
		{"3<!-- go star/node.Defaults().NoSuchField -->", "no field NoSuchField"},
		{"shown as `30 s<!-- go shared/leader.DefaultDeadAfter -->` and 31 s<!-- go shared/leader.DefaultDeadAfter -->", "the doc says 31 s"},
	}
	for _, c := range cases {
		problems, n := checkText(r, "case", c.text)
		if n != 1 {
			t.Errorf("%q: %d annotations found, want 1", c.text, n)
			continue
		}
		switch {
		case c.want == "" && len(problems) > 0:
			t.Errorf("%q: unexpected problem %q", c.text, problems[0])
		case c.want != "" && (len(problems) != 1 || !strings.Contains(problems[0], c.want)):
			t.Errorf("%q: problems %q, want one containing %q", c.text, problems, c.want)
		}
	}
}
