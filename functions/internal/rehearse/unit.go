package rehearse

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Heredoc is a file a script writes with `cat > PATH <<'EOF'` (Quoted: the
// shell expands nothing) or `cat > PATH <<EOF` (the shell expands
// variables in it).
type Heredoc struct {
	Path, Body string
	Quoted     bool
}

var heredocStart = regexp.MustCompile(`(?m)^cat > (\S+) <<('EOF'|EOF)\n`)

// Heredocs lists the files a script writes with heredocs, by path.
func Heredocs(script string) (map[string]Heredoc, error) {
	out := map[string]Heredoc{}
	for _, m := range heredocStart.FindAllStringSubmatchIndex(script, -1) {
		path := script[m[2]:m[3]]
		body := script[m[1]:]
		end := strings.Index(body, "\nEOF\n")
		if !strings.HasPrefix(body, "EOF\n") && end < 0 {
			return nil, fmt.Errorf("rehearse: heredoc for %s is not closed", path)
		}
		if strings.HasPrefix(body, "EOF\n") {
			body = ""
		} else {
			body = body[:end+1]
		}
		if _, dup := out[path]; dup {
			return nil, fmt.Errorf("rehearse: %s is written twice", path)
		}
		out[path] = Heredoc{Path: path, Body: body, Quoted: script[m[4]:m[5]] == "'EOF'"}
	}
	return out, nil
}

// Expand renders an unquoted heredoc as bash would with vars set: only
// ${NAME} references to vars are supported, and any other expansion is an
// error (the rehearsal cannot know what it would give on an instance).
func (h Heredoc) Expand(vars map[string]string) (string, error) {
	if h.Quoted {
		return h.Body, nil
	}
	var b strings.Builder
	s := h.Body
	for {
		i := strings.IndexAny(s, "$`\\")
		if i < 0 {
			b.WriteString(s)
			return b.String(), nil
		}
		if s[i] != '$' || !strings.HasPrefix(s[i:], "${") {
			return "", fmt.Errorf("rehearse: %s: unsupported expansion at %q", h.Path, s[i:min(len(s), i+20)])
		}
		j := strings.IndexByte(s[i:], '}')
		if j < 0 {
			return "", fmt.Errorf("rehearse: %s: unclosed ${", h.Path)
		}
		name := s[i+2 : i+j]
		v, ok := vars[name]
		if !ok {
			return "", fmt.Errorf("rehearse: %s: ${%s} is not an instance variable the rehearsal knows", h.Path, name)
		}
		b.WriteString(s[:i])
		b.WriteString(v)
		s = s[i+j+1:]
	}
}

// Unit is a parsed systemd unit: each section's assignments in order.
type Unit struct {
	Sections map[string][]KV
}

// KV is one assignment.
type KV struct{ Key, Value string }

// ParseUnit parses unit file text: sections, comments, and lines continued
// with a trailing backslash (joined with a space, as systemd does).
func ParseUnit(text string) (Unit, error) {
	u := Unit{Sections: map[string][]KV{}}
	section := ""
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		line := strings.TrimSpace(lines[i])
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		if strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]") {
			section = line[1 : len(line)-1]
			continue
		}
		for strings.HasSuffix(line, "\\") && i+1 < len(lines) {
			i++
			line = strings.TrimSuffix(line, "\\") + " " + strings.TrimSpace(lines[i])
		}
		if section == "" {
			return Unit{}, fmt.Errorf("rehearse: unit line %q outside a section", line)
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return Unit{}, fmt.Errorf("rehearse: unit line %q is not an assignment", line)
		}
		u.Sections[section] = append(u.Sections[section], KV{strings.TrimSpace(k), strings.TrimSpace(v)})
	}
	return u, nil
}

// Values are every value of key in section, in order.
func (u Unit) Values(section, key string) []string {
	var out []string
	for _, kv := range u.Sections[section] {
		if kv.Key == key {
			out = append(out, kv.Value)
		}
	}
	return out
}

// Value is key's one value in section.
func (u Unit) Value(section, key string) (string, error) {
	vs := u.Values(section, key)
	if len(vs) != 1 {
		return "", fmt.Errorf("rehearse: unit has %d %s= in [%s], want 1", len(vs), key, section)
	}
	return vs[0], nil
}

// words splits a command line or an Environment= value into words. Only
// plain words separated by blanks are supported (and, on command lines,
// ${NAME} references: see expand). Quotes, escapes, $NAME and specifiers
// (%) are errors, so a unit that relies on them fails the rehearsal until
// this learns them.
func words(what, s string, vars bool) ([]string, error) {
	check := s
	if vars {
		check = braceRef.ReplaceAllString(s, "")
	}
	if i := strings.IndexAny(check, "\"'\\$%"); i >= 0 {
		return nil, fmt.Errorf("rehearse: %s uses %q, which the rehearsal does not expand: %s", what, check[i], s)
	}
	return strings.Fields(s), nil
}

var braceRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// expand replaces ${NAME} in command-line words by NAME's value in env, as
// systemd does (an unset variable is empty; a whole-word reference stays
// one word).
func expand(argv, env []string) []string {
	out := make([]string, len(argv))
	for i, w := range argv {
		out[i] = braceRef.ReplaceAllStringFunc(w, func(ref string) string {
			v, _ := Lookup(env, braceRef.FindStringSubmatch(ref)[1])
			return v
		})
	}
	return out
}

