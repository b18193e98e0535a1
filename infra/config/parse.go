package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// parser reads typed values through a Lookup and keeps the first error.
// Every reader accepts the JSON type cdk.json gives and the string form
// `cdk -c key=value` gives.
type parser struct {
	lookup Lookup
	err    error
}

func (p *parser) get(key string) (any, bool) {
	if p.err != nil {
		return nil, false
	}
	v, ok := p.lookup(key)
	if !ok || v == nil {
		return nil, false
	}
	return v, true
}

func (p *parser) fail(key string, format string, args ...any) {
	if p.err == nil {
		p.err = fmt.Errorf("context %s%s: %s", ContextPrefix, key, fmt.Sprintf(format, args...))
	}
}

func (p *parser) str(key string, dst *string) {
	v, ok := p.get(key)
	if !ok {
		return
	}
	s, isStr := v.(string)
	if !isStr {
		p.fail(key, "want a string, got %T", v)
		return
	}
	*dst = strings.TrimSpace(s)
}

func (p *parser) integer(key string, dst *int) {
	v, ok := p.get(key)
	if !ok {
		return
	}
	switch x := v.(type) {
	case float64:
		if x != math.Trunc(x) || math.Abs(x) > 1<<31 {
			p.fail(key, "want an integer, got %v", x)
			return
		}
		*dst = int(x)
	case int:
		*dst = x
	case string:
		n, err := strconv.Atoi(strings.TrimSpace(x))
		if err != nil {
			p.fail(key, "want an integer, got %q", x)
			return
		}
		*dst = n
	default:
		p.fail(key, "want an integer, got %T", v)
	}
}

func (p *parser) boolean(key string, dst *bool) {
	v, ok := p.get(key)
	if !ok {
		return
	}
	switch x := v.(type) {
	case bool:
		*dst = x
	case string:
		b, err := strconv.ParseBool(strings.TrimSpace(x))
		if err != nil {
			p.fail(key, "want true or false, got %q", x)
			return
		}
		*dst = b
	default:
		p.fail(key, "want a boolean, got %T", v)
	}
}

// strList accepts a JSON array, a string holding a JSON array, or a
// comma-separated string.
func (p *parser) strList(key string, dst *[]string) {
	v, ok := p.get(key)
	if !ok {
		return
	}
	switch x := v.(type) {
	case []any:
		out := make([]string, 0, len(x))
		for i, e := range x {
			s, isStr := e.(string)
			if !isStr {
				p.fail(key, "element %d: want a string, got %T", i, e)
				return
			}
			out = append(out, strings.TrimSpace(s))
		}
		*dst = out
	case []string:
		*dst = append([]string(nil), x...)
	case string:
		s := strings.TrimSpace(x)
		if strings.HasPrefix(s, "[") {
			var out []string
			if err := json.Unmarshal([]byte(s), &out); err != nil {
				p.fail(key, "want a JSON array of strings: %v", err)
				return
			}
			*dst = out
			return
		}
		if s == "" {
			*dst = nil
			return
		}
		parts := strings.Split(s, ",")
		for i := range parts {
			parts[i] = strings.TrimSpace(parts[i])
		}
		*dst = parts
	default:
		p.fail(key, "want a list of strings, got %T", v)
	}
}

// strMap accepts a JSON object of strings (numbers and booleans are
// rendered as text) or a string holding one.
func (p *parser) strMap(key string, dst *map[string]string) {
	v, ok := p.get(key)
	if !ok {
		return
	}
	obj, ok := p.object(key, v)
	if !ok {
		return
	}
	out := make(map[string]string, len(obj))
	for k, e := range obj {
		switch x := e.(type) {
		case string:
			out[k] = x
		case float64:
			out[k] = strconv.FormatFloat(x, 'f', -1, 64)
		case bool:
			out[k] = strconv.FormatBool(x)
		default:
			p.fail(key, "value of %q: want a string, number or boolean, got %T", k, e)
			return
		}
	}
	*dst = out
}

// functions merges per-job overrides onto the defaults, field by field.
func (p *parser) functions(key string, dst map[string]Function) {
	v, ok := p.get(key)
	if !ok {
		return
	}
	obj, ok := p.object(key, v)
	if !ok {
		return
	}
	for job, raw := range obj {
		f := dst[job]
		b, err := json.Marshal(raw)
		if err != nil {
			p.fail(key, "job %q: %v", job, err)
			return
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&f); err != nil {
			p.fail(key, "job %q: %v", job, err)
			return
		}
		dst[job] = f
	}
}

func (p *parser) object(key string, v any) (map[string]any, bool) {
	switch x := v.(type) {
	case map[string]any:
		return x, true
	case string:
		var out map[string]any
		if err := json.Unmarshal([]byte(x), &out); err != nil {
			p.fail(key, "want a JSON object: %v", err)
			return nil, false
		}
		return out, true
	default:
		p.fail(key, "want an object, got %T", v)
		return nil, false
	}
}
