package agentstore_test

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// TestWorkerFetchStatementsCitusShapes: on the general path (PostgreSQL
// with its fast paths switched off: the route of a row-distributed
// deployment, docs/distributed.md), every
// statement FetchWorkItem sends is one Citus routes: a statement holding
// row locks on a distributed table (FOR UPDATE, UPDATE, DELETE) pins its
// distribution column to one value (single-key under CitusLayout), no
// statement joins tables of different co-location groups (the worker
// queue by instance_id, activity_sessions by session_id), and none has a
// recursive CTE or a correlated subquery other than one pinned by
// instance_id (citusFetchShapeProblem), and none is multi-key (an
// activity session's row is read by its session_id). The fetches take plain, tagged
// and session-bound items, with and without a session config and tag
// filters, a session held by another owner (also beside a free one in
// one page of candidates), and concurrent fetches (the
// coalesced claim of several attempts). The PostgreSQL fast path and the
// SQLite and MariaDB claims are the single-node claim (FOR UPDATE SKIP
// LOCKED over the queue) and are not checked.
func TestWorkerFetchStatementsCitusShapes(t *testing.T) {
	t.Parallel()
	for _, v := range statementVariants() {
		t.Run(v.name, func(t *testing.T) {
			if v.name != "postgres-general" {
				t.Skip("the single-node claim (FOR UPDATE SKIP LOCKED over the queue): the fast path, and SQLite's and MariaDB's claim")
			}
			audit, e := auditedPEnv(t, v)
			p := e.P
			gpu := "gpu"
			s1, s2 := "s1", "s2"
			enqueue := func(input string, tag, session *string) {
				t.Helper()
				if err := p.EnqueueForWorker(e.Ctx, &duroxide.ActivityExecute{Instance: "i-" + input, ExecutionID: 1, ID: 1, Name: "a",
					Input: input, Tag: tag, SessionID: session}); err != nil {
					t.Fatal(err)
				}
			}
			fetch := func(session *duroxide.SessionFetchConfig, tags duroxide.TagFilter, want string) {
				t.Helper()
				l, err := p.FetchWorkItem(e.Ctx, time.Minute, 0, session, tags)
				if err != nil {
					t.Fatalf("fetch: %v", err)
				}
				got := ""
				if l != nil {
					got = l.Item.(*duroxide.ActivityExecute).Input
					if err := p.AckWorkItem(e.Ctx, l.LockToken, nil); err != nil {
						t.Fatalf("ack %s: %v", got, err)
					}
				}
				if got != want {
					t.Fatalf("fetched %q, want %q", got, want)
				}
			}
			ownerA := &duroxide.SessionFetchConfig{OwnerID: "A", LockTimeout: time.Hour}
			ownerB := &duroxide.SessionFetchConfig{OwnerID: "B", LockTimeout: time.Hour}
			def, tagged := duroxide.TagFilter{}, duroxide.TagFilter{Mode: duroxide.TagTags, Tags: []string{gpu}}
			both := duroxide.TagFilter{Mode: duroxide.TagDefaultAnd, Tags: []string{gpu}}

			enqueue("s1a", nil, &s1)
			enqueue("u1", nil, nil)
			enqueue("g1", &gpu, nil)
			enqueue("s1b", nil, &s1)
			enqueue("s2a", &gpu, &s2)
			enqueue("u2", nil, nil)
			enqueue("g2", &gpu, nil)
			fetch(nil, def, "u1")        // plain, untagged
			fetch(nil, tagged, "g1")     // plain, tagged
			fetch(ownerA, def, "s1a")    // a free session: A claims it
			fetch(ownerB, def, "u2")     // s1 held by A: passed over
			fetch(ownerA, def, "s1b")    // A's own session
			fetch(ownerB, tagged, "s2a") // session config and tag filter
			fetch(ownerB, both, "g2")
			fetch(nil, duroxide.TagFilter{Mode: duroxide.TagAny}, "")
			fetch(ownerA, def, "")
			// a page naming two sessions, the first held by another owner:
			// each session's row is read by its key
			s3, s4 := "s3", "s4"
			enqueue("s3a", nil, &s3)
			fetch(ownerA, def, "s3a")
			enqueue("s3b", nil, &s3)
			enqueue("s4a", nil, &s4)
			fetch(ownerB, def, "s4a")
			fetch(ownerA, def, "s3b")

			// concurrent fetches: coalesced claims of several attempts
			for i := range 12 {
				enqueue(fmt.Sprintf("c%02d", i), nil, nil)
			}
			var wg sync.WaitGroup
			var mu sync.Mutex
			got := map[string]bool{}
			for range 6 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 2 {
						l, err := p.FetchWorkItem(e.Ctx, time.Minute, time.Second, nil, def)
						if err != nil || l == nil {
							t.Errorf("concurrent fetch: %v, %v", l, err)
							return
						}
						mu.Lock()
						got[l.Item.(*duroxide.ActivityExecute).Input] = true
						mu.Unlock()
						if err := p.AckWorkItem(e.Ctx, l.LockToken, nil); err != nil {
							t.Errorf("ack: %v", err)
						}
					}
				}()
			}
			wg.Wait()
			if len(got) != 12 {
				t.Fatalf("concurrent fetches took %d distinct items, want 12", len(got))
			}

			seen := 0
			for en, n := range audit.sent(".FetchWorkItem") {
				seen += n
				if en.class == "multi" {
					t.Errorf("FetchWorkItem sent a multi-key statement (%d times): %s", n, en.template)
				}
				if why := citusWorkerFetchProblem(en.class, en.template); why != "" {
					t.Errorf("FetchWorkItem sent %s (%d times): %s", why, n, en.template)
				}
			}
			if seen == 0 {
				t.Fatal("the audit saw no statement of FetchWorkItem")
			}
		})
	}
}

