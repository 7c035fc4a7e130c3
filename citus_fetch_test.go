package agentstore_test

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/Masterminds/semver/v3"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/internal/testkit"
	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// TestOrchFetchStatementsCitusShapes: on every dialect, with and without
// the fast paths, no statement of FetchOrchestrationItem is recursive or
// has a correlated subquery other than one pinned by instance_id to the
// instance of a table of the outer query (the form Citus pushes down to
// each shard; it refuses recursive CTEs without a distribution-column
// filter and other correlated subqueries, docs/distributed.md). The
// fetches go through every candidate level: the window, the walk (the
// window full of a locked instance's messages), the scan (the walk given
// up), each also with a capability filter.
func TestOrchFetchStatementsCitusShapes(t *testing.T) {
	t.Parallel()
	variants := statementVariants()
	filter := &duroxide.DispatcherCapabilityFilter{SupportedDuroxideVersions: []duroxide.SemverRange{
		{Min: *semver.MustParse("0.0.0"), Max: *semver.MustParse("99.0.0")}}}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			audit := &citusAudit{}
			clock := newTestClock()
			h := newHarness(t, v.d)
			st := h.New(t, append(v.opts, agentstore.WithLogger(audit), agentstore.WithClock(clock.Now))...)
			e := newPEnvOn(h, st, clock)
			fetch := func(f *duroxide.DispatcherCapabilityFilter, want string) {
				t.Helper()
				e.Enqueue(t, &duroxide.ExternalRaised{Instance: want, Name: "x", Data: "d"})
				it, err := e.P.FetchOrchestrationItem(e.Ctx, testkit.TestLock, 0, f)
				if err != nil || it == nil || it.Instance != want {
					t.Fatalf("fetch: %v, %v; want %s", it, err, want)
				}
				e.Ack(t, it, duroxide.OrchestrationAck{Metadata: testkit.RunningMeta(nil)})
			}
			e.StartInstance(t, "busy", nil)
			e.StartInstance(t, "other", nil)
			fetch(nil, "other") // the window
			fetch(filter, "other")
			// busy locked by a turn in flight, with more visible messages
			// than the window holds, ahead of other's
			e.Enqueue(t, &duroxide.ExternalRaised{Instance: "busy", Name: "x", Data: "d"})
			_ = e.Fetch(t)
			for range 12 {
				e.Enqueue(t, &duroxide.ExternalRaised{Instance: "busy", Name: "x", Data: "d"})
			}
			fetch(nil, "other") // the walk
			fetch(filter, "other")
			// the walk's reads full of future messages of other instances
			// (ids before busy and other): it gives up, the scan decides
			oq := st.Table(models.TableOrchestratorQueue)
			future := strconv.FormatInt(clock.Now().UnixMilli()+86_400_000, 10)
			var rows []string
			for i := range 1100 {
				rows = append(rows, fmt.Sprintf("('a-%04d', '{}', %s, 0, 0)", i, future))
			}
			e.exec(t, `INSERT INTO `+oq+` (instance_id, work_item, visible_at, created_at, attempt_count) VALUES `+strings.Join(rows, ", "))
			fetch(nil, "other") // the scan
			fetch(filter, "other")

			audit.mu.Lock()
			defer audit.mu.Unlock()
			seen := 0
			for en, n := range audit.counts {
				if !strings.HasSuffix(en.op, ".FetchOrchestrationItem") {
					continue
				}
				seen += n
				if why := citusFetchShapeProblem(en.template); why != "" {
					t.Errorf("FetchOrchestrationItem sent %s (%d times): %s", why, n, en.template)
				}
			}
			if seen == 0 {
				t.Fatal("the audit saw no statement of FetchOrchestrationItem")
			}
		})
	}
}

// citusShapeTok splits a statement template (citusAudit's: tables as
// {name}) into table names, identifiers (possibly qualified),
// parentheses and other symbols.
var citusShapeTok = regexp.MustCompile(`\{\w+\}(?:\.\w+)?|\w+(?:\.(?:\w+|\*))?|[()]|[^\s\w(){}]+`)

