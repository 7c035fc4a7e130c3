package agentstore_test

// The statement audit (docs/distributed.md, "The statement audit"): every
// statement a Store sends during the postgres-general conformance run is
// captured through its GORM logger with the engine operation that sent it,
// reduced to a template (literals and lists collapsed, schema and table
// prefix dropped) and classified against agentstore.CitusLayout as Citus
// would route it:
//
//   - single: every distributed table it reads or writes is pinned to one
//     value of its distribution column (one shard);
//   - multi: pinned, but to several values (IN lists, multi-row inserts,
//     Fork's copy from the parent into the child): one shard per key;
//   - global: a distributed table without an equality on its column
//     (admin lists, metrics, claims over a whole queue): every shard;
//   - none: no distributed table (schema_version, catalog reads, SELECT 1);
//   - ddl: schema changes (Migrate), propagated to every shard by Citus:
//     counted, not listed. Statements without an engine frame (the
//     suite's own DatabaseOps) are counted apart and not audited.
//
// testdata/citus_statements.txt lists the distinct (class, operation,
// template) entries of the last full run. The test fails when an
// operation on a hot path (citusHotOps) sends a statement that is not
// single-key and not in that list, and logs every other entry the list
// lacks. Regenerate the list after reviewing the new entries (it keeps the
// old list's hot-path global entries the run did not reach; delete the
// file first to drop stale ones):
//
//	AGENTSTORE_LONG_TESTS=1 AGENTSTORE_CITUS_AUDIT_WRITE=1 go test -run 'TestConformance$/postgres-general$' .

import (
	"bufio"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm/logger"

	"github.com/agentstore/agentstore"
)

const (
	citusAuditFile     = "testdata/citus_statements.txt"
	citusAuditWriteEnv = "AGENTSTORE_CITUS_AUDIT_WRITE"
	enginePkg          = "github.com/agentstore/agentstore/internal/engine."
)

// citusHotOps are the operations on the hot paths (the append,
// load, dequeue/complete, fetch/ack of one instance, KV reads; the
// session branch operations Fork, Rewind, LoadBranch, Branches): a
// statement they send that is not single-key must be in the committed
// list.
var citusHotOps = []string{"AppendMessages", "AppendMessagesWith", "Load", "Fork", "Rewind", "LoadBranch", "Branches",
	"Enqueue", "EnqueueWith", "Dequeue", "Complete",
	"Fail", "Release", "FetchOrchestrationItem", "AckOrchestrationItem", "AbandonOrchestrationItem",
	"RenewOrchestrationItemLock", "FetchWorkItem", "AckWorkItem", "AbandonWorkItem", "RenewWorkItemLock",
	"GetKVValue", "GetKVAllValues", "EnqueueForOrchestrator", "EnqueueForWorker"}

// citusHot reports whether op (an engine function name) is a hot-path operation.
func citusHot(op string) bool {
	i := strings.LastIndexByte(op, '.')
	return slices.Contains(citusHotOps, op[i+1:])
}

// auditEntry is one distinct statement of the audit.
type auditEntry struct {
	class, op, template string
}

// key identifies the entry in the committed list.
func (e auditEntry) key() string {
	h := sha1.Sum([]byte(e.template))
	return e.class + "\t" + e.op + "\t" + hex.EncodeToString(h[:6])
}

// line is the entry's line in the committed list (the template clipped).
func (e auditEntry) line() string {
	t := e.template
	if len(t) > 300 {
		t = t[:300] + " …"
	}
	return e.key() + "\t" + t
}

// citusAudit is the GORM logger that records every statement.
type citusAudit struct {
	mu     sync.Mutex
	counts map[auditEntry]int
	total  int
	ddl    int // Migrate's DDL, not listed
	suite  int // the suite's own statements (no engine frame), not audited
	// dquoted: the logger prints string arguments in double quotes
	// (SQLite's GORM dialector); they are read as strings, not identifiers
	// (sqliteStrings)
	dquoted bool
}