// citusRowLocking matches a statement that holds row locks.
var citusRowLocking = regexp.MustCompile(`(?i)\b(FOR UPDATE|FOR SHARE|FOR NO KEY UPDATE|UPDATE|DELETE)\b`)

// citusWorkerFetchProblem names what Citus would not route in a statement
// of the worker fetch (class and template as citusAudit records them): a
// row-locking statement that is not single-key, a join of tables of
// different co-location groups, a recursive CTE or a correlated subquery
// (citusFetchShapeProblem); "" when there is none.
func citusWorkerFetchProblem(class, template string) string {
	if citusRowLocking.MatchString(template) && class != "single" && class != "none" {
		return "a " + class + " statement holding row locks"
	}
	if why := citusCrossGroupJoin(template); why != "" {
		return why
	}
	return citusFetchShapeProblem(template)
}

// citusCrossGroupJoin reports a query level (the statement, a
// parenthesised subquery, each branch of a UNION) whose FROM and JOIN
// lists read distributed tables of different co-location groups.
func citusCrossGroupJoin(template string) string {
	group := map[string]string{}
	for _, tb := range agentstore.CitusLayout() {
		if tb.Kind == agentstore.CitusDistributed {
			group["{"+tb.Table+"}"] = tb.Group
		}
	}
	toks := citusShapeTok.FindAllString(template, -1)
	scopes := []int{0} // the current query level of each parenthesis depth
	nextScope := 1
	groups := map[int]map[string]bool{}
	for _, tk := range toks {
		switch {
		case tk == "(":
			scopes = append(scopes, nextScope)
			nextScope++
		case tk == ")":
			if len(scopes) > 1 {
				scopes = scopes[:len(scopes)-1]
			}
		case strings.EqualFold(tk, "UNION") || strings.EqualFold(tk, "INTERSECT") || strings.EqualFold(tk, "EXCEPT"):
			scopes[len(scopes)-1] = nextScope
			nextScope++
		default:
			g, ok := group[tk]
			if !ok {
				continue
			}
			s := scopes[len(scopes)-1]
			if groups[s] == nil {
				groups[s] = map[string]bool{}
			}
			groups[s][g] = true
			if len(groups[s]) > 1 {
				return "a join of tables of different co-location groups"
			}
		}
	}
	return ""
}

