package dashboards

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The dashboards' queries use a small part of PromQL: instant and range
// selectors with label matchers, rate, histogram_quantile, sum and max
// (with or without "by"), and a vector times a number. This file parses
// and evaluates exactly that part over a Store; anything else is an error,
// so a board that grows a query this cannot evaluate fails the tool rather
// than drawing an empty panel. (Prometheus's own engine, as a library,
// would bring its service discovery's cloud SDKs into this module.)
//
// Its rate extrapolates as Prometheus's does. One difference: an instant
// selector takes a series' latest sample at or before the evaluation time
// within five minutes, without staleness markers (a series that stops
// being exported keeps its last value for five minutes).

// Expr is a parsed query.
type Expr interface{ String() string }

type matcher struct {
	label, op, value string
	re               *regexp.Regexp
}

func (m matcher) matches(v string) bool {
	switch m.op {
	case "=":
		return v == m.value
	case "!=":
		return v != m.value
	case "=~":
		return m.re.MatchString(v)
	default: // "!~"
		return !m.re.MatchString(v)
	}
}

type selector struct {
	name     string
	matchers []matcher
	window   time.Duration // 0: an instant selector
}

func (s *selector) String() string { return fmt.Sprintf("%s%v[%s]", s.name, s.matchers, s.window) }

type call struct {
	fn   string // rate or histogram_quantile
	q    float64
	arg  Expr
	text string
}

func (c *call) String() string { return c.text }

type aggregate struct {
	op  string // sum or max
	by  []string
	arg Expr
}

func (a *aggregate) String() string { return fmt.Sprintf("%s by %v (%v)", a.op, a.by, a.arg) }

type scaled struct {
	arg Expr
	k   float64
}

func (s *scaled) String() string { return fmt.Sprintf("(%v) * %g", s.arg, s.k) }

// Parse parses q, with Grafana's $__rate_interval and $instance already
// substituted.
func Parse(q string) (Expr, error) {
	p := &parser{toks: tokenize(q), src: q}
	e, err := p.expr()
	if err != nil {
		return nil, fmt.Errorf("query %q: %w", q, err)
	}
	if p.i != len(p.toks) {
		return nil, fmt.Errorf("query %q: unexpected %q", q, p.toks[p.i])
	}
	return e, nil
}

// tokenize splits q into identifiers, numbers, quoted strings and
// punctuation (two-character operators kept whole).
func tokenize(q string) []string {
	var toks []string
	for i := 0; i < len(q); {
		c := q[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n':
			i++
		case c == '"':
			j := i + 1
			for j < len(q) && q[j] != '"' {
				if q[j] == '\\' {
					j++
				}
				j++
			}
			toks = append(toks, q[i:min(j+1, len(q))])
			i = j + 1
		case isIdent(c) || c >= '0' && c <= '9' || c == '.':
			j := i
			for j < len(q) && (isIdent(q[j]) || q[j] >= '0' && q[j] <= '9' || q[j] == '.') {
				j++
			}
			toks = append(toks, q[i:j])
			i = j
		case i+1 < len(q) && (q[i:i+2] == "!=" || q[i:i+2] == "=~" || q[i:i+2] == "!~"):
			toks = append(toks, q[i:i+2])
			i += 2
		default:
			toks = append(toks, string(c))
			i++
		}
	}
	return toks
}

