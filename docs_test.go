package agentstore_test

import (
	"bytes"
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/agentstoretest"
	"github.com/agentstore/agentstore/migrations"
)

// The documents whose links and figures the tests below keep true.
func docFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md", "ARCHITECTURE.md", "RELIABILITY.md", "BENCHMARKS.md", "CHANGELOG.md"}
	more, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(more) == 0 {
		t.Fatal("no docs/*.md")
	}
	return append(files, more...)
}

func readDoc(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var (
	fenceRE      = regexp.MustCompile("(?ms)^\\s*```.*?^\\s*```[ \t]*$")
	inlineCodeRE = regexp.MustCompile("`[^`\n]*`")
	mdLinkRE     = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	headingRE    = regexp.MustCompile(`(?m)^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$`)
)

// prose returns markdown without fenced code blocks and inline code.
func prose(md string) string {
	return inlineCodeRE.ReplaceAllString(fenceRE.ReplaceAllString(md, ""), "")
}

// anchors returns the GitHub anchors of md's headings: lower case, spaces
// to hyphens, punctuation other than "-" and "_" dropped, repeats
// suffixed -1, -2, ...
func anchors(md string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, m := range headingRE.FindAllStringSubmatch(fenceRE.ReplaceAllString(md, ""), -1) {
		var b strings.Builder
		for _, r := range strings.ToLower(m[1]) {
			switch {
			case r == ' ':
				b.WriteByte('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

// TestDocsLinksResolve: every relative link of the documents names a file
// of the repository and, with #anchor, a heading of that file.
func TestDocsLinksResolve(t *testing.T) {
	t.Parallel()
	n := 0
	for _, doc := range docFiles(t) {
		md := readDoc(t, doc)
		for _, m := range mdLinkRE.FindAllStringSubmatch(prose(md), -1) {
			link := m[1]
			if strings.Contains(link, "://") || strings.HasPrefix(link, "mailto:") {
				continue
			}
			n++
			path, anchor, _ := strings.Cut(link, "#")
			target := doc
			if path != "" {
				target = filepath.Join(filepath.Dir(doc), path)
				if _, err := os.Stat(target); err != nil {
					t.Errorf("%s: link %q: %s does not exist", doc, link, target)
					continue
				}
			}
			if anchor == "" {
				continue
			}
			if !strings.HasSuffix(target, ".md") {
				t.Errorf("%s: link %q: anchor into a file that is not markdown", doc, link)
				continue
			}
			if !anchors(readDoc(t, target))[anchor] {
				t.Errorf("%s: link %q: %s has no heading #%s", doc, link, target, anchor)
			}
		}
	}
	if n < 20 {
		t.Fatalf("found only %d relative links: the link parser is broken", n)
	}
}

// TestDocsReadme: the README is short, and its two commands are the ones
// a newcomer runs, exactly.
func TestDocsReadme(t *testing.T) {
	t.Parallel()
	md := readDoc(t, "README.md")
	if words := len(strings.Fields(md)); words > 1200 {
		t.Errorf("README.md has %d words: keep it readable in five minutes (at most 1200), move depth to docs/", words)
	}
	for _, cmd := range []string{"go run ./examples/quickstart", "go test ./..."} {
		if !regexp.MustCompile(`(?m)^    ` + regexp.QuoteMeta(cmd) + `(\s|$)`).MatchString(md) {
			t.Errorf("README.md does not give the command %q on a line of its own", cmd)
		}
	}
	for _, f := range []string{"docs/testing.md", "docs/cli.md", "docs/schema-and-migrations.md"} {
		if !strings.Contains(md, "("+f+")") {
			t.Errorf("README.md does not link %s", f)
		}
	}
}

// TestDocsReadmeExampleRuns builds the README's Go example as a program
// of this module and runs it in an empty directory.
func TestDocsReadmeExampleRuns(t *testing.T) {
	t.Parallel()
	blocks := regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(readDoc(t, "README.md"), -1)
	if len(blocks) != 1 || !strings.HasPrefix(blocks[0][1], "package main\n") {
		t.Fatalf("README.md should hold one Go example, a whole program (package main); found %d blocks", len(blocks))
	}
	dir, err := os.MkdirTemp(".", "_readme_example_")
	if err != nil {
		t.Skipf("cannot write in the module's directory: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(blocks[0][1]), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "readme-example")
	args := []string{"build", "-ldflags=" + testLinkFlags, "-o", bin}
	if raceBuild { // from the test build's compiled packages (testBinary)
		args = append(args, "-race")
	}
	if out, err := exec.Command("go", append(args, "./"+filepath.Base(dir))...).CombinedOutput(); err != nil {
		t.Fatalf("the README's example does not build: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Dir = t.TempDir()
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("1 message(s), version")) {
		t.Fatalf("the README's example: %v\n%s", err, out)
	}
}

// TestDocsQuickstartRuns runs the README's first command's program and
// checks that it prints the migrations it applied.
func TestDocsQuickstartRuns(t *testing.T) {
	t.Parallel()
	bin := testBinary(t, "quickstart")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin).CombinedOutput()
	if err != nil {
		t.Fatalf("quickstart: %v\n%s", err, out)
	}
	chain, err := migrations.Chain(string(agentstore.SQLite))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range chain {
		if line := fmt.Sprintf("applied migration V%d %s\n", m.Version, m.Description); !bytes.Contains(out, []byte(line)) {
			t.Errorf("quickstart did not print %q:\n%s", line, out)
		}
	}
	if want := fmt.Sprintf("migrated from schema version 0 to %d ", len(chain)); !bytes.Contains(out, []byte(want)) {
		t.Errorf("quickstart did not print %q:\n%s", want, out)
	}
}

// TestDocsSchemaFigures: the version numbers the documents give are the
// migration chain's: the Flyway baseline of a database Migrate built is
// the head, the table of versions has one row per step (with the
// .sql.conf of the steps that run outside a transaction), and every list
// of the CONCURRENTLY steps names exactly those steps.
func TestDocsSchemaFigures(t *testing.T) {
	t.Parallel()
	pg, err := migrations.Chain(string(agentstore.Postgres))
	if err != nil {
		t.Fatal(err)
	}
	head := int64(len(pg))
	for _, d := range dialects {
		if h, err := migrations.Head(string(d)); err != nil || h != head || h != agentstore.SchemaVersion {
			t.Fatalf("%s head %d (%v), PostgreSQL head %d, SchemaVersion %d", d, h, err, head, agentstore.SchemaVersion)
		}
	}
	var noTx []string
	for _, m := range pg {
		if m.NoTransaction {
			noTx = append(noTx, fmt.Sprintf("V%d", m.Version))
		}
	}
	wantList := strings.Join(noTx[:len(noTx)-1], ", ") + " and " + noTx[len(noTx)-1]

	baselineRE := regexp.MustCompile(`-baselineVersion=(\d+)|\b(\d+) is this release's head`)
	versionListRE := regexp.MustCompile(`V\d+(?:, V\d+)*,? and V\d+`)
	baselines, lists := 0, 0
	for _, doc := range append(docFiles(t)[:1], docFiles(t)[5:]...) { // README.md and docs/*.md
		md := readDoc(t, doc)
		for _, m := range baselineRE.FindAllStringSubmatch(md, -1) {
			baselines++
			if v, _ := strconv.ParseInt(m[1]+m[2], 10, 64); v != head {
				t.Errorf("%s: %s, but a database Migrate built records the head, V%d", doc, m[0], head)
			}
		}
		for _, para := range strings.Split(md, "\n\n") {
			if !strings.Contains(para, "CONCURRENTLY") && !strings.Contains(para, ".sql.conf") {
				continue
			}
			for _, l := range versionListRE.FindAllString(para, -1) {
				lists++
				if strings.ReplaceAll(l, ", and", " and") != wantList {
					t.Errorf("%s: the CONCURRENTLY steps are listed as %q, the chain's are %q", doc, l, wantList)
				}
			}
		}
	}
	if baselines == 0 || lists == 0 {
		t.Errorf("found %d Flyway baselines and %d lists of CONCURRENTLY steps in the documents, want both", baselines, lists)
	}

	md := readDoc(t, "docs/schema-and-migrations.md")
	for _, m := range pg {
		row := regexp.MustCompile(`(?m)^\| ` + strconv.FormatInt(m.Version, 10) + ` \| [0-9.]+ \| ` + "`" + regexp.QuoteMeta(m.File) + "`" + `( \(\+ ` + "`.sql.conf`" + ` on PostgreSQL\))? \|`)
		sub := row.FindStringSubmatch(md)
		switch {
		case sub == nil:
			t.Errorf("docs/schema-and-migrations.md has no row for V%d (%s)", m.Version, m.File)
		case (sub[1] != "") != m.NoTransaction:
			t.Errorf("docs/schema-and-migrations.md: V%d's row says .sql.conf=%v, the chain %v", m.Version, sub[1] != "", m.NoTransaction)
		}
	}
	if regexp.MustCompile(`(?m)^\| ` + strconv.FormatInt(head+1, 10) + ` \|`).MatchString(md) {
		t.Errorf("docs/schema-and-migrations.md has a row beyond the head V%d", head)
	}
}

// TestDocsListsAreasAndIssueKinds: the conformance areas of docs/testing.md
// are those of agentstoretest.Areas(), and docs/cli.md names every Verify issue
// kind declared in internal/dialect/live.go (re-exported by verify.go).
func TestDocsListsAreasAndIssueKinds(t *testing.T) {
	t.Parallel()
	tmd := readDoc(t, "docs/testing.md")
	m := regexp.MustCompile(`agentstoretest\.Areas\(\)` + "`" + ` lists them:\s*([^)]*)\)`).FindStringSubmatch(tmd)
	if m == nil {
		t.Fatal("docs/testing.md does not list the areas after agentstoretest.Areas()")
	}
	var got []string
	for _, a := range strings.Split(m[1], ",") {
		got = append(got, strings.TrimSpace(a))
	}
	if want := agentstoretest.AreaNames(); !slices.Equal(got, want) {
		t.Errorf("docs/testing.md lists the areas %v, agentstoretest.Areas() is %v", got, want)
	}

	f, err := parser.ParseFile(token.NewFileSet(), "internal/dialect/live.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	cli := readDoc(t, "docs/cli.md")
	kinds := 0
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok || vs.Type == nil || fmt.Sprint(vs.Type) != "IssueKind" {
			return true
		}
		for _, v := range vs.Values {
			if lit, ok := v.(*ast.BasicLit); ok {
				kinds++
				s, _ := strconv.Unquote(lit.Value)
				if !regexp.MustCompile(`\b` + s + `\b`).MatchString(cli) {
					t.Errorf("docs/cli.md does not name the issue kind %s", s)
				}
			}
		}
		return true
	})
	if kinds < 10 {
		t.Fatalf("found %d IssueKind constants in internal/dialect/live.go", kinds)
	}
}

// TestVersionMatchesChangelog: Version is the newest versioned section of
// CHANGELOG.md, a semantic version, dated.
func TestVersionMatchesChangelog(t *testing.T) {
	t.Parallel()
	m := regexp.MustCompile(`(?m)^## \[(\d+\.\d+\.\d+)\] - (\d{4}-\d{2}-\d{2})$`).FindStringSubmatch(readDoc(t, "CHANGELOG.md"))
	if m == nil {
		t.Fatal(`CHANGELOG.md has no "## [x.y.z] - YYYY-MM-DD" section`)
	}
	if m[1] != agentstore.Version {
		t.Errorf("agentstore.Version is %q, the newest CHANGELOG section %q", agentstore.Version, m[1])
	}
	// docs/cli.md shows what `agentstore version` prints.
	pg, err1 := migrations.Head(string(agentstore.Postgres))
	lite, err2 := migrations.Head(string(agentstore.SQLite))
	maria, err3 := migrations.Head(string(agentstore.MariaDB))
	if err1 != nil || err2 != nil || err3 != nil {
		t.Fatal(err1, err2, err3)
	}
	if want := fmt.Sprintf("agentstore %s (schema head: postgres V%d, sqlite V%d, mariadb V%d; ", agentstore.Version, pg, lite, maria); !strings.Contains(readDoc(t, "docs/cli.md"), want) {
		t.Errorf("docs/cli.md does not show `agentstore version` as it prints: %q...", want)
	}
	if _, err := time.Parse(time.DateOnly, m[2]); err != nil {
		t.Errorf("CHANGELOG section %s: date %q: %v", m[1], m[2], err)
	}
}

// rustJargon matches words of the Rust code agentstore was ported from
// that mean nothing to a Go user of the API.
var rustJargon = regexp.MustCompile(`\b(seed|seeds|seed's|serde|serde's|crate|crates|impl|trait|sqlx|tokio|claude_agent)\b|Option<|Vec<|Result<|HashMap<|Box<|Arc<|&str\b|Some\(|\.unwrap\(|non-Option|\(Option\)`)

// TestDocCommentsInGoTerms: no doc comment of the module's packages (the
// package comments and the comments of declarations and of struct fields
// and interface methods) uses Rust-origin words.
func TestDocCommentsInGoTerms(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	checked := 0
	check := func(cg *ast.CommentGroup) {
		if cg == nil {
			return
		}
		checked++
		for _, c := range cg.List {
			if m := rustJargon.FindString(c.Text); m != "" {
				t.Errorf("%s: doc comment uses %q (Rust-origin jargon; say it in Go terms): %s", fset.Position(c.Pos()), m, strings.TrimSpace(c.Text))
			}
		}
	}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			// bench and interop are modules of their own; testdata holds no API.
			if path != "." && (path == "bench" || path == "interop" || path == "testdata" || strings.HasPrefix(d.Name(), ".") || strings.HasPrefix(d.Name(), "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		check(f.Doc)
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.GenDecl:
				check(n.Doc)
			case *ast.FuncDecl:
				check(n.Doc)
			case *ast.TypeSpec:
				check(n.Doc)
			case *ast.ValueSpec:
				check(n.Doc)
				check(n.Comment)
			case *ast.Field:
				check(n.Doc)
				check(n.Comment)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 500 {
		t.Fatalf("checked only %d doc comments", checked)
	}
}