// TestCitusWorkerFetchChecker: the checker flags the worker fetch's
// single-node forms (the claim over the whole queue, the join of the
// queue and the sessions, the session check correlated by session_id) and
// accepts the routed ones.
func TestCitusWorkerFetchChecker(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		sql string
		bad bool
	}{
		{`UPDATE "worker_queue" SET lock_token = 'x' WHERE id = (SELECT cid FROM (SELECT q.id AS cid FROM "worker_queue" q WHERE q.visible_at <= 1 ORDER BY q.id LIMIT 1 FOR UPDATE SKIP LOCKED) AS c0)`, true},
		{`SELECT q.id, q.session_id FROM "worker_queue" q LEFT JOIN "activity_sessions" s ON s.session_id = q.session_id AND s.locked_until > 1 WHERE q.visible_at <= 1`, true},
		{`SELECT q.id FROM "worker_queue" q WHERE q.session_id IS NULL OR NOT EXISTS (SELECT 1 FROM "activity_sessions" s WHERE s.session_id = q.session_id)`, true},
		{`UPDATE "worker_queue" SET lock_token = 'x' WHERE id = 5`, true},
		{`UPDATE "worker_queue" SET lock_token = 'x' WHERE instance_id = 'i' AND id = 5 AND (lock_token IS NULL OR locked_until <= 1)`, false},
		{`SELECT q.id, q.instance_id FROM "worker_queue" q WHERE q.visible_at <= 1 ORDER BY q.id LIMIT 5`, false},
		{`SELECT session_id, worker_id, locked_until FROM "activity_sessions" WHERE session_id IN ('a', 'b')`, false},
		{`SELECT MIN(x.t) FROM (SELECT MIN(visible_at) AS t FROM "worker_queue" UNION ALL SELECT MIN(locked_until) AS t FROM "activity_sessions") x`, false},
	} {
		class, template := classifyStatement(c.sql)
		if got := citusWorkerFetchProblem(class, template) != ""; got != c.bad {
			t.Errorf("%s: flagged %v, want %v (%s)", c.sql, got, c.bad, citusWorkerFetchProblem(class, template))
		}
	}
}

// TestForgedLeaseTokensSendNoStatement: a lease token whose stored part
// is not of the form every build hands out ("lock_" and a UUID: the
// suite's forged tokens, a mangled one) fails ack, abandon and renew of
// orchestration and work items with ErrInvalidLockToken without a
// statement (a lookup by token alone would read every shard of a
// distributed queue), with and without the instance part; a genuine
// token of the old form still reaches the database (it is looked up).
func TestForgedLeaseTokensSendNoStatement(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, h *harness) {
		audit := &citusAudit{dquoted: h.Dialect == agentstore.SQLite}
		st := h.New(t, agentstore.WithLogger(audit))
		p := st.Provider()
		ctx := t.Context()
		forged := []string{"lock_nope", "nope", "lock_nope.5", "lock_x~dy1h.5", "lock_0000.aQ", "lock_" + strings.Repeat("z", 36) + ".7",
			"LOCK_00000000-0000-0000-0000-000000000000.5"}
		for _, tok := range forged {
			for name, err := range map[string]error{
				"AckWorkItem":                p.AckWorkItem(ctx, tok, nil),
				"AbandonWorkItem":            p.AbandonWorkItem(ctx, tok, 0, false),
				"RenewWorkItemLock":          p.RenewWorkItemLock(ctx, tok, time.Minute),
				"AckOrchestrationItem":       p.AckOrchestrationItem(ctx, tok, duroxide.OrchestrationAck{ExecutionID: 1}),
				"AbandonOrchestrationItem":   p.AbandonOrchestrationItem(ctx, tok, 0, false),
				"RenewOrchestrationItemLock": p.RenewOrchestrationItemLock(ctx, tok, time.Minute),
			} {
				if !errors.Is(err, agentstore.ErrInvalidLockToken) {
					t.Errorf("%s(%q): %v, want ErrInvalidLockToken", name, tok, err)
				}
			}
		}
		opsSeen := func() map[string]int {
			audit.mu.Lock()
			defer audit.mu.Unlock()
			out := map[string]int{}
			for en, n := range audit.counts {
				out[en.op[strings.LastIndexByte(en.op, '.')+1:]] += n
			}
			return out
		}
		for op, n := range opsSeen() {
			if strings.Contains(op, "Ack") || strings.Contains(op, "Abandon") || strings.Contains(op, "Renew") {
				t.Errorf("%s sent %d statement(s) for forged tokens", op, n)
			}
		}
		// a token of the old form (no instance part) that some build could
		// have handed out is still looked up
		old := "lock_00000000-0000-4000-8000-000000000000"
		if err := p.RenewOrchestrationItemLock(ctx, old, time.Minute); !errors.Is(err, agentstore.ErrInvalidLockToken) {
			t.Fatalf("renew with an unknown old-form token: %v", err)
		}
		if err := p.RenewWorkItemLock(ctx, old+".5", time.Minute); !errors.Is(err, agentstore.ErrInvalidLockToken) {
			t.Fatalf("renew with an unknown old-form worker token: %v", err)
		}
		seen := opsSeen()
		if seen["RenewOrchestrationItemLock"] == 0 || seen["RenewWorkItemLock"] == 0 {
			t.Fatalf("old-form tokens sent no statement: %v", seen)
		}
	})
}