func isIdent(c byte) bool {
	return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

type parser struct {
	toks []string
	i    int
	src  string
}

func (p *parser) peek() string {
	if p.i < len(p.toks) {
		return p.toks[p.i]
	}
	return ""
}

func (p *parser) next() string { t := p.peek(); p.i++; return t }

func (p *parser) expect(t string) error {
	if got := p.next(); got != t {
		return fmt.Errorf("expected %q, got %q", t, got)
	}
	return nil
}

func (p *parser) expr() (Expr, error) {
	e, err := p.unary()
	if err != nil {
		return nil, err
	}
	if p.peek() == "*" {
		p.next()
		k, err := strconv.ParseFloat(p.next(), 64)
		if err != nil {
			return nil, fmt.Errorf("only a vector times a number is supported: %w", err)
		}
		return &scaled{arg: e, k: k}, nil
	}
	return e, nil
}

func (p *parser) unary() (Expr, error) {
	start := p.i
	name := p.next()
	switch name {
	case "sum", "max":
		a := &aggregate{op: name}
		if p.peek() == "by" {
			p.next()
			labels, err := p.labelList()
			if err != nil {
				return nil, err
			}
			a.by = labels
		}
		if err := p.expect("("); err != nil {
			return nil, err
		}
		arg, err := p.expr()
		if err != nil {
			return nil, err
		}
		a.arg = arg
		return a, p.expect(")")
	case "rate":
		if err := p.expect("("); err != nil {
			return nil, err
		}
		arg, err := p.expr()
		if err != nil {
			return nil, err
		}
		if s, ok := arg.(*selector); !ok || s.window == 0 {
			return nil, fmt.Errorf("rate takes a range selector")
		}
		if err := p.expect(")"); err != nil {
			return nil, err
		}
		return &call{fn: name, arg: arg, text: strings.Join(p.toks[start:p.i], "")}, nil
	case "histogram_quantile":
		if err := p.expect("("); err != nil {
			return nil, err
		}
		q, err := strconv.ParseFloat(p.next(), 64)
		if err != nil {
			return nil, fmt.Errorf("histogram_quantile: %w", err)
		}
		if err := p.expect(","); err != nil {
			return nil, err
		}
		arg, err := p.expr()
		if err != nil {
			return nil, err
		}
		if err := p.expect(")"); err != nil {
			return nil, err
		}
		return &call{fn: name, q: q, arg: arg, text: strings.Join(p.toks[start:p.i], "")}, nil
	}
	if name == "" || !isIdent(name[0]) || p.peek() == "(" {
		return nil, fmt.Errorf("unsupported %q (this evaluator knows rate, histogram_quantile, sum and max)", name)
	}
	s := &selector{name: name}
	if p.peek() == "{" {
		p.next()
		for p.peek() != "}" {
			m := matcher{label: p.next(), op: p.next()}
			v := p.next()
			uq, err := strconv.Unquote(v)
			if err != nil {
				return nil, fmt.Errorf("label value %s: %w", v, err)
			}
			m.value = uq
			switch m.op {
			case "=", "!=":
			case "=~", "!~":
				if m.re, err = regexp.Compile("^(?:" + uq + ")$"); err != nil {
					return nil, err
				}
			default:
				return nil, fmt.Errorf("matcher operator %q", m.op)
			}
			s.matchers = append(s.matchers, m)
			if p.peek() == "," {
				p.next()
			}
			if p.i >= len(p.toks) {
				return nil, fmt.Errorf("unclosed {")
			}
		}
		p.next()
	}
	if p.peek() == "[" {
		p.next()
		d, err := time.ParseDuration(p.next())
		if err != nil {
			return nil, err
		}
		s.window = d
		if err := p.expect("]"); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func (p *parser) labelList() ([]string, error) {
	if err := p.expect("("); err != nil {
		return nil, err
	}
	var ls []string
	for p.peek() != ")" {
		t := p.next()
		if t == "" || !isIdent(t[0]) {
			return nil, fmt.Errorf("label list: %q", t)
		}
		ls = append(ls, t)
		if p.peek() == "," {
			p.next()
		}
	}
	p.next()
	return ls, nil
}

// Sample is one series' value in an instant vector.
type Sample struct {
	Labels map[string]string
	V      float64
}

// lookback is how far back an instant selector finds a series' sample.
const lookback = 5 * time.Minute

// Eval evaluates e at t over st.
func Eval(e Expr, st *Store, t time.Time) ([]Sample, error) {
	switch e := e.(type) {
	case *selector:
		if e.window != 0 {
			return nil, fmt.Errorf("a range selector outside rate: %s", e.name)
		}
		var out []Sample
		for _, s := range st.match(e) {
			if v, ok := s.at(t, lookback); ok {
				out = append(out, Sample{Labels: s.Labels, V: v})
			}
		}
		return out, nil
	case *call:
		if e.fn == "rate" {
			sel := e.arg.(*selector)
			var out []Sample
			for _, s := range st.match(sel) {
				if v, ok := s.rate(t, sel.window); ok {
					out = append(out, Sample{Labels: without(s.Labels, "__name__"), V: v})
				}
			}
			return out, nil
		}
		in, err := Eval(e.arg, st, t)
		if err != nil {
			return nil, err
		}
		return histogramQuantile(e.q, in), nil
	case *aggregate:
		in, err := Eval(e.arg, st, t)
		if err != nil {
			return nil, err
		}
		groups := map[string]*Sample{}
		var order []string
		for _, s := range in {
			ls := map[string]string{}
			for _, l := range e.by {
				if v, ok := s.Labels[l]; ok {
					ls[l] = v
				}
			}
			k := key(ls)
			g, ok := groups[k]
			if !ok {
				groups[k] = &Sample{Labels: ls, V: s.V}
				order = append(order, k)
				continue
			}
			if e.op == "sum" {
				g.V += s.V
			} else if s.V > g.V || math.IsNaN(g.V) {
				g.V = s.V
			}
		}
		out := make([]Sample, 0, len(order))
		for _, k := range order {
			out = append(out, *groups[k])
		}
		return out, nil
	case *scaled:
		in, err := Eval(e.arg, st, t)
		if err != nil {
			return nil, err
		}
		for i := range in {
			in[i].V *= e.k
		}
		return in, nil
	}
	return nil, fmt.Errorf("cannot evaluate %T", e)
}

// histogramQuantile is PromQL's histogram_quantile over classic buckets:
// the buckets of each label set (le aside) sorted by bound, the quantile
// interpolated linearly inside the bucket that holds its rank; NaN for a
// set with no observations or no +Inf bucket, and the largest finite
// bound when the rank falls in the +Inf bucket.
func histogramQuantile(q float64, in []Sample) []Sample {
	type bucket struct{ le, n float64 }
	sets := map[string][]bucket{}
	labels := map[string]map[string]string{}
	var order []string
	for _, s := range in {
		le, err := strconv.ParseFloat(s.Labels["le"], 64)
		if err != nil {
			continue
		}
		ls := without(s.Labels, "le")
		k := key(ls)
		if _, ok := sets[k]; !ok {
			order = append(order, k)
			labels[k] = ls
		}
		sets[k] = append(sets[k], bucket{le, s.V})
	}
	var out []Sample
	for _, k := range order {
		bs := sets[k]
		sort.Slice(bs, func(i, j int) bool { return bs[i].le < bs[j].le })
		v := math.NaN()
		if n := len(bs); n >= 2 && math.IsInf(bs[n-1].le, 1) && bs[n-1].n > 0 {
			rank := q * bs[n-1].n
			i := sort.Search(n, func(i int) bool { return bs[i].n >= rank })
			switch {
			case i == n-1:
				v = bs[n-2].le
			default:
				lo, below := 0.0, 0.0
				if i > 0 {
					lo, below = bs[i-1].le, bs[i-1].n
				} else if bs[0].le <= 0 {
					lo = bs[0].le
				}
				if in := bs[i].n - below; in > 0 {
					v = lo + (bs[i].le-lo)*(rank-below)/in
				} else {
					v = bs[i].le
				}
			}
		}
		out = append(out, Sample{Labels: labels[k], V: v})
	}
	return out
}

func without(ls map[string]string, drop string) map[string]string {
	out := make(map[string]string, len(ls))
	for k, v := range ls {
		if k != drop {
			out[k] = v
		}
	}
	return out
}

// key is a label set's canonical string.
func key(ls map[string]string) string {
	ks := make([]string, 0, len(ls))
	for k := range ls {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	var b strings.Builder
	for _, k := range ks {
		fmt.Fprintf(&b, "%s=%q,", k, ls[k])
	}
	return b.String()
}