// citusFetchShapeProblem names what Citus would refuse in the statement
// template: WITH RECURSIVE, or a subquery referring to an alias of an
// enclosing query unless as alias.instance_id in an equality, the alias a
// table (not a CTE or derived table: Citus pushes down a correlated
// subquery only with the distributed table it joins by the distribution
// column); "" when there is none. Unqualified column names are taken as
// the subquery's own (every correlated reference of the engine is
// qualified).
func citusFetchShapeProblem(template string) string {
	if strings.Contains(strings.ToUpper(template), "RECURSIVE") {
		return "a recursive query"
	}
	toks := citusShapeTok.FindAllString(template, -1)
	// tableAlias: alias -> bound to a table ({name} alias, {name} AS alias)
	tableAlias := map[string]bool{}
	for i, tk := range toks {
		if !strings.HasPrefix(tk, "{") || strings.Contains(tk, ".") {
			continue
		}
		tableAlias[tk] = true
		j := i + 1
		if j < len(toks) && strings.EqualFold(toks[j], "AS") {
			j++
		}
		if j < len(toks) && citusIdent(toks[j]) {
			tableAlias[toks[j]] = true
		}
	}
	var stack []int // open parentheses
	for i, tk := range toks {
		switch tk {
		case "(":
			stack = append(stack, i)
		case ")":
			if len(stack) == 0 {
				return ""
			}
			open := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if open+1 < i && (strings.EqualFold(toks[open+1], "SELECT") || strings.EqualFold(toks[open+1], "WITH")) {
				if why := citusOuterRefs(toks, open+1, i, tableAlias); why != "" {
					return why
				}
			}
		}
	}
	return ""
}

// citusOuterRefs checks the subquery toks[from:to]: every qualified
// reference to an alias it does not define must be alias.instance_id, next
// to "=", with alias a table's.
func citusOuterRefs(toks []string, from, to int, tableAlias map[string]bool) string {
	defined := map[string]bool{}
	for i := from; i < to; i++ {
		tk := toks[i]
		switch {
		case strings.HasPrefix(tk, "{") && !strings.Contains(tk, "."):
			defined[tk] = true
			j := i + 1
			if j < to && strings.EqualFold(toks[j], "AS") {
				j++
			}
			if j < to && citusIdent(toks[j]) {
				defined[toks[j]] = true
			}
		case citusIdent(tk):
			// a derived table's or CTE's name, a CTE read by name, a column alias
			prev := ""
			if i > from {
				prev = strings.ToUpper(toks[i-1])
			}
			if prev == ")" || prev == "AS" || prev == "FROM" || prev == "JOIN" || prev == "," || i == from+1 {
				defined[tk] = true
			}
		}
	}
	for i := from; i < to; i++ {
		alias, col, ok := strings.Cut(toks[i], ".")
		if !ok || defined[alias] {
			continue
		}
		if _, err := strconv.Atoi(alias); err == nil {
			continue // a number
		}
		eq := (i > from && toks[i-1] == "=") || (i+1 < to && toks[i+1] == "=")
		if col != "instance_id" || !eq || !tableAlias[alias] {
			return "a correlated subquery on " + toks[i] + " (" + strings.Join(toks[from:to], " ") + ")"
		}
	}
	return ""
}

// citusIdent reports whether tk is a plain identifier (not a keyword the
// templates use in those positions, not qualified).
func citusIdent(tk string) bool {
	if strings.ContainsAny(tk, ".{") || tk == "" {
		return false
	}
	switch strings.ToUpper(tk) {
	case "SELECT", "WHERE", "ON", "JOIN", "LEFT", "INNER", "GROUP", "ORDER", "LIMIT", "UNION", "AS", "MATERIALIZED", "FOR", "SET", "USING", "NOT", "WITH":
		return false
	}
	c := tk[0]
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
}

