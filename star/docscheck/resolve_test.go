package docscheck

import (
	"fmt"
	"go/ast"
	"go/constant"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// module is the product module's path: a project import is resolved in the
// repository, every other import but "time" and "math" is refused.
const module = "github.com/starlog/starlog"

// resolver evaluates the value a doc names: a Go package-level constant or
// variable, a field of the composite literal a function returns, or a
// Makefile variable's default. Packages are parsed from source (tests
// excluded) on first use.
type resolver struct {
	root string
	fset *token.FileSet
	pkgs map[string]*pkgSrc
}

// pkgSrc is one parsed package: its top-level values and functions, each
// with the file it is in (for that file's imports).
type pkgSrc struct {
	path  string
	vals  map[string]declared
	funcs map[string]declared
}

type declared struct {
	expr ast.Expr      // a value's expression
	fn   *ast.FuncDecl // or a function
	file *ast.File
}

func newResolver(root string) *resolver {
	return &resolver{root: root, fset: token.NewFileSet(), pkgs: map[string]*pkgSrc{}}
}

// stdConsts are the standard library's constants a default may be written
// in: the time package's units and the math package's integer limits.
var stdConsts = map[string]map[string]string{
	"time": {
		"Nanosecond": "1", "Microsecond": "1000", "Millisecond": "1000000",
		"Second": "1000000000", "Minute": "60000000000", "Hour": "3600000000000",
	},
	"math": {
		"MaxInt8": "127", "MaxInt16": "32767", "MaxInt32": "2147483647", "MaxInt64": "9223372036854775807",
		"MaxUint8": "255", "MaxUint16": "65535", "MaxUint32": "4294967295", "MaxUint64": "18446744073709551615",
	},
}

// Value evaluates a reference: "go PKG.Name", "go PKG.Func().Field…" or
// "make NAME".
func (r *resolver) Value(kind, ref string) (constant.Value, error) {
	switch kind {
	case "make":
		return r.makeDefault(ref)
	case "go":
		return r.goValue(ref)
	}
	return nil, fmt.Errorf("unknown kind %q (want go or make)", kind)
}

func (r *resolver) makeDefault(name string) (constant.Value, error) {
	b, err := os.ReadFile(filepath.Join(r.root, "Makefile"))
	if err != nil {
		return nil, err
	}
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `\s*\?=\s*(\S+)\s*$`)
	m := re.FindSubmatch(b)
	if m == nil {
		return nil, fmt.Errorf("the Makefile has no %q ?= default", name)
	}
	v := constant.MakeFromLiteral(string(m[1]), token.INT, 0)
	if v.Kind() == constant.Unknown {
		return nil, fmt.Errorf("Makefile %s = %q is not an integer", name, m[1])
	}
	return v, nil
}

// goValue splits "star/node.Defaults().Standard.FlushInterval" into the
// package path and the selector path, and follows it.
func (r *resolver) goValue(ref string) (constant.Value, error) {
	slash := strings.LastIndex(ref, "/")
	dot := strings.Index(ref[slash+1:], ".")
	if dot < 0 {
		return nil, fmt.Errorf("%q: want PKG.Name or PKG.Func().Field", ref)
	}
	pkgPath, sel := ref[:slash+1+dot], strings.Split(ref[slash+2+dot:], ".")
	p, err := r.pkg(module + "/" + pkgPath)
	if err != nil {
		return nil, err
	}
	first := sel[0]
	var e ast.Expr
	var f *ast.File
	if name, ok := strings.CutSuffix(first, "()"); ok {
		e, f, err = r.returned(p, name)
		if err != nil {
			return nil, err
		}
	} else {
		d, ok := p.vals[first]
		if !ok {
			return nil, fmt.Errorf("%s: no package-level constant or variable %s", p.path, first)
		}
		e, f = d.expr, d.file
	}
	for _, field := range sel[1:] {
		if e, f, err = r.field(p, e, f, field); err != nil {
			return nil, fmt.Errorf("%s: %w", ref, err)
		}
	}
	return r.eval(p, f, e)
}

// returned is the expression a function returns: its body must end in
// one return of one value.
func (r *resolver) returned(p *pkgSrc, name string) (ast.Expr, *ast.File, error) {
	d, ok := p.funcs[name]
	if !ok || d.fn.Body == nil || len(d.fn.Body.List) == 0 {
		return nil, nil, fmt.Errorf("%s: no function %s with a body", p.path, name)
	}
	ret, ok := d.fn.Body.List[len(d.fn.Body.List)-1].(*ast.ReturnStmt)
	if !ok || len(ret.Results) != 1 {
		return nil, nil, fmt.Errorf("%s.%s does not end in a return of one value", p.path, name)
	}
	return ret.Results[0], d.file, nil
}

// field descends into a composite literal (or the literal a call of a
// function without arguments returns) to the value of one keyed field.
func (r *resolver) field(p *pkgSrc, e ast.Expr, f *ast.File, name string) (ast.Expr, *ast.File, error) {
	for {
		switch x := e.(type) {
		case *ast.UnaryExpr: // &T{…}
			e = x.X
			continue
		case *ast.CallExpr:
			if len(x.Args) != 0 {
				return nil, nil, fmt.Errorf("field %s: a call with arguments", name)
			}
			fp, fname, err := r.callee(p, f, x.Fun)
			if err != nil {
				return nil, nil, err
			}
			ne, nf, err := r.returned(fp, fname)
			if err != nil {
				return nil, nil, err
			}
			p, e, f = fp, ne, nf
			continue
		case *ast.CompositeLit:
			for _, el := range x.Elts {
				kv, ok := el.(*ast.KeyValueExpr)
				if !ok {
					continue
				}
				if k, ok := kv.Key.(*ast.Ident); ok && k.Name == name {
					return kv.Value, f, nil
				}
			}
			return nil, nil, fmt.Errorf("no field %s in the literal", name)
		}
		return nil, nil, fmt.Errorf("field %s: %T is not a composite literal", name, e)
	}
}