// dquotedTok is a double-quoted token of a statement as SQLite's GORM
// logger prints it.
var dquotedTok = regexp.MustCompile(`"((?:[^"]|"")*)"`)

// sqliteStrings rewrites the double-quoted tokens of sql that are not an
// agentstore table or a test schema as single-quoted strings: SQLite's
// logger prints string arguments so.
func sqliteStrings(sql string) string {
	bases := tableBases()
	return dquotedTok.ReplaceAllStringFunc(sql, func(m string) string {
		id := m[1 : len(m)-1]
		if schemaQualifier.MatchString(id) {
			return m
		}
		for _, b := range bases {
			if strings.HasSuffix(id, b) {
				return m
			}
		}
		return "'" + strings.ReplaceAll(strings.ReplaceAll(id, `""`, `"`), "'", "''") + "'"
	})
}

func (a *citusAudit) LogMode(logger.LogLevel) logger.Interface { return a }
func (a *citusAudit) Info(context.Context, string, ...any)     {}
func (a *citusAudit) Warn(context.Context, string, ...any)     {}
func (a *citusAudit) Error(context.Context, string, ...any)    {}

// Trace records the statement, its class and the operation that sent it.
func (a *citusAudit) Trace(_ context.Context, _ time.Time, fc func() (string, int64), _ error) {
	sql, _ := fc()
	if a.dquoted {
		sql = sqliteStrings(sql)
	}
	op := auditOp()
	class, template := classifyStatement(sql)
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case op == "(other)": // the suite's own statements (DatabaseOps), not the library's
		a.suite++
		return
	case class == "ddl": // Migrate: counted, not listed (its templates vary with every name)
		a.ddl++
		return
	}
	e := auditEntry{class: class, op: op, template: template}
	if a.counts == nil {
		a.counts = map[auditEntry]int{}
	}
	a.counts[e]++
	a.total++
}

// auditOp names the engine operation on the stack: the outermost frame in
// package internal/engine (the public method the caller entered, or the
// goroutine the engine started), "(other)" when none is.
func auditOp() string {
	pcs := make([]uintptr, 128)
	n := runtime.Callers(3, pcs)
	frames := runtime.CallersFrames(pcs[:n])
	op := "(other)"
	for {
		f, more := frames.Next()
		if name, ok := strings.CutPrefix(f.Function, enginePkg); ok && !strings.Contains(name, ".func") {
			op = name
		}
		if !more {
			break
		}
	}
	return op
}

