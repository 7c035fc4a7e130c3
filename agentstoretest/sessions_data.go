package agentstoretest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo"
)

// sessionsDataTests are the Sessions area's tests of this file.
func sessionsDataTests() []test {
	return tests(
		test{"SessionsPlansKeepStatusAndHistory", testSessionsPlansKeepStatusAndHistory},
		test{"SessionsTodosReplaceByID", testSessionsTodosReplaceByID},
		test{"SessionsCorruptRowsSurfaceAndSurvive", testSessionsCorruptRowsSurfaceAndSurvive},
		test{"SessionsCleanupExpired", testSessionsCleanupExpired},
		test{"SessionsDeleteCascades", testSessionsDeleteCascades},
		test{"SessionsListKeysetPaging", testSessionsListKeysetPaging},
		test{"SessionsInputValidation", testSessionsInputValidation},
		test{"SessionsCustomPrefix", testSessionsCustomPrefix},
		test{"SessionsCleanupConcurrentSweepers", testSessionsCleanupConcurrentSweepers},
	)
}

// testSessionsPlansKeepStatusAndHistory: plans keep their status through
// Save and Load: a completed plan is no longer current, a dropped draft is
// recorded as cancelled, entering a new plan cancels the active one; Plans
// returns the history with statuses and timestamps; the schema itself
// refuses a second active plan.
func testSessionsPlansKeepStatusAndHistory(t *testing.T, h *harness) {
	st, clock := newSessionsStore(t, h)
	r := st.Sessions()
	ctx := context.Background()
	s := repo.NewSession()
	p1 := s.EnterPlanMode("first", "1. a", clock.Now())
	mustSave(t, r, s)

	got := mustLoad(t, r, s.ID)
	if got.CurrentPlan == nil || got.CurrentPlan.ID != p1.ID || !got.IsInPlanMode() {
		t.Fatalf("draft plan not current: %+v", got.CurrentPlan)
	}
	clock.Advance(time.Second)
	got.CurrentPlan.Approve(clock.Now())
	got.CurrentPlan.StartExecution(clock.Now())
	got.CurrentPlan.Complete(clock.Now())
	mustSave(t, r, got)
	after := mustLoad(t, r, s.ID)
	if after.CurrentPlan != nil {
		t.Fatalf("completed plan came back as current: %+v", after.CurrentPlan)
	}

	// A new draft, then dropped without a terminal status: recorded as cancelled.
	clock.Advance(time.Second)
	p2 := after.EnterPlanMode("second", "2. b", clock.Now())
	mustSave(t, r, after)
	after.CurrentPlan = nil
	mustSave(t, r, after)
	if cur := mustLoad(t, r, s.ID).CurrentPlan; cur != nil {
		t.Fatalf("dropped draft came back: %+v", cur)
	}
	// Replacing an active plan cancels the old one (one active plan per session).
	clock.Advance(time.Second)
	p3 := after.EnterPlanMode("third", "3. c", clock.Now())
	mustSave(t, r, after)
	clock.Advance(time.Second)
	p4 := after.EnterPlanMode("fourth", "4. d", clock.Now())
	mustSave(t, r, after)
	cur := mustLoad(t, r, s.ID).CurrentPlan
	if cur == nil || cur.ID != p4.ID || cur.Status != repo.PlanDraft {
		t.Fatalf("current = %+v, want the fourth plan", cur)
	}

	hist, err := r.Plans(ctx, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	type ps struct {
		id uuid.UUID
		st repo.PlanStatus
	}
	var gotH []ps
	for _, p := range hist {
		gotH = append(gotH, ps{p.ID, p.Status})
	}
	wantH := []ps{{p1.ID, repo.PlanCompleted}, {p2.ID, repo.PlanCancelled}, {p3.ID, repo.PlanCancelled}, {p4.ID, repo.PlanDraft}}
	if !slices.Equal(gotH, wantH) {
		t.Fatalf("plan history = %+v, want %+v", gotH, wantH)
	}
	if hist[0].CompletedAt == nil || hist[0].ApprovedAt == nil || hist[0].StartedAt == nil {
		t.Fatalf("plan timestamps lost: %+v", hist[0])
	}
	// The database itself refuses a second active plan.
	// white-box: the API never writes one (it cancels the old plan), so
	// the schema's constraint is tried by a direct insert.
	err = h.ops(t).Insert(ctx, st, models.TablePlans, Row{"id": uuid.New(), "session_id": s.ID, "content": "x", "status": "executing", "created_at": clock.Now()})
	if err == nil {
		t.Fatal("second active plan accepted by the schema")
	}
}

// testSessionsTodosReplaceByID: saving todos replaces the list by id: kept
// todos keep their id and creation time and take their new status, dropped
// ones go, new ones are added, order follows the list; SetTodos does the
// same and bumps the version; a todo id of another session is ErrConflict
// and overwrites nothing.
func testSessionsTodosReplaceByID(t *testing.T, h *harness) {
	st, clock := newSessionsStore(t, h)
	r := st.Sessions()
	ctx := context.Background()
	s := repo.NewSession()
	s.Todos = []repo.TodoItem{{Content: "a", ActiveForm: "doing a"}, {Content: "b", ActiveForm: "doing b"}, {Content: "c", ActiveForm: "doing c"}}
	mustSave(t, r, s)
	idA, idB := s.Todos[0].ID, s.Todos[1].ID
	createdA := s.Todos[0].CreatedAt

	clock.Advance(time.Minute)
	got := mustLoad(t, r, s.ID)
	got.Todos[0].Start(clock.Now())
	got.Todos[1].Complete(clock.Now())
	// Drop c, add d, reorder: b first.
	got.Todos = []repo.TodoItem{got.Todos[1], got.Todos[0], {Content: "d", ActiveForm: "doing d", Status: "done"}}
	mustSave(t, r, got)
	again := mustLoad(t, r, s.ID)
	if len(again.Todos) != 3 || again.Todos[0].ID != idB || again.Todos[1].ID != idA || again.Todos[2].Content != "d" {
		t.Fatalf("todos = %+v", again.Todos)
	}
	if again.Todos[1].Status != repo.TodoInProgress || again.Todos[1].StartedAt == nil || !again.Todos[1].CreatedAt.Equal(createdA) ||
		again.Todos[0].Status != repo.TodoCompleted || again.Todos[2].Status != repo.TodoCompleted {
		t.Fatalf("todo state lost: %+v", again.Todos)
	}

	// SetTodos: same semantics, bumps the version.
	out, err := r.SetTodos(ctx, s.ID, []repo.TodoItem{{ID: idA, Content: "a2", ActiveForm: "doing a2"}})
	if err != nil || len(out) != 1 || out[0].ID != idA {
		t.Fatalf("SetTodos = %+v, %v", out, err)
	}
	final := mustLoad(t, r, s.ID)
	if len(final.Todos) != 1 || final.Todos[0].Content != "a2" || final.Version != again.Version+1 {
		t.Fatalf("after SetTodos: %+v version %d", final.Todos, final.Version)
	}
	// A todo id of another session is refused, not hijacked.
	other := repo.NewSession()
	mustSave(t, r, other)
	if _, err := r.SetTodos(ctx, other.ID, []repo.TodoItem{{ID: idA, Content: "steal", ActiveForm: "x"}}); !errors.Is(err, agentstore.ErrConflict) {
		t.Fatalf("foreign todo id = %v, want ErrConflict", err)
	}
	if mustLoad(t, r, s.ID).Todos[0].Content != "a2" {
		t.Fatal("foreign SetTodos overwrote a todo")
	}
}

// testSessionsCorruptRowsSurfaceAndSurvive: rows the API would not write
// (unknown role, usage of the wrong shape, content that is not JSON on
// SQLite, unknown todo status, session state or plan status) make Load fail
// with a CorruptRowError naming table, row and column; later saves from
// older copies neither delete nor rewrite them; the messages around a bad
// row still load; PostgreSQL refuses invalid JSON content.
func testSessionsCorruptRowsSurfaceAndSurvive(t *testing.T, h *harness) {
	st, _ := newSessionsStore(t, h)
	r := st.Sessions()
	ctx := context.Background()
	s := repo.NewSession()
	s.AddMessage(textMsg("m1", repo.RoleUser, "1"))
	s.AddMessage(textMsg("m2", repo.RoleAssistant, "2"))
	s.AddMessage(textMsg("m3", repo.RoleUser, "3"))
	s.Todos = []repo.TodoItem{{Content: "keep me", ActiveForm: "k"}, {Content: "other", ActiveForm: "o"}}
	mustSave(t, r, s)
	copyBefore := mustLoad(t, r, s.ID)

	expectCorrupt := func(table, rowID, column string) {
		t.Helper()
		_, err := r.Load(ctx, s.ID)
		var ce *agentstore.CorruptRowError
		if !errors.As(err, &ce) || !errors.Is(err, agentstore.ErrCorruptRow) {
			t.Fatalf("Load = %v, want a CorruptRowError", err)
		}
		if ce.Table != table || ce.RowID != rowID || ce.Column != column {
			t.Fatalf("corrupt row = %s/%s/%s, want %s/%s/%s", ce.Table, ce.RowID, ce.Column, table, rowID, column)
		}
	}
	// Direct writes below only plant values the API refuses to write, and
	// repair them; every check goes through Load.
	msg := func(seq int) Row { return Row{"session_id": s.ID, "seq": seq} }
	set := func(table string, where, values Row) { t.Helper(); h.update(t, st, table, where, values) }
	// An unknown role (e.g. written by a newer version).
	set(models.TableMessages, msg(2), Row{"role": "developer"})
	expectCorrupt("messages", s.ID.String()+"/2", "role")
	// A later save from an older copy neither deletes nor rewrites it.
	copyBefore.AddMessage(textMsg("m4", repo.RoleAssistant, "4"))
	mustSave(t, r, copyBefore)
	// The row is still there and still corrupt (a rewrite would have
	// stored m2's role), and the messages around it are m1, m3 and m4:
	// four message rows, the corrupt one kept.
	expectCorrupt("messages", s.ID.String()+"/2", "role")
	if head := mustLoad(t, r, s.ID, repo.LoadOptions{BeforeSeq: 2}); !slices.Equal(msgIDs(head.Messages), []string{"m1"}) {
		t.Fatalf("head = %v", msgIDs(head.Messages))
	}
	// The tail without the bad row still loads.
	if tail := mustLoad(t, r, s.ID, repo.LoadOptions{AfterSeq: 2}); !slices.Equal(msgIDs(tail.Messages), []string{"m3", "m4"}) {
		t.Fatalf("tail = %v", msgIDs(tail.Messages))
	}
	set(models.TableMessages, msg(2), Row{"role": "assistant"})

	// Usage of the wrong shape (valid JSON, so it is storable everywhere).
	set(models.TableMessages, msg(3), Row{"usage": `{"input_tokens":"many"}`})
	expectCorrupt("messages", s.ID.String()+"/3", "usage")
	set(models.TableMessages, msg(3), Row{"usage": nil})

	// Content that is not JSON: a database without JSON validation stores
	// it, one with it (ValidatesJSON) refuses it.
	err := h.ops(t).Update(ctx, st, models.TableMessages, msg(1), Row{"content": "{not json"})
	if !h.ops(t).ValidatesJSON() {
		if err != nil {
			t.Fatal(err)
		}
		expectCorrupt("messages", s.ID.String()+"/1", "content")
		set(models.TableMessages, msg(1), Row{"content": "[]"})
	} else if err == nil {
		t.Fatal("a database that validates JSON accepted invalid JSON content")
	}

	// An unknown todo status: Load fails, and replacing the todos keeps the row.
	badTodo := s.Todos[0].ID
	set(models.TableTodos, Row{"id": badTodo}, Row{"status": "blocked"})
	expectCorrupt("todos", badTodo.String(), "status")
	if _, err := r.SetTodos(ctx, s.ID, []repo.TodoItem{{Content: "new", ActiveForm: "n"}}); err != nil {
		t.Fatal(err)
	}
	// Neither deleted nor rewritten: Load still fails on that row.
	expectCorrupt("todos", badTodo.String(), "status")
	set(models.TableTodos, Row{"id": badTodo}, Row{"status": "pending"})

	// An unknown session state and plan status.
	set(models.TableSessions, Row{"id": s.ID}, Row{"state": "paused"})
	expectCorrupt("sessions", s.ID.String(), "state")
	set(models.TableSessions, Row{"id": s.ID}, Row{"state": "active"})
	planID := uuid.New()
	h.insert(t, st, models.TablePlans, Row{"id": planID, "session_id": s.ID, "content": "p", "status": "someday", "created_at": time.Now().UTC()})
	expectCorrupt("plans", planID.String(), "status")
	set(models.TablePlans, Row{"id": planID}, Row{"status": "completed"})
	if got := mustLoad(t, r, s.ID); len(got.Messages) != 4 || len(got.Todos) != 2 {
		t.Fatalf("after repair: %d messages %d todos", len(got.Messages), len(got.Todos))
	}
}

// testSessionsCleanupExpired: CleanupExpired deletes the expired sessions
// in DELETE batches of the given size and their child sessions with them
// (one more DELETE per level of children that has any), keeps
// sessions without TTL or not yet expired, and reports how many it deleted.
func testSessionsCleanupExpired(t *testing.T, h *harness) {
	rec := &stmtRecorder{}
	clock := newTestClock()
	st := h.New(t, withClock(clock.Now), withStatements(rec))
	r := st.Sessions()
	ctx := context.Background()
	now := clock.Now()
	var expired, kept []uuid.UUID
	for i := range 7 {
		s := repo.NewSession()
		e := now.Add(time.Duration(i+1) * time.Minute)
		s.ExpiresAt = &e
		s.AddMessage(textMsg("m", repo.RoleUser, "x"))
		mustSave(t, r, s)
		expired = append(expired, s.ID)
	}
	child := repo.NewSubagentSession(expired[0], "helper", "child of an expiring session")
	mustSave(t, r, child)
	noTTL := repo.NewSession()
	mustSave(t, r, noTTL)
	later := repo.NewSession()
	e := now.Add(48 * time.Hour)
	later.ExpiresAt = &e
	mustSave(t, r, later)
	kept = append(kept, noTTL.ID, later.ID)
	// Idle for a year: a session without TTL must still survive.
	clock.Advance(24 * time.Hour)

	rec.record()
	n, err := r.CleanupExpired(ctx, 3)
	stmts := rec.stop()
	if err != nil || n != 7 {
		t.Fatalf("CleanupExpired = %d, %v; want 7", n, err)
	}
	deletes := 0
	for _, s := range stmts {
		if s.Delete {
			deletes++
			if s.Rows > 3 {
				t.Fatalf("a batch deleted %d rows (batch size 3)", s.Rows)
			}
		}
	}
	// Three batches, and one DELETE of the child below the first (the
	// sessions below a deleted one go with it, a DELETE per level that has
	// any: parent_id is no foreign key since V13).
	if deletes != 4 {
		t.Fatalf("%d delete statements, want 3 batches and the child's", deletes)
	}
	for _, id := range append(expired, child.ID) {
		if _, err := r.Load(ctx, id); !errors.Is(err, agentstore.ErrNotFound) {
			t.Fatalf("expired session %s: %v", id, err)
		}
	}
	for _, id := range kept {
		mustLoad(t, r, id)
	}
	clock.Advance(365 * 24 * time.Hour)
	if n, err := r.CleanupExpired(ctx, 0); err != nil || n != 1 {
		t.Fatalf("second cleanup = %d, %v; want 1", n, err)
	}
	mustLoad(t, r, noTTL.ID)
}

// testSessionsDeleteCascades: Delete removes the session, its child and
// grandchild sessions and all its rows (messages, todos, compacts, plans,
// summaries, queue items), leaves other sessions intact, and reports false
// the second time.
func testSessionsDeleteCascades(t *testing.T, h *harness) {
	st, _ := newSessionsStore(t, h)
	r, q := st.Sessions(), st.SessionQueue()
	ctx := context.Background()
	p := repo.NewSession()
	p.AddMessage(textMsg("m", repo.RoleUser, "x"))
	p.Todos = []repo.TodoItem{{Content: "t", ActiveForm: "t"}}
	p.CompactHistory = []repo.CompactRecord{{Summary: "c"}}
	p.EnterPlanMode("", "plan", time.Now())
	mustSave(t, r, p)
	if _, err := r.AddSummary(ctx, repo.SummarySnapshot{SessionID: p.ID, Summary: "s"}); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Enqueue(ctx, p.ID, "job", 0); err != nil {
		t.Fatal(err)
	}
	c := repo.NewSubagentSession(p.ID, "a", "b")
	mustSave(t, r, c)
	gc := repo.NewSubagentSession(c.ID, "a", "grandchild")
	mustSave(t, r, gc)
	keep := repo.NewSession()
	keep.AddMessage(textMsg("m", repo.RoleUser, "x"))
	mustSave(t, r, keep)

	ok, err := r.Delete(ctx, p.ID)
	if err != nil || !ok {
		t.Fatalf("Delete = %v, %v", ok, err)
	}
	for _, id := range []uuid.UUID{p.ID, c.ID, gc.ID} {
		if _, err := r.Load(ctx, id); !errors.Is(err, agentstore.ErrNotFound) {
			t.Fatalf("session %s survived: %v", id, err)
		}
	}
	// white-box: a deleted session's rows are unreachable through the API
	// (Load is ErrNotFound), so their absence is counted directly.
	for _, tbl := range []string{models.TableMessages, models.TableTodos, models.TableCompacts, models.TablePlans, models.TableSummaries, models.TableQueue} {
		if n := h.count(t, st, tbl, Row{"session_id": p.ID}); n != 0 {
			t.Fatalf("%d %s rows survived the delete", n, tbl)
		}
	}
	if len(mustLoad(t, r, keep.ID).Messages) != 1 {
		t.Fatal("unrelated session damaged")
	}
	if ok, _ := r.Delete(ctx, p.ID); ok {
		t.Fatal("second delete reported true")
	}
}

// testSessionsListKeysetPaging: List pages by (updated_at, id) with a keyset
// cursor, across ties of updated_at; it filters by tenant and refuses a
// limit above MaxListLimit.
func testSessionsListKeysetPaging(t *testing.T, h *harness) {
	st, clock := newSessionsStore(t, h)
	r := st.Sessions()
	ctx := context.Background()
	var want []uuid.UUID
	for i := range 7 {
		s := repo.NewSession()
		if i%2 == 0 {
			s.TenantID = "even"
		}
		mustSave(t, r, s)
		want = append(want, s.ID)
		if i%3 == 2 { // several sessions share an updated_at: the id breaks the tie
			clock.Advance(time.Millisecond)
		}
	}
	// Expected order: (updated_at, id).
	exp := make([]uuid.UUID, 0, len(want))
	for _, id := range want {
		exp = append(exp, id)
	}
	slices.SortStableFunc(exp, func(a, b uuid.UUID) int {
		sa, sb := mustLoad(t, r, a), mustLoad(t, r, b)
		if c := sa.UpdatedAt.Compare(sb.UpdatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.String(), b.String())
	})
	var got []uuid.UUID
	var after *repo.Cursor
	pages := 0
	for {
		page, err := r.List(ctx, repo.ListParams{After: after, Limit: 3})
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, s := range page.Sessions {
			got = append(got, s.ID)
		}
		if page.Next == nil {
			break
		}
		after = page.Next
	}
	if !slices.Equal(got, exp) || pages != 3 {
		t.Fatalf("paged list (%d pages) = %v, want %v", pages, got, exp)
	}
	even := "even"
	page, err := r.List(ctx, repo.ListParams{TenantID: &even})
	if err != nil || len(page.Sessions) != 4 || page.Next != nil {
		t.Fatalf("tenant list = %+v, %v", page, err)
	}
	for _, s := range page.Sessions {
		if s.TenantID != "even" {
			t.Fatalf("tenant filter leaked %+v", s)
		}
	}
	if _, err := r.List(ctx, repo.ListParams{Limit: repo.MaxListLimit + 1}); !errors.Is(err, agentstore.ErrInvalidInput) {
		t.Fatalf("huge limit = %v, want ErrInvalidInput", err)
	}
}

// testSessionsInputValidation: invalid input (NUL, invalid UTF-8, too long
// ids and fields, unknown enum values, malformed JSON, JSON NUL escapes) is
// ErrInvalidInput for messages, sessions, queue items, summaries and lease
// owners, and none of it is written; a literal backslash before u0000 and an
// id at the length limit are accepted.
func testSessionsInputValidation(t *testing.T, h *harness) {
	st, _ := newSessionsStore(t, h)
	r, q := st.Sessions(), st.SessionQueue()
	ctx := context.Background()
	base := repo.NewSession()
	mustSave(t, r, base)

	long := strings.Repeat("x", repo.MaxIDLen+1)
	badUTF8 := "bad \xff\xfe"
	cases := []struct {
		name string
		msg  repo.Message
	}{
		{"nul in id", repo.Message{ID: "a\x00b", Role: repo.RoleUser, Content: json.RawMessage(`[]`)}},
		{"long id", repo.Message{ID: long, Role: repo.RoleUser, Content: json.RawMessage(`[]`)}},
		{"bad utf8 id", repo.Message{ID: badUTF8, Role: repo.RoleUser, Content: json.RawMessage(`[]`)}},
		{"unknown role", repo.Message{ID: "r", Role: "developer", Content: json.RawMessage(`[]`)}},
		{"content not json", repo.Message{ID: "c", Role: repo.RoleUser, Content: json.RawMessage(`[{"type":`)}},
		{"empty content", repo.Message{ID: "c", Role: repo.RoleUser}},
		{"content NUL escape", repo.Message{ID: "c", Role: repo.RoleUser, Content: json.RawMessage(`[{"type":"text","text":"a\u0000b"}]`)}},
		{"content bad utf8", repo.Message{ID: "c", Role: repo.RoleUser, Content: json.RawMessage("[\"\xff\"]")}},
		{"metadata NUL escape", repo.Message{ID: "c", Role: repo.RoleUser, Content: json.RawMessage(`[]`), Metadata: json.RawMessage(`{"k":"\u0000"}`)}},
		{"long model", repo.Message{ID: "c", Role: repo.RoleUser, Content: json.RawMessage(`[]`), Model: &long}},
	}
	for _, c := range cases {
		if _, err := r.AppendMessages(ctx, base.ID, c.msg); !errors.Is(err, agentstore.ErrInvalidInput) {
			t.Errorf("%s: AppendMessages = %v, want ErrInvalidInput", c.name, err)
		}
		s := repo.NewSession()
		s.AddMessage(c.msg)
		if c.msg.ID == "" {
			s.Messages[0].ID = ""
		}
		if err := r.Save(ctx, s); !errors.Is(err, agentstore.ErrInvalidInput) {
			t.Errorf("%s: Save = %v, want ErrInvalidInput", c.name, err)
		}
	}
	// A literal backslash before u0000 is fine (it is not the NUL escape).
	ok := repo.Message{ID: "ok", Role: repo.RoleUser, Content: json.RawMessage(`[{"type":"text","text":"\\u0000"}]`)}
	if _, err := r.AppendMessages(ctx, base.ID, ok); err != nil {
		t.Fatalf("escaped backslash refused: %v", err)
	}
	sess := []func(*repo.Session){
		func(s *repo.Session) { s.TenantID = long },
		func(s *repo.Session) { s.TenantID = "t\x00" },
		func(s *repo.Session) { v := "sum\x00mary"; s.Summary = &v },
		func(s *repo.Session) { v := badUTF8; s.Error = &v },
		func(s *repo.Session) { s.State = "sleeping" },
		func(s *repo.Session) { s.Config = json.RawMessage(`{"a":`) },
		func(s *repo.Session) { s.Permissions = json.RawMessage(`{"a":"\u0000"}`) },
		func(s *repo.Session) { s.Type = repo.SessionType{Kind: "robot"} },
		func(s *repo.Session) { s.Todos = []repo.TodoItem{{Content: "a\x00"}} },
		func(s *repo.Session) { s.Todos = []repo.TodoItem{{Content: "a", Status: "blocked"}} },
		func(s *repo.Session) { s.CurrentPlan = &repo.Plan{Content: "p", Status: "someday"} },
		func(s *repo.Session) { v := strings.Repeat("h", 65); s.StaticContextHash = &v },
	}
	for i, mut := range sess {
		s := repo.NewSession()
		mut(s)
		if err := r.Save(ctx, s); !errors.Is(err, agentstore.ErrInvalidInput) {
			t.Errorf("session case %d: Save = %v, want ErrInvalidInput", i, err)
		}
	}
	if _, err := q.Enqueue(ctx, base.ID, "a\x00b", 0); !errors.Is(err, agentstore.ErrInvalidInput) {
		t.Errorf("enqueue NUL = %v", err)
	}
	if _, err := r.AddSummary(ctx, repo.SummarySnapshot{SessionID: base.ID, Summary: badUTF8}); !errors.Is(err, agentstore.ErrInvalidInput) {
		t.Errorf("summary bad UTF-8 = %v", err)
	}
	if _, err := q.Dequeue(ctx, base.ID, repo.DequeueParams{Owner: long}); !errors.Is(err, agentstore.ErrInvalidInput) {
		t.Errorf("long lease owner = %v", err)
	}
	// Nothing was written by the refused calls.
	got := mustLoad(t, r, base.ID)
	if len(got.Messages) != 1 || got.Messages[0].ID != "ok" {
		t.Fatalf("refused input was written: %v", msgIDs(got.Messages))
	}
	page, _ := r.List(ctx, repo.ListParams{})
	if len(page.Sessions) != 1 {
		t.Fatalf("%d sessions stored, want 1", len(page.Sessions))
	}
	if pend, _ := q.PendingQueue(ctx, base.ID); len(pend) != 0 {
		t.Fatal("refused enqueue stored an item")
	}
	// The limit itself is accepted.
	edge := strings.Repeat("é", repo.MaxIDLen/2) // 254 bytes
	if _, err := r.AppendMessages(ctx, base.ID, repo.Message{ID: edge, Role: repo.RoleUser, Content: json.RawMessage(`[]`)}); err != nil {
		t.Fatalf("%d-byte id refused: %v", len(edge), err)
	}
	_ = fmt.Sprint()
}

// testSessionsCustomPrefix: a Store opened WithTablePrefix("claude_") works
// end to end (save, append, fork, branch load, queue, cleanup) on its own
// tables; a default-prefix Store on the same database sees none of it.
func testSessionsCustomPrefix(t *testing.T, h *harness) {
	clock := newTestClock()
	st := h.New(t, withTablePrefix("claude_"), withClock(clock.Now))
	other := h.New(t) // default prefix, same database: must stay empty
	r, q := st.Sessions(), st.SessionQueue()
	ctx := context.Background()
	s := repo.NewSession()
	exp := clock.Now().Add(time.Minute)
	s.ExpiresAt = &exp
	s.AddMessage(textMsg("m1", repo.RoleUser, "x"))
	s.Todos = []repo.TodoItem{{Content: "t", ActiveForm: "t"}}
	s.EnterPlanMode("", "p", clock.Now())
	mustSave(t, r, s)
	if _, err := r.AppendMessages(ctx, s.ID, textMsg("m2", repo.RoleAssistant, "y")); err != nil {
		t.Fatal(err)
	}
	fork, err := r.Fork(ctx, s.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Load(ctx, s.ID, repo.LoadOptions{CurrentBranch: true}); err != nil {
		t.Fatal(err)
	}
	it, err := q.Enqueue(ctx, s.ID, "job", 1)
	if err != nil {
		t.Fatal(err)
	}
	got, err := q.Dequeue(ctx, s.ID, repo.DequeueParams{})
	if err != nil || got == nil || got.ID != it.ID {
		t.Fatalf("dequeue = %+v, %v", got, err)
	}
	if err := q.Complete(ctx, got.Lease()); err != nil {
		t.Fatal(err)
	}
	// Four messages stored: two in the session, two in its fork.
	n := len(mustLoad(t, r, s.ID).Messages) + len(mustLoad(t, r, fork.ID).Messages)
	// white-box: the rows are in the prefixed tables, none in the default ones.
	if stored, dflt := h.count(t, st, models.TableMessages, nil), h.count(t, other, models.TableMessages, nil); n != 4 || stored != 4 || dflt != 0 {
		t.Fatalf("%d messages loaded, %d stored under the prefix, %d under the default prefix", n, stored, dflt)
	}
	if page, _ := other.Sessions().List(ctx, repo.ListParams{}); len(page.Sessions) != 0 {
		t.Fatalf("default-prefix tables saw %d sessions", len(page.Sessions))
	}
	clock.Advance(time.Hour)
	if n, err := r.CleanupExpired(ctx, 0); err != nil || n != 2 {
		t.Fatalf("cleanup = %d, %v (session and its fork, which copied the expiry)", n, err)
	}
}

// testSessionsCleanupConcurrentSweepers: four Stores sweeping expired
// sessions concurrently delete each one exactly once: their counts add up to
// the number of expired sessions, and none is left.
func testSessionsCleanupConcurrentSweepers(t *testing.T, h *harness) {
	const sessions, sweepers = 40, 4
	clock := newTestClock()
	stores := make([]Store, sweepers)
	stores[0] = h.New(t, withClock(clock.Now))
	for i := 1; i < sweepers; i++ {
		stores[i] = h.Open(t, withClock(clock.Now))
	}
	for range sessions {
		s := repo.NewSession()
		e := clock.Now().Add(time.Second)
		s.ExpiresAt = &e
		mustSave(t, stores[0].Sessions(), s)
	}
	clock.Advance(time.Minute)
	counts := make([]int, sweepers)
	var wg sync.WaitGroup
	for i := range sweepers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				n, err := stores[i].Sessions().CleanupExpired(context.Background(), 3)
				if agentstore.IsRetryable(err) {
					counts[i] += n // the batches committed before the error
					continue
				}
				if err != nil {
					t.Error(err)
				}
				counts[i] += n
				return
			}
		}()
	}
	wg.Wait()
	total := 0
	for _, c := range counts {
		total += c
	}
	if total != sessions {
		t.Fatalf("sweepers reported %v = %d deletions, want %d", counts, total, sessions)
	}
	page, _ := stores[0].Sessions().List(context.Background(), repo.ListParams{})
	if len(page.Sessions) != 0 {
		t.Fatalf("%d sessions left", len(page.Sessions))
	}
}