// ExecStart is the service's command line.
func (u Unit) ExecStart() ([]string, error) {
	v, err := u.Value("Service", "ExecStart")
	if err != nil {
		return nil, err
	}
	for _, p := range []string{"@", "-", ":", "+", "!"} {
		if strings.HasPrefix(v, p) {
			return nil, fmt.Errorf("rehearse: ExecStart prefix %q is not supported", p)
		}
	}
	return words("ExecStart", v, true)
}

// Environment is every Environment= assignment, in order (a later one
// wins).
func (u Unit) Environment() ([]string, error) {
	var out []string
	for _, v := range u.Values("Service", "Environment") {
		ws, err := words("Environment=", v, false)
		if err != nil {
			return nil, err
		}
		for _, w := range ws {
			if !strings.Contains(w, "=") {
				return nil, fmt.Errorf("rehearse: Environment= word %q is not NAME=value", w)
			}
			out = append(out, w)
		}
	}
	return out, nil
}

// ParseEnvFile reads an EnvironmentFile: NAME=value lines, blank lines and
// comments. Quoting is not supported (an error).
func ParseEnvFile(text string) ([]string, error) {
	var out []string
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || k == "" || strings.ContainsAny(v, "\"'\\") {
			return nil, fmt.Errorf("rehearse: environment file line %q", line)
		}
		out = append(out, k+"="+v)
	}
	return out, nil
}

// MergeEnv merges NAME=value lists; a later assignment of a name wins, as
// in systemd and exec.
func MergeEnv(lists ...[]string) []string {
	m := map[string]string{}
	for _, l := range lists {
		for _, kv := range l {
			k, v, _ := strings.Cut(kv, "=")
			m[k] = v
		}
	}
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return out
}

// Lookup finds name in a NAME=value list.
func Lookup(env []string, name string) (string, bool) {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], name+"="); ok {
			return v, true
		}
	}
	return "", false
}

// Service is a systemd service the user data writes, with the heredoc of
// its EnvironmentFile.
type Service struct {
	Path string
	Unit Unit
	// Argv is ExecStart (its ${NAME} references unexpanded: see Instance),
	// Env the Environment= assignments.
	Argv, Env []string
	// EnvFile is the EnvironmentFile the user data writes ("" if none).
	EnvFile  string
	envFiles map[string]Heredoc
}

// ServiceRunning finds the unit under /etc/systemd/system/ whose ExecStart
// runs sub (its second word, e.g. "serve"): the star's unit.
func ServiceRunning(script, sub string) (*Service, error) {
	docs, err := Heredocs(script)
	if err != nil {
		return nil, err
	}
	var found []*Service
	for path, h := range docs {
		if !strings.HasPrefix(path, "/etc/systemd/system/") || !strings.HasSuffix(path, ".service") {
			continue
		}
		u, err := ParseUnit(h.Body)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		argv, err := u.ExecStart()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if len(argv) < 2 || argv[1] != sub {
			continue
		}
		env, err := u.Environment()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		s := &Service{Path: path, Unit: u, Argv: argv, Env: env, envFiles: docs}
		switch files := u.Values("Service", "EnvironmentFile"); len(files) {
		case 0:
		case 1:
			s.EnvFile = strings.TrimPrefix(files[0], "-")
		default:
			return nil, fmt.Errorf("rehearse: %s has %d EnvironmentFile= lines", path, len(files))
		}
		found = append(found, s)
	}
	if len(found) != 1 {
		return nil, fmt.Errorf("rehearse: %d units run %q, want 1", len(found), sub)
	}
	return found[0], nil
}

// Instance is the service's command line and environment on one
// instance: Environment= then the EnvironmentFile as the user data writes
// it with the instance's variables (INSTANCE_ID, LOCAL_IP, …), which win
// as in systemd, and ExecStart with its ${NAME} references expanded from
// that environment.
func (s *Service) Instance(vars map[string]string) (argv, env []string, err error) {
	env = slices.Clone(s.Env)
	if s.EnvFile != "" {
		doc, ok := s.envFiles[s.EnvFile]
		if !ok {
			return nil, nil, fmt.Errorf("rehearse: %s reads EnvironmentFile %s, which the user data does not write with a heredoc", s.Path, s.EnvFile)
		}
		text, err := doc.Expand(vars)
		if err != nil {
			return nil, nil, err
		}
		file, err := ParseEnvFile(text)
		if err != nil {
			return nil, nil, err
		}
		env = MergeEnv(s.Env, file)
	}
	return expand(s.Argv, env), env, nil
}

// Flag is the value of --name=value in argv.
func Flag(argv []string, name string) (string, bool) {
	for _, a := range argv {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
	}
	return "", false
}

// Flags are argv's --name=value flags as a map (the command words and
// anything else are skipped).
func Flags(argv []string) map[string]string {
	out := map[string]string{}
	for _, a := range argv {
		if k, v, ok := strings.Cut(strings.TrimPrefix(a, "--"), "="); ok && strings.HasPrefix(a, "--") {
			out[k] = v
		}
	}
	return out
}

// Replace returns argv with --name's value replaced by with(old); the flag
// must be there exactly once.
func Replace(argv []string, name string, with func(old string) string) ([]string, error) {
	out := slices.Clone(argv)
	n := 0
	for i, a := range out {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			out[i] = "--" + name + "=" + with(v)
			n++
		}
	}
	if n != 1 {
		return nil, fmt.Errorf("rehearse: --%s appears %d times in %v", name, n, argv)
	}
	return out, nil
}