// readCitusAudit reads the committed list: key -> line.
func readCitusAudit(t testing.TB) map[string]string {
	f, err := os.Open(citusAuditFile)
	if err != nil {
		t.Fatalf("the committed statement list: %v (regenerate: %s=1)", err, citusAuditWriteEnv)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		parts := strings.SplitN(l, "\t", 4)
		if len(parts) < 3 {
			t.Fatalf("%s: malformed line %q", citusAuditFile, l)
		}
		out[strings.Join(parts[:3], "\t")] = l
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// reset forgets the statements recorded so far.
func (a *citusAudit) reset() {
	a.mu.Lock()
	clear(a.counts)
	a.mu.Unlock()
}

// sent returns a copy of the recorded entries of the operations whose
// name ends in opSuffix ("": every operation), with their counts.
func (a *citusAudit) sent(opSuffix string) map[auditEntry]int {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[auditEntry]int{}
	for e, n := range a.counts {
		if strings.HasSuffix(e.op, opSuffix) {
			out[e] = n
		}
	}
	return out
}

// check compares the run with the committed list (or writes it with
// AGENTSTORE_CITUS_AUDIT_WRITE=1) and logs the figures.
func (a *citusAudit) check(t *testing.T) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.total == 0 {
		return
	}
	byClass, hotClass := map[string]int{}, map[string]int{}
	var entries []auditEntry
	for e, n := range a.counts {
		byClass[e.class] += n
		if citusHot(e.op) {
			hotClass[e.class] += n
		}
		entries = append(entries, e)
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].line() < entries[j].line() })
	distinct := map[string]bool{}
	for _, e := range entries {
		distinct[e.key()] = true
	}
	summary := fmt.Sprintf("%d statements: %d single-key, %d multi-key, %d global, %d no distributed table; %d distinct entries "+
		"(not audited: %d of Migrate's DDL, %d of the suite's own); on the hot paths: %d single-key, %d multi-key, %d global, %d no distributed table",
		a.total, byClass["single"], byClass["multi"], byClass["global"], byClass["none"], len(distinct), a.ddl, a.suite,
		hotClass["single"], hotClass["multi"], hotClass["global"], hotClass["none"])
	t.Logf("citus statement audit: %s", summary)
	perOp := map[string][3]int{} // hot op -> single, multi, global statements
	for e, n := range a.counts {
		if !citusHot(e.op) {
			continue
		}
		c := perOp[e.op]
		switch e.class {
		case "single":
			c[0] += n
		case "multi":
			c[1] += n
		case "global":
			c[2] += n
		}
		perOp[e.op] = c
	}
	ops := slices.Sorted(maps.Keys(perOp))
	for _, op := range ops {
		c := perOp[op]
		t.Logf("  hot %-45s %6d single-key %5d multi-key %5d global", op, c[0], c[1], c[2])
	}
	// the orchestration fetch's statements are of forms Citus runs on
	// row-distributed tables (TestOrchFetchStatementsCitusShapes)
	for _, e := range entries {
		if strings.HasSuffix(e.op, ".FetchOrchestrationItem") {
			if why := citusFetchShapeProblem(e.template); why != "" {
				t.Errorf("FetchOrchestrationItem sent %s: %s", why, e.line())
			}
		}
	}
	if os.Getenv(citusAuditWriteEnv) == "1" {
		var b strings.Builder
		b.WriteString("# agentstore statement audit (citus_audit_test.go): class, engine operation, template hash, template.\n" +
			"# Classes by agentstore.CitusLayout: single (one shard), multi (one shard per key), global (every shard),\n" +
			"# none (no distributed table). Generated by the postgres-general conformance run; regenerate with\n" +
			"#   AGENTSTORE_LONG_TESTS=1 " + citusAuditWriteEnv + "=1 go test -run 'TestConformance$/postgres-general$' .\n")
		fmt.Fprintf(&b, "# %s\n", summary)
		seen := map[string]bool{}
		var lines []string
		for _, e := range entries {
			if !seen[e.key()] {
				seen[e.key()] = true
				lines = append(lines, e.line())
			}
		}
		// A hot-path global or multi-key entry of the old list that this run
		// did not reach (a rare path: a retry, a fetch level) is kept, so the
		// check does not flake; delete the file first to drop stale entries.
		if _, err := os.Stat(citusAuditFile); err == nil {
			for k, l := range readCitusAudit(t) {
				parts := strings.SplitN(k, "\t", 3)
				if !seen[k] && (parts[0] == "global" || parts[0] == "multi") && citusHot(parts[1]) {
					lines = append(lines, l)
				}
			}
		}
		sort.Strings(lines)
		for _, l := range lines {
			b.WriteString(l + "\n")
		}
		if err := os.WriteFile(citusAuditFile, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", citusAuditFile)
		return
	}
	listed := readCitusAudit(t)
	// The hot-path operations the committed list already shows as not
	// single-key (the provider's fetches and lock-token calls, Complete by
	// id): a rarely reached statement of theirs (a released claim, a retry)
	// that a run happens to send is logged, not failed, so the check does
	// not flake; an operation that is single-key in the list fails on its
	// first statement that is not.
	knownWide := map[string]bool{}
	for k := range listed {
		parts := strings.SplitN(k, "\t", 3)
		if len(parts) == 3 && (parts[0] == "global" || parts[0] == "multi") {
			knownWide[parts[1]] = true
		}
	}
	var hotNew, otherNew []string
	for _, e := range entries {
		if _, ok := listed[e.key()]; ok {
			continue
		}
		switch {
		case citusHot(e.op) && (e.class == "global" || e.class == "multi") && !knownWide[e.op]:
			hotNew = append(hotNew, fmt.Sprintf("%s (%d×)", e.line(), a.counts[e]))
		case e.class == "global" || e.class == "multi":
			otherNew = append(otherNew, e.line())
		}
	}
	if len(otherNew) > 0 {
		t.Logf("%d global or multi-key statement(s) off the hot paths are not in %s (review, then regenerate with %s=1):\n%s",
			len(otherNew), citusAuditFile, citusAuditWriteEnv, strings.Join(otherNew, "\n"))
	}
	if len(hotNew) > 0 {
		t.Errorf("%d new statement(s) on a hot path are not single-key (Citus would send them to several or every shard); "+
			"route them by the distribution column, or review and regenerate %s with %s=1:\n%s",
			len(hotNew), citusAuditFile, citusAuditWriteEnv, strings.Join(hotNew, "\n"))
	}
}