// callee names the function a call expression calls: local or pkg.Func.
func (r *resolver) callee(p *pkgSrc, f *ast.File, fun ast.Expr) (*pkgSrc, string, error) {
	switch x := fun.(type) {
	case *ast.Ident:
		return p, x.Name, nil
	case *ast.SelectorExpr:
		if id, ok := x.X.(*ast.Ident); ok {
			path, err := importPath(f, id.Name)
			if err != nil {
				return nil, "", err
			}
			fp, err := r.pkg(path)
			return fp, x.Sel.Name, err
		}
	}
	return nil, "", fmt.Errorf("cannot follow the call %T", fun)
}

// eval computes a constant expression: literals, arithmetic and shifts,
// conversions, the package's own values, other project packages' values,
// the time package's units and the math package's integer limits.
func (r *resolver) eval(p *pkgSrc, f *ast.File, e ast.Expr) (constant.Value, error) {
	switch x := e.(type) {
	case *ast.BasicLit:
		return constant.MakeFromLiteral(x.Value, x.Kind, 0), nil
	case *ast.ParenExpr:
		return r.eval(p, f, x.X)
	case *ast.UnaryExpr:
		v, err := r.eval(p, f, x.X)
		if err != nil {
			return nil, err
		}
		return constant.UnaryOp(x.Op, v, 0), nil
	case *ast.BinaryExpr:
		a, err := r.eval(p, f, x.X)
		if err != nil {
			return nil, err
		}
		b, err := r.eval(p, f, x.Y)
		if err != nil {
			return nil, err
		}
		switch x.Op {
		case token.SHL, token.SHR:
			s, ok := constant.Uint64Val(b)
			if !ok {
				return nil, fmt.Errorf("shift by %v", b)
			}
			return constant.Shift(a, x.Op, uint(s)), nil
		case token.QUO:
			if a.Kind() == constant.Int && b.Kind() == constant.Int {
				return constant.BinaryOp(a, token.QUO_ASSIGN, b), nil // integer division
			}
		}
		return constant.BinaryOp(a, x.Op, b), nil
	case *ast.Ident:
		d, ok := p.vals[x.Name]
		if !ok {
			return nil, fmt.Errorf("%s: %s is not a package-level value", p.path, x.Name)
		}
		return r.eval(p, d.file, d.expr)
	case *ast.SelectorExpr:
		id, ok := x.X.(*ast.Ident)
		if !ok {
			return nil, fmt.Errorf("cannot evaluate the selector %s", x.Sel.Name)
		}
		path, err := importPath(f, id.Name)
		if err != nil {
			return nil, err
		}
		if std, ok := stdConsts[path]; ok {
			lit, ok := std[x.Sel.Name]
			if !ok {
				return nil, fmt.Errorf("%s.%s is not among the constants followed", path, x.Sel.Name)
			}
			return constant.MakeFromLiteral(lit, token.INT, 0), nil
		}
		op, err := r.pkg(path)
		if err != nil {
			return nil, err
		}
		d, ok := op.vals[x.Sel.Name]
		if !ok {
			return nil, fmt.Errorf("%s: no package-level value %s", path, x.Sel.Name)
		}
		return r.eval(op, d.file, d.expr)
	case *ast.CallExpr: // a conversion: time.Duration(n), uint64(n)
		if len(x.Args) == 1 {
			return r.eval(p, f, x.Args[0])
		}
	}
	return nil, fmt.Errorf("cannot evaluate %T as a constant", e)
}

// importPath is the path a file imports under name.
func importPath(f *ast.File, name string) (string, error) {
	for _, im := range f.Imports {
		path, _ := strconv.Unquote(im.Path.Value)
		local := path[strings.LastIndex(path, "/")+1:]
		if im.Name != nil {
			local = im.Name.Name
		}
		if local == name {
			if _, std := stdConsts[path]; !std && !strings.HasPrefix(path, module+"/") {
				return "", fmt.Errorf("%s is outside the project (only time, math and %s/… are followed)", path, module)
			}
			return path, nil
		}
	}
	return "", fmt.Errorf("%s: no import named %s", f.Name.Name, name)
}

// pkg parses a project package's non-test files.
func (r *resolver) pkg(path string) (*pkgSrc, error) {
	if p, ok := r.pkgs[path]; ok {
		return p, nil
	}
	rel, ok := strings.CutPrefix(path, module+"/")
	if !ok {
		return nil, fmt.Errorf("%s is not a project package", path)
	}
	dir := filepath.Join(r.root, filepath.FromSlash(rel))
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil || len(names) == 0 {
		return nil, fmt.Errorf("package %s: no Go files in %s", path, dir)
	}
	p := &pkgSrc{path: path, vals: map[string]declared{}, funcs: map[string]declared{}}
	for _, n := range names {
		if strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(r.fset, n, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					p.funcs[d.Name.Name] = declared{fn: d, file: f}
				}
			case *ast.GenDecl:
				if d.Tok != token.CONST && d.Tok != token.VAR {
					continue
				}
				for _, s := range d.Specs {
					vs := s.(*ast.ValueSpec)
					for i, id := range vs.Names {
						if i < len(vs.Values) {
							p.vals[id.Name] = declared{expr: vs.Values[i], file: f}
						}
					}
				}
			}
		}
	}
	r.pkgs[path] = p
	return p, nil
}