// TestCitusFetchShapeChecker: the checker finds what it must, on the
// statement forms the fetch had before (a recursive walk, a lock check
// correlated to a derived table, a head probe correlated to a CTE), and
// accepts the pushed-down form and uncorrelated subqueries.
func TestCitusFetchShapeChecker(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		sql string
		bad bool
	}{
		{`WITH RECURSIVE ids (iid, n) AS (SELECT ? UNION ALL SELECT iid FROM ids) SELECT iid FROM ids`, true},
		{`SELECT u.instance_id FROM (SELECT x.instance_id FROM (SELECT q.instance_id FROM {orchestrator_queue} q LIMIT ?) x WHERE NOT EXISTS` +
			` (SELECT ? FROM {instance_locks} il WHERE il.instance_id = x.instance_id)) u`, true},
		{`WITH ids AS (SELECT q.instance_id AS iid FROM {orchestrator_queue} q) SELECT (SELECT q.id FROM {orchestrator_queue} q WHERE q.instance_id = ids.iid) FROM ids`, true},
		{`SELECT q.instance_id FROM {orchestrator_queue} q WHERE NOT EXISTS (SELECT ? FROM {instance_locks} il WHERE il.instance_id = q.instance_id AND il.locked_until > ?)`, false},
		{`SELECT q.instance_id FROM {orchestrator_queue} q WHERE NOT EXISTS (SELECT ? FROM {instance_locks} il WHERE il.locked_until > q.visible_at)`, true},
		{`WITH w AS (SELECT q.id, q.instance_id FROM {orchestrator_queue} q LIMIT ?) SELECT w.instance_id FROM w WHERE w.instance_id NOT IN` +
			` (SELECT il.instance_id FROM {instance_locks} il WHERE il.instance_id IN (SELECT instance_id FROM w))`, false},
	} {
		if got := citusFetchShapeProblem(c.sql) != ""; got != c.bad {
			t.Errorf("%s: flagged %v, want %v (%s)", c.sql, got, c.bad, citusFetchShapeProblem(c.sql))
		}
	}
}

// TestOrchWalkOldestAcrossReads: the walk (the window full of a locked
// instance's messages) reads the queue in instance order, 256 entries at
// a time; the oldest eligible message wins even when its instance comes
// after the read that found another eligible one (a, read first, is
// younger than y, read after busy's 512 messages), and the reads skip
// busy's backlog after its first entries.
func TestOrchWalkOldestAcrossReads(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, h *harness) {
		e := newPEnv(t, h)
		for _, inst := range []string{"a", "busy", "y"} {
			e.StartInstance(t, inst, nil)
		}
		e.Enqueue(t, &duroxide.ExternalRaised{Instance: "busy", Name: "x", Data: "d"})
		_ = e.Fetch(t) // busy stays locked
		e.Enqueue(t, &duroxide.ExternalRaised{Instance: "busy", Name: "x", Data: "d"})
		oq := e.st.Table(models.TableOrchestratorQueue)
		for range 9 { // 512 unclaimed messages of busy
			e.exec(t, `INSERT INTO `+oq+` (instance_id, work_item, visible_at, created_at, attempt_count)`+
				` SELECT instance_id, work_item, visible_at, created_at, 0 FROM `+oq+` WHERE instance_id = 'busy' AND lock_token IS NULL`)
		}
		e.Clock.Advance(time.Millisecond)
		e.Enqueue(t, &duroxide.ExternalRaised{Instance: "y", Name: "x", Data: "d"})
		e.Clock.Advance(time.Millisecond)
		e.Enqueue(t, &duroxide.ExternalRaised{Instance: "a", Name: "x", Data: "d"})
		for _, want := range []string{"y", "a"} {
			it := e.Fetch(t)
			if it.Instance != want {
				t.Fatalf("fetched %s, want %s (the oldest eligible message's instance)", it.Instance, want)
			}
			e.Ack(t, it, duroxide.OrchestrationAck{Metadata: testkit.RunningMeta(nil)})
		}
		e.FetchNone(t)
	})
}