// --- classification ---

// sqlTok is one token of a statement: kind 'i' identifier or keyword,
// 't' an agentstore table (text = base name), 's' string literal, 'n'
// number, 'p' parameter, 'x' punctuation.
type sqlTok struct {
	kind byte
	text string
}

func (k sqlTok) literal() bool { return k.kind == 's' || k.kind == 'n' || k.kind == 'p' }

// tableBases are the base names of CitusLayout, longest first (so
// orchestrator_queue is not read as a prefixed queue).
func tableBases() []string {
	var out []string
	for _, t := range agentstore.CitusLayout() {
		out = append(out, t.Table)
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

var schemaQualifier = regexp.MustCompile(`^t_[0-9a-f]{32}$`)

// tokenize splits a statement (with its arguments inlined, as GORM's
// logger gives it) into tokens. A quoted identifier that is a prefixed
// agentstore table ("p_sessions") becomes a table token; the test
// schemas' qualifiers are dropped.
func tokenize(sql string) []sqlTok {
	bases := tableBases()
	var out []sqlTok
	table := func(id string) (string, bool) {
		if strings.HasPrefix(id, "idx_") || strings.HasPrefix(id, "fk_") || strings.HasPrefix(id, "trg_") {
			return "", false
		}
		for _, b := range bases {
			if strings.HasSuffix(id, b) {
				return b, true
			}
		}
		return "", false
	}
	for i := 0; i < len(sql); {
		c := sql[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '\'':
			j := i + 1
			var b strings.Builder
			for j < len(sql) {
				if sql[j] == '\'' {
					if j+1 < len(sql) && sql[j+1] == '\'' {
						b.WriteByte('\'')
						j += 2
						continue
					}
					break
				}
				b.WriteByte(sql[j])
				j++
			}
			out = append(out, sqlTok{'s', b.String()})
			i = j + 1
		case c == '"':
			j := strings.IndexByte(sql[i+1:], '"')
			if j < 0 {
				j = len(sql) - i - 1
			}
			id := sql[i+1 : i+1+j]
			i += j + 2
			if schemaQualifier.MatchString(id) && i < len(sql) && sql[i] == '.' {
				i++ // "t_<uuid>". qualifier of the test's schema
				continue
			}
			if b, ok := table(id); ok {
				out = append(out, sqlTok{'t', b})
			} else {
				out = append(out, sqlTok{'i', id})
			}
		case c == '$' && i+1 < len(sql) && sql[i+1] >= '0' && sql[i+1] <= '9':
			j := i + 1
			for j < len(sql) && sql[j] >= '0' && sql[j] <= '9' {
				j++
			}
			out = append(out, sqlTok{'p', sql[i:j]})
			i = j
		case c == '?':
			out = append(out, sqlTok{'p', "?"})
			i++
		case c >= '0' && c <= '9':
			j := i
			for j < len(sql) && (sql[j] >= '0' && sql[j] <= '9' || sql[j] == '.') {
				j++
			}
			out = append(out, sqlTok{'n', sql[i:j]})
			i = j
		case c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			j := i
			for j < len(sql) && (sql[j] == '_' || sql[j] == '$' || sql[j] >= 'a' && sql[j] <= 'z' || sql[j] >= 'A' && sql[j] <= 'Z' || sql[j] >= '0' && sql[j] <= '9') {
				j++
			}
			id := sql[i:j]
			i = j
			if schemaQualifier.MatchString(id) && i < len(sql) && sql[i] == '.' {
				i++
				continue
			}
			if strings.EqualFold(id, "NULL") {
				out = append(out, sqlTok{'n', "NULL"})
			} else {
				out = append(out, sqlTok{'i', id})
			}
		case i+1 < len(sql) && slices.Contains([]string{"::", "<=", ">=", "<>", "!=", "||"}, sql[i:i+2]):
			out = append(out, sqlTok{'x', sql[i : i+2]})
			i += 2
		default:
			out = append(out, sqlTok{'x', string(c)})
			i++
		}
	}
	return out
}

// templateOf renders the tokens with every literal as ?, runs of literals
// ("?, ?, ?") as one, and repeated identical parenthesised groups (a
// VALUES list's rows) as one.
func templateOf(toks []sqlTok) string {
	var words []string
	for _, k := range toks {
		switch k.kind {
		case 's', 'n', 'p':
			if n := len(words); n >= 2 && words[n-1] == "," && words[n-2] == "?" {
				words = words[:n-1]
				continue
			}
			words = append(words, "?")
		case 't':
			words = append(words, "{"+k.text+"}")
		default:
			words = append(words, k.text)
		}
	}
	// collapse "(g), (g), (g)" to "(g)"
	for i := 0; i < len(words); i++ {
		if words[i] != "(" {
			continue
		}
		end := matchParen(words, i)
		if end < 0 {
			break
		}
		g := words[i : end+1]
		for end+2+len(g) <= len(words) && words[end+1] == "," && slices.Equal(words[end+2:end+2+len(g)], g) {
			words = slices.Delete(words, end+1, end+2+len(g))
		}
	}
	words = collapseRepeats(words)
	s := strings.Join(words, " ")
	for _, r := range [][2]string{{"( ", "("}, {" )", ")"}, {" ,", ","}, {" . ", "."}, {" ::", "::"}, {":: ", "::"}} {
		s = strings.ReplaceAll(s, r[0], r[1])
	}
	// gorm names each savepoint by a random number: one template for all
	return savepointName.ReplaceAllString(s, "${1}sp?")
}

// savepointName matches gorm's generated savepoint names.
var savepointName = regexp.MustCompile(`^((?:RELEASE |ROLLBACK TO )?SAVEPOINT )sp[0-9]+$`)

// collapseRepeats drops immediate repeats of a run of up to 16 words
// ("WHEN ? THEN ? WHEN ? THEN ?" -> "WHEN ? THEN ?"): a statement built
// per batch element has one template whatever the batch's size.
func collapseRepeats(words []string) []string {
	for changed := true; changed; {
		changed = false
		for n := 1; n <= 16; n++ {
			for i := 0; i+2*n <= len(words); i++ {
				for i+2*n <= len(words) && slices.Equal(words[i:i+n], words[i+n:i+2*n]) && words[i] != "(" && words[i] != ")" {
					words = slices.Delete(words, i+n, i+2*n)
					changed = true
				}
			}
		}
	}
	return words
}

// matchParen returns the index of the ")" closing words[i] ("("), -1 if none.
func matchParen(words []string, i int) int {
	d := 0
	for j := i; j < len(words); j++ {
		switch words[j] {
		case "(":
			d++
		case ")":
			d--
			if d == 0 {
				return j
			}
		}
	}
	return -1
}

// keywords that never name a table alias.
var notAlias = map[string]bool{"WHERE": true, "SET": true, "JOIN": true, "ON": true, "LEFT": true, "INNER": true, "USING": true,
	"VALUES": true, "ORDER": true, "GROUP": true, "LIMIT": true, "FOR": true, "RETURNING": true, "DEFAULT": true, "AND": true,
	"OR": true, "UNION": true, "WINDOW": true, "HAVING": true, "CROSS": true, "RIGHT": true, "FULL": true, "OFFSET": true,
	"SELECT": true, "FROM": true, "AS": true, "NATURAL": true, "LATERAL": true, "EXCEPT": true, "INTERSECT": true,
	"OVERRIDING": true}

// classifyStatement returns the statement's class under CitusLayout and
// its template.
func classifyStatement(sql string) (class, template string) {
	toks := tokenize(sql)
	template = templateOf(toks)
	if len(toks) > 0 && toks[0].kind == 'i' {
		switch strings.ToUpper(toks[0].text) {
		case "CREATE", "ALTER", "DROP", "COMMENT", "TRUNCATE", "REINDEX", "ANALYZE", "VACUUM", "DO":
			return "ddl", template
		}
	}
	layout := map[string]agentstore.CitusTable{}
	for _, t := range agentstore.CitusLayout() {
		layout[t.Table] = t
	}
	// the distributed tables and aliases of the statement
	alias := map[string]string{}
	groups := map[string]bool{}
	read := map[string]bool{} // tables the statement reads (not only inserts into)
	for i, k := range toks {
		if k.kind != 't' {
			continue
		}
		if i == 0 || !strings.EqualFold(toks[i-1].text, "INTO") {
			read[k.text] = true
		}
		lt := layout[k.text]
		if lt.Kind == agentstore.CitusDistributed {
			groups[lt.Group] = true
		}
		j := i + 1
		if j < len(toks) && toks[j].kind == 'i' && strings.EqualFold(toks[j].text, "AS") {
			j++
		}
		if j < len(toks) && toks[j].kind == 'i' && !notAlias[strings.ToUpper(toks[j].text)] {
			alias[toks[j].text] = k.text
		}
	}
	if len(groups) == 0 {
		return "none", template
	}
	// the table a column reference at toks[i] belongs to ("" unknown)
	ownerOf := func(i int) string {
		if i >= 2 && toks[i-1].text == "." {
			q := toks[i-2]
			if q.kind == 't' {
				return q.text
			}
			return alias[q.text]
		}
		return ""
	}
	// pinCol reports the group whose distribution column toks[i] is.
	pinCol := func(i int) string {
		k := toks[i]
		if k.kind != 'i' {
			return ""
		}
		col := strings.ToLower(k.text)
		owner := ownerOf(i)
		if owner != "" {
			lt := layout[owner]
			if lt.Kind == agentstore.CitusDistributed && lt.Column == col {
				return lt.Group
			}
			return ""
		}
		if i >= 1 && toks[i-1].text == "." {
			return "" // qualified by an unknown alias (a CTE or subquery)
		}
		switch col {
		case "session_id":
			if groups["session"] {
				return "session"
			}
			if groups["activity_session"] {
				return "activity_session"
			}
		case "instance_id":
			return "provider"
		case "id":
			if len(read) == 1 && read["sessions"] { // unqualified id of the one table read
				return "session"
			}
		}
		return ""
	}
	// literalAt returns the literal value at toks[i] (also CAST(lit AS t)
	// and lit::t), and the index after it.
	literalAt := func(i int) (string, int, bool) {
		if i < len(toks) && toks[i].literal() {
			return toks[i].text, i + 1, true
		}
		if i+5 < len(toks) && strings.EqualFold(toks[i].text, "CAST") && toks[i+1].text == "(" && toks[i+2].literal() &&
			strings.EqualFold(toks[i+3].text, "AS") && toks[i+5].text == ")" {
			return toks[i+2].text, i + 6, true
		}
		return "", i, false
	}
	pins := map[string]map[string]bool{}
	multi := map[string]bool{}
	pin := func(g, v string) {
		if pins[g] == nil {
			pins[g] = map[string]bool{}
		}
		pins[g][v] = true
	}
	for i := range toks {
		g := pinCol(i)
		if g == "" || i+1 >= len(toks) {
			continue
		}
		switch {
		case toks[i+1].text == "=":
			if i+2 < len(toks) && strings.EqualFold(toks[i+2].text, "ANY") {
				multi[g] = true
			} else if v, _, ok := literalAt(i + 2); ok {
				pin(g, v)
			}
		case strings.EqualFold(toks[i+1].text, "IN") && i+3 < len(toks) && toks[i+2].text == "(" && toks[i+3].literal():
			for j := i + 3; j < len(toks) && toks[j].text != ")"; j++ {
				if toks[j].literal() {
					pin(g, toks[j].text)
				}
			}
		}
	}
	// INSERT INTO t (cols) VALUES (...), ... | SELECT ...: the distribution
	// column's values
	for i := 0; i+3 < len(toks); i++ {
		if !strings.EqualFold(toks[i].text, "INSERT") || !strings.EqualFold(toks[i+1].text, "INTO") || toks[i+2].kind != 't' {
			continue
		}
		lt := layout[toks[i+2].text]
		if lt.Kind != agentstore.CitusDistributed {
			continue
		}
		j := i + 3
		if j < len(toks) && strings.EqualFold(toks[j].text, "AS") {
			j += 2
		}
		if j >= len(toks) || toks[j].text != "(" {
			continue
		}
		pos := -1
		n := 0
		for j++; j < len(toks) && toks[j].text != ")"; j++ {
			if toks[j].text == "," {
				n++
			} else if strings.EqualFold(toks[j].text, lt.Column) {
				pos = n
			}
		}
		j++
		if pos < 0 || j >= len(toks) {
			continue
		}
		switch strings.ToUpper(toks[j].text) {
		case "VALUES":
			for j++; j < len(toks) && toks[j].text == "("; {
				elems, end := splitTop(toks, j+1, ")")
				if pos < len(elems) {
					if v, next, ok := literalAt(elems[pos]); ok && next < len(toks) && (toks[next].text == "," || toks[next].text == ")" || toks[next].text == "::") {
						pin(lt.Group, v)
					} else {
						pin(lt.Group, "expr")
					}
				}
				j = end + 1
				if j < len(toks) && toks[j].text == "," {
					j++
				}
			}
		case "SELECT":
			elems, _ := splitTop(toks, j+1, "FROM")
			if pos < len(elems) {
				if v, next, ok := literalAt(elems[pos]); ok && (next >= len(toks) || toks[next].text == "," || toks[next].text == "::" ||
					strings.EqualFold(toks[next].text, "FROM") || toks[next].text == ")") {
					pin(lt.Group, v)
				}
			}
		}
	}
	class = "single"
	shards := 0
	for g := range groups {
		switch {
		case multi[g] || len(pins[g]) > 1:
			class = "multi"
			shards += 2
		case len(pins[g]) == 1:
			shards++
		default:
			return "global", template
		}
	}
	if shards > 1 {
		class = "multi"
	}
	return class, template
}

// splitTop returns the start indexes of the top-level comma-separated
// elements from toks[i] up to the closing token stop at depth 0 (")" or a
// keyword such as FROM), and the index of stop.
func splitTop(toks []sqlTok, i int, stop string) ([]int, int) {
	starts := []int{i}
	d := 0
	for j := i; j < len(toks); j++ {
		t := toks[j].text
		switch {
		case t == "(":
			d++
		case t == ")" && d > 0:
			d--
		case d == 0 && (t == stop || strings.EqualFold(t, stop)):
			return starts, j
		case d == 0 && t == ",":
			starts = append(starts, j+1)
		}
	}
	return starts, len(toks)
}
