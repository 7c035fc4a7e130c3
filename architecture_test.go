package agentstore_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// The package boundaries of ARCHITECTURE.md, checked over the build's own
// import graph (go list). A library package may import, of this module,
// only what its rule lists (the packages it imports directly and
// indirectly are both checked: a dialect package that reached the engine
// through a third package breaks the rule too). Tests are not checked.

const module = "github.com/agentstore/agentstore"

// importRules maps each library package (relative to the module) to the
// module packages it may depend on. A package missing here fails the test:
// every new package gets a rule.
func importRules() map[string][]string {
	leaf := []string{}
	return map[string][]string{
		"models":                    leaf,
		"migrations":                leaf,
		"repo":                      leaf,
		"repo/duroxide":             {"repo"},
		"internal/dialect":          {"models", "repo"},
		"internal/dialect/postgres": {"internal/dialect", "models", "repo"},
		"internal/sqlitefts5":       leaf,
		"internal/dialect/sqlite":   {"internal/dialect", "models", "repo", "internal/sqlitefts5"},
		"internal/dialect/mariadb":  {"internal/dialect", "models", "repo"},
		"internal/engine":           {"internal/dialect", "models", "repo", "repo/duroxide", "migrations"},
		".": {"internal/engine", "internal/dialect", "internal/dialect/postgres", "internal/dialect/sqlite", "internal/dialect/mariadb",
			"internal/sqlitefts5", "models", "repo", "repo/duroxide", "migrations"},
	}
}

// libraryPackages are the packages the rules cover (programs, examples,
// the test suite, its shared test helpers and the benchmarks are not the
// library).
func libraryPackages(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []string
	for _, p := range strings.Fields(string(out)) {
		rel := strings.TrimPrefix(strings.TrimPrefix(p, module), "/")
		if rel == "" {
			rel = "."
		}
		switch {
		case strings.HasPrefix(rel, "cmd"), strings.HasPrefix(rel, "examples"), strings.HasPrefix(rel, "bench"),
			strings.HasPrefix(rel, "agentstoretest"), rel == "internal/testkit", strings.HasPrefix(rel, "orchloop"), strings.HasPrefix(rel, "interop"):
			continue
		}
		pkgs = append(pkgs, rel)
	}
	return pkgs
}

// moduleDeps returns the module packages pkg depends on (directly or not),
// for the build's cgo setting.
func moduleDeps(t *testing.T, pkg string, env ...string) []string {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", "./"+strings.TrimPrefix(pkg, "."))
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	var deps []string
	for _, p := range strings.Fields(string(out)) {
		if p == module || strings.HasPrefix(p, module+"/") {
			rel := strings.TrimPrefix(strings.TrimPrefix(p, module), "/")
			if rel == "" {
				rel = "."
			}
			if rel != pkg {
				deps = append(deps, rel)
			}
		}
	}
	return deps
}

// violations lists the deps of pkg its rule does not allow.
func violations(rules map[string][]string, pkg string, deps []string) []string {
	allowed, ok := rules[pkg]
	if !ok {
		return []string{"(package has no import rule)"}
	}
	var bad []string
	for _, d := range deps {
		okDep := false
		for _, a := range allowed {
			if d == a {
				okDep = true
			}
		}
		if !okDep {
			bad = append(bad, d)
		}
	}
	sort.Strings(bad)
	return bad
}

// TestImportRules: every library package depends only on what its rule
// allows, with and without cgo.
func TestImportRules(t *testing.T) {
	t.Parallel()
	rules := importRules()
	for _, pkg := range libraryPackages(t) {
		for _, env := range [][]string{nil, {"CGO_ENABLED=0"}} {
			if bad := violations(rules, pkg, moduleDeps(t, pkg, env...)); len(bad) > 0 {
				t.Errorf("package %s (%v) depends on %v, which its rule in importRules (ARCHITECTURE.md) does not allow", pkg, env, bad)
			}
		}
	}
}

// TestImportRulesCatchViolations: the checker flags a dialect package that
// reaches the engine or the root, and a package without a rule.
func TestImportRulesCatchViolations(t *testing.T) {
	t.Parallel()
	rules := importRules()
	for _, c := range []struct {
		pkg  string
		deps []string
	}{
		{"internal/dialect/postgres", []string{"internal/dialect", "internal/engine"}},
		{"internal/dialect/sqlite", []string{"models", "."}},
		{"internal/engine", []string{"internal/dialect/postgres"}},
		{"internal/dialect", []string{"repo/duroxide"}},
		{"internal/newthing", nil},
	} {
		if bad := violations(rules, c.pkg, c.deps); len(bad) == 0 {
			t.Errorf("violations(%s, %v) found nothing", c.pkg, c.deps)
		}
	}
	if bad := violations(rules, "internal/dialect/postgres", []string{"internal/dialect", "models", "repo"}); len(bad) != 0 {
		t.Errorf("allowed deps flagged: %v", bad)
	}
}

// TestNoPackageState: the library has no init functions and no
// package-level mutable state. A package-level var is allowed only as an
// error sentinel (errors.New, a re-exported Err*), a compiled regular
// expression, a compile-time interface assertion (var _ I = T{}) or an
// embedded file system.
func TestNoPackageState(t *testing.T) {
	t.Parallel()
	for _, pkg := range libraryPackages(t) {
		dir := filepath.FromSlash(pkg)
		fset := token.NewFileSet()
		pkgs, err := parser.ParseDir(fset, dir, func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pkgs {
			for name, f := range p.Files {
				for _, d := range f.Decls {
					switch d := d.(type) {
					case *ast.FuncDecl:
						if d.Recv == nil && d.Name.Name == "init" {
							t.Errorf("%s: func init", name)
						}
					case *ast.GenDecl:
						if d.Tok != token.VAR {
							continue
						}
						for _, s := range d.Specs {
							vs := s.(*ast.ValueSpec)
							for i, n := range vs.Names {
								if !allowedVar(n.Name, vs, i) {
									t.Errorf("%s: package-level var %s", fset.Position(n.Pos()), n.Name)
								}
							}
						}
					}
				}
			}
		}
	}
}

func allowedVar(name string, vs *ast.ValueSpec, i int) bool {
	if name == "_" {
		return true
	}
	if vs.Type != nil {
		if sel, ok := vs.Type.(*ast.SelectorExpr); ok && sel.Sel.Name == "FS" {
			return true // //go:embed
		}
		if id, ok := vs.Type.(*ast.Ident); ok && id.Name == "error" && strings.HasPrefix(strings.ToLower(name), "err") {
			return true // a sentinel of a custom error type
		}
	}
	if i >= len(vs.Values) {
		return false
	}
	switch v := vs.Values[i].(type) {
	case *ast.CallExpr:
		if sel, ok := v.Fun.(*ast.SelectorExpr); ok {
			switch sel.Sel.Name {
			case "MustCompile":
				return true
			case "New", "Errorf", "UnavailableError":
				return strings.HasPrefix(name, "Err") || strings.HasPrefix(name, "err")
			}
		}
	case *ast.SelectorExpr:
		return strings.HasPrefix(name, "Err") && strings.HasPrefix(v.Sel.Name, "Err")
	}
	return false
}
