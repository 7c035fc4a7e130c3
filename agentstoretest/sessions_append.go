package agentstoretest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/repo"
)

// sessionsAppendTests are the Sessions area's tests of this file.
func sessionsAppendTests() []test {
	return tests(
		test{"SessionsAppendWritesOnlyNewRows", testSessionsAppendWritesOnlyNewRows},
		test{"SessionsStaleSaveConflicts", testSessionsStaleSaveConflicts},
		test{"SessionsConcurrentAppends", testSessionsConcurrentAppends},
		test{"SessionsLoadOptions", testSessionsLoadOptions},
		test{"SessionsFork", testSessionsFork},
		test{"SessionsConcurrentSavesNoLostUpdate", testSessionsConcurrentSavesNoLostUpdate},
		test{"SessionsBranchWithCycleTerminates", testSessionsBranchWithCycleTerminates},
	)
}

// testSessionsAppendWritesOnlyNewRows: AppendMessages, and Save of a loaded
// session with k new messages, write k message rows and the session row
// whatever the session's size (1,000 messages), write no other table (never
// rewrite unchanged todos, plans or compacts) and no other session, and
// assign consecutive sequence numbers and parents. Checked on the
// statements the store logs through WithLogger (which tables each writes,
// and the rows it reports) and on the stored rows.
func testSessionsAppendWritesOnlyNewRows(t *testing.T, h *harness) {
	rec := &stmtRecorder{}
	clock := newTestClock()
	st := h.New(t, withClock(clock.Now), withStatements(rec))
	r := st.Sessions()
	ctx := context.Background()
	s := repo.NewSession()
	s.Todos = []repo.TodoItem{{Content: "a", ActiveForm: "a-ing"}}
	s.EnterPlanMode("", "plan", clock.Now())
	mustSave(t, r, s)
	seedMessages(t, r, s, 1000)
	other := repo.NewSession()
	other.AddMessage(textMsg("o1", repo.RoleUser, "other"))
	mustSave(t, r, other)
	before, otherBefore := mustLoad(t, r, s.ID), mustLoad(t, r, other.ID)

	// AppendMessages: 2 message rows and the session row, whatever the size.
	rec.record()
	got, err := r.AppendMessages(ctx, s.ID, textMsg("n1", repo.RoleUser, "q"), textMsg("n2", repo.RoleAssistant, "a"))
	stmts := rec.stop()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(msgSeqs(got), []int64{1001, 1002}) || *got[1].ParentID != "n1" || *got[0].ParentID != "seed-999" {
		t.Fatalf("appended seqs %v parents %v %v", msgSeqs(got), *got[0].ParentID, *got[1].ParentID)
	}
	assertOnlyWrites(t, stmts, "messages", "sessions")
	assertWrites(t, stmts, "messages", 1, 2)
	assertWrites(t, stmts, "sessions", 1, 1)
	// The rows themselves: exactly 2 new messages, the session row advanced
	// once, the other session untouched (this also covers a statement that
	// writes both tables, whose reported rows are not per table).
	after, otherAfter := mustLoad(t, r, s.ID), mustLoad(t, r, other.ID)
	if len(after.Messages) != 1002 || after.MessageCount != 1002 || after.LastSeq != 1002 || after.Version != before.Version+1 ||
		*after.CurrentLeafID != "n2" || after.Messages[1001].ID != "n2" || after.Messages[1000].ID != "n1" {
		t.Fatalf("after append: %d messages, count %d, last seq %d, version %d (was %d)",
			len(after.Messages), after.MessageCount, after.LastSeq, after.Version, before.Version)
	}
	if len(otherAfter.Messages) != 1 || otherAfter.Version != otherBefore.Version || otherAfter.LastSeq != otherBefore.LastSeq ||
		otherAfter.MessageCount != otherBefore.MessageCount || !otherAfter.UpdatedAt.Equal(otherBefore.UpdatedAt) ||
		*otherAfter.CurrentLeafID != "o1" {
		t.Fatalf("append to %s changed session %s: %+v -> %+v", s.ID, other.ID, otherBefore, otherAfter)
	}

	// Save of a loaded session with k new messages: k rows + the session row.
	loaded := mustLoad(t, r, s.ID)
	loaded.AddMessage(textMsg("n3", repo.RoleUser, "again"))
	loaded.AddMessage(textMsg("n4", repo.RoleAssistant, "ok"))
	loaded.AddMessage(textMsg("n5", repo.RoleUser, "bye"))
	rec.record()
	err = r.Save(ctx, loaded)
	stmts = rec.stop()
	if err != nil {
		t.Fatal(err)
	}
	assertOnlyWrites(t, stmts, "messages", "sessions")
	assertWrites(t, stmts, "messages", 1, 3)
	assertWrites(t, stmts, "sessions", 1, 1)
	if loaded.LastSeq != 1005 || loaded.MessageCount != 1005 || loaded.Messages[len(loaded.Messages)-1].Seq != 1005 {
		t.Fatalf("after save lastSeq %d count %d", loaded.LastSeq, loaded.MessageCount)
	}
	again := mustLoad(t, r, s.ID)
	if len(again.Messages) != 1005 || again.Messages[1004].ID != "n5" || *again.CurrentLeafID != "n5" {
		t.Fatalf("reloaded %d messages, last %s", len(again.Messages), again.Messages[len(again.Messages)-1].ID)
	}
	for i, m := range again.Messages {
		if m.Seq != int64(i+1) {
			t.Fatalf("message %d has seq %d", i, m.Seq)
		}
	}
}

// testSessionsStaleSaveConflicts: of two copies loaded at the same version,
// the second Save is ErrConflict, writes nothing and leaves the copy
// unchanged; AppendMessages bumps the version too, so a copy loaded before
// it conflicts.
func testSessionsStaleSaveConflicts(t *testing.T, h *harness) {
	st, _ := newSessionsStore(t, h)
	r := st.Sessions()
	ctx := context.Background()
	s := repo.NewSession()
	s.AddMessage(textMsg("m1", repo.RoleUser, "hi"))
	mustSave(t, r, s)

	a := mustLoad(t, r, s.ID)
	b := mustLoad(t, r, s.ID)
	a.AddMessage(textMsg("from-a", repo.RoleAssistant, "A"))
	mustSave(t, r, a)
	b.AddMessage(textMsg("from-b", repo.RoleAssistant, "B"))
	b.State = repo.StateFailed
	b.Todos = []repo.TodoItem{{Content: "b", ActiveForm: "b"}}
	if err := r.Save(ctx, b); !errors.Is(err, agentstore.ErrConflict) {
		t.Fatalf("stale save = %v, want ErrConflict", err)
	}
	if b.Messages[1].Seq != 0 || b.Version != 1 {
		t.Fatalf("failed save changed the copy: seq %d version %d", b.Messages[1].Seq, b.Version)
	}
	got := mustLoad(t, r, s.ID)
	if !slices.Equal(msgIDs(got.Messages), []string{"m1", "from-a"}) || got.State != repo.StateCreated || len(got.Todos) != 0 || got.Version != 2 {
		t.Fatalf("stale save wrote something: msgs %v state %s todos %d version %d", msgIDs(got.Messages), got.State, len(got.Todos), got.Version)
	}
	// An append bumps the version too, so a copy loaded before it is stale.
	if _, err := r.AppendMessages(ctx, s.ID, textMsg("m3", repo.RoleUser, "x")); err != nil {
		t.Fatal(err)
	}
	got.State = repo.StateActive
	if err := r.Save(ctx, got); !errors.Is(err, agentstore.ErrConflict) {
		t.Fatalf("save after concurrent append = %v, want ErrConflict", err)
	}
}

// testSessionsConcurrentAppends: concurrent AppendMessages from 16
// goroutines over 4 Stores on one database (retryable errors retried) store
// every message once, with consecutive sequence numbers, in one parent
// chain.
func testSessionsConcurrentAppends(t *testing.T, h *harness) {
	const goroutines, perG, handles = 16, 8, 4
	stores := make([]Store, handles)
	stores[0] = h.New(t)
	for i := 1; i < handles; i++ {
		stores[i] = h.Open(t)
	}
	s := repo.NewSession()
	mustSave(t, stores[0].Sessions(), s)
	var wg sync.WaitGroup
	errs := make(chan error, goroutines*perG)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := stores[g%handles].Sessions()
			for i := range perG {
				var err error
				for attempt := 0; attempt < 20; attempt++ {
					_, err = r.AppendMessages(context.Background(), s.ID, textMsg(fmt.Sprintf("g%d-%d", g, i), repo.RoleUser, "x"))
					if !agentstore.IsRetryable(err) {
						break
					}
				}
				if err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("append: %v", err)
	}
	got := mustLoad(t, stores[1].Sessions(), s.ID)
	const total = goroutines * perG
	if len(got.Messages) != total || got.LastSeq != total || got.MessageCount != total {
		t.Fatalf("%d messages, lastSeq %d, count %d; want %d", len(got.Messages), got.LastSeq, got.MessageCount, total)
	}
	seen := map[string]bool{}
	for i, m := range got.Messages {
		if m.Seq != int64(i+1) {
			t.Fatalf("message %d has seq %d (not consecutive)", i, m.Seq)
		}
		if seen[m.ID] {
			t.Fatalf("message %s stored twice", m.ID)
		}
		seen[m.ID] = true
	}
	// Every message but the first is linked to its predecessor: one chain.
	for i := 1; i < len(got.Messages); i++ {
		if p := got.Messages[i].ParentID; p == nil || *p != got.Messages[i-1].ID {
			t.Fatalf("message %d parent %v, want %s", i, p, got.Messages[i-1].ID)
		}
	}
}

// testSessionsLoadOptions: Load's options narrow the messages (LastN;
// AfterSeq with Limit; BeforeSeq with LastN; an AfterSeq/BeforeSeq window;
// Limit with LastN is ErrInvalidInput), CurrentBranch returns the branch
// from the root to the leaf (also with LastN), and Load runs the same number
// of queries (at most 5) whatever the session's size.
func testSessionsLoadOptions(t *testing.T, h *harness) {
	rec := &stmtRecorder{}
	st := h.New(t, withStatements(rec))
	r := st.Sessions()
	ctx := context.Background()
	s := repo.NewSession()
	mustSave(t, r, s)
	seedMessages(t, r, s, 20)

	tail := mustLoad(t, r, s.ID, repo.LoadOptions{LastN: 3})
	if !slices.Equal(msgSeqs(tail.Messages), []int64{18, 19, 20}) {
		t.Fatalf("LastN 3 = %v", msgSeqs(tail.Messages))
	}
	page := mustLoad(t, r, s.ID, repo.LoadOptions{AfterSeq: 5, Limit: 4})
	if !slices.Equal(msgSeqs(page.Messages), []int64{6, 7, 8, 9}) {
		t.Fatalf("AfterSeq 5 Limit 4 = %v", msgSeqs(page.Messages))
	}
	back := mustLoad(t, r, s.ID, repo.LoadOptions{BeforeSeq: 5, LastN: 2})
	if !slices.Equal(msgSeqs(back.Messages), []int64{3, 4}) {
		t.Fatalf("BeforeSeq 5 LastN 2 = %v", msgSeqs(back.Messages))
	}
	win := mustLoad(t, r, s.ID, repo.LoadOptions{AfterSeq: 10, BeforeSeq: 13})
	if !slices.Equal(msgSeqs(win.Messages), []int64{11, 12}) {
		t.Fatalf("window = %v", msgSeqs(win.Messages))
	}
	if _, err := r.Load(ctx, s.ID, repo.LoadOptions{Limit: 1, LastN: 1}); !errors.Is(err, agentstore.ErrInvalidInput) {
		t.Fatalf("Limit+LastN = %v, want ErrInvalidInput", err)
	}

	// Branches: seed-19 is the leaf. Branch off seed-4: b1 <- b2.
	p := "seed-4"
	b1 := textMsg("b1", repo.RoleUser, "alt")
	b1.ParentID = &p
	if _, err := r.AppendMessages(ctx, s.ID, b1, textMsg("b2", repo.RoleAssistant, "alt2")); err != nil {
		t.Fatal(err)
	}
	br := mustLoad(t, r, s.ID, repo.LoadOptions{CurrentBranch: true})
	want := []string{"seed-0", "seed-1", "seed-2", "seed-3", "seed-4", "b1", "b2"}
	if !slices.Equal(msgIDs(br.Messages), want) {
		t.Fatalf("current branch = %v, want %v", msgIDs(br.Messages), want)
	}
	if cb := br.CurrentBranch(); !slices.Equal(msgIDs(cb), want) {
		t.Fatalf("in-memory CurrentBranch = %v", msgIDs(cb))
	}
	brTail := mustLoad(t, r, s.ID, repo.LoadOptions{CurrentBranch: true, LastN: 2})
	if !slices.Equal(msgIDs(brTail.Messages), []string{"b1", "b2"}) {
		t.Fatalf("branch tail = %v", msgIDs(brTail.Messages))
	}

	// A fixed number of queries, whatever the size.
	count := func() int {
		rec.record()
		mustLoad(t, r, s.ID)
		n := 0
		for _, st := range rec.stop() {
			if st.Query {
				n++
			}
		}
		return n
	}
	small := count()
	seedMoreMessages(t, r, s, 300)
	if big := count(); big != small || small > 5 {
		t.Fatalf("Load ran %d queries at 22 messages and %d at 322 (want the same, at most 5)", small, big)
	}
}

// testSessionsFork: Fork at a message copies the branch up to it (renumbered
// from 1, marked sidechain, content intact) into a new child session that
// keeps tenant and summary and records where it forked from; Fork at ""
// forks the current branch; the fork takes appends in its own sequence; the
// original is unchanged; an unknown message is ErrNotFound.
func testSessionsFork(t *testing.T, h *harness) {
	st, _ := newSessionsStore(t, h)
	r := st.Sessions()
	ctx := context.Background()
	s := repo.NewSession()
	s.TenantID = "t1"
	sum := "the summary"
	s.Summary = &sum
	s.AddMessage(textMsg("m1", repo.RoleUser, "1"))
	s.AddMessage(textMsg("m2", repo.RoleAssistant, "2"))
	s.AddMessage(textMsg("m3", repo.RoleUser, "3"))
	mustSave(t, r, s)
	p := "m2"
	alt := textMsg("m4", repo.RoleUser, "4")
	alt.ParentID = &p
	if _, err := r.AppendMessages(ctx, s.ID, alt, textMsg("m5", repo.RoleAssistant, "5")); err != nil {
		t.Fatal(err)
	}
	before := mustLoad(t, r, s.ID)

	f, err := r.Fork(ctx, s.ID, "m3")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(msgIDs(f.Messages), []string{"m1", "m2", "m3"}) || !slices.Equal(msgSeqs(f.Messages), []int64{1, 2, 3}) {
		t.Fatalf("fork at m3 = %v %v", msgIDs(f.Messages), msgSeqs(f.Messages))
	}
	if f.ParentID == nil || *f.ParentID != s.ID || f.TenantID != "t1" || *f.Summary != sum || *f.CurrentLeafID != "m3" ||
		f.LastSeq != 3 || f.MessageCount != 3 || *f.ForkedFromSessionID != s.ID || *f.ForkedFromSeq != 3 {
		t.Fatalf("fork row: %+v", f)
	}
	for _, m := range f.Messages {
		if !m.IsSidechain {
			t.Fatalf("forked message %s not marked sidechain", m.ID)
		}
	}
	if string(f.Messages[1].Content) != string(before.Messages[1].Content) {
		t.Fatal("forked content differs")
	}
	// Default: the current branch (leaf m5).
	f2, err := r.Fork(ctx, s.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(msgIDs(f2.Messages), []string{"m1", "m2", "m4", "m5"}) || *f2.CurrentLeafID != "m5" {
		t.Fatalf("fork of current branch = %v", msgIDs(f2.Messages))
	}
	// The fork is usable: appends continue its own sequence.
	if got, err := r.AppendMessages(ctx, f2.ID, textMsg("m6", repo.RoleUser, "6")); err != nil || got[0].Seq != 5 || *got[0].ParentID != "m5" {
		t.Fatalf("append to fork = %+v, %v", got, err)
	}
	after := mustLoad(t, r, s.ID)
	if after.Version != before.Version || len(after.Messages) != 5 {
		t.Fatalf("original changed: version %d→%d, %d messages", before.Version, after.Version, len(after.Messages))
	}
	for i, m := range after.Messages {
		if m.IsSidechain || m.Seq != before.Messages[i].Seq || m.ID != before.Messages[i].ID {
			t.Fatalf("original message %d changed: %+v", i, m)
		}
	}
	if _, err := r.Fork(ctx, s.ID, "nope"); !errors.Is(err, agentstore.ErrNotFound) {
		t.Fatalf("fork at unknown message = %v, want ErrNotFound", err)
	}
	kids, _ := r.ListChildren(ctx, s.ID)
	if len(kids) != 2 {
		t.Fatalf("children = %v", kids)
	}
}

// testSessionsConcurrentSavesNoLostUpdate: concurrent load-modify-Save
// cycles from 8 goroutines over 4 Stores, retried on ErrConflict, lose no
// update: every message and every increment of a row field is stored, and
// the version counts every save.
func testSessionsConcurrentSavesNoLostUpdate(t *testing.T, h *harness) {
	const goroutines, perG, handles = 8, 4, 4
	stores := make([]Store, handles)
	stores[0] = h.New(t)
	for i := 1; i < handles; i++ {
		stores[i] = h.Open(t)
	}
	s := repo.NewSession()
	mustSave(t, stores[0].Sessions(), s)
	var wg sync.WaitGroup
	var mu sync.Mutex
	conflicts := 0
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := stores[g%handles].Sessions()
			for i := range perG {
				for {
					cur, err := r.Load(context.Background(), s.ID, repo.LoadOptions{LastN: 1})
					if err != nil {
						if agentstore.IsRetryable(err) {
							continue
						}
						t.Error(err)
						return
					}
					cur.AddMessage(textMsg(fmt.Sprintf("g%d-%d", g, i), repo.RoleUser, "x"))
					cur.TotalUsage.InputTokens++ // a read-modify-write of the row
					err = r.Save(context.Background(), cur)
					if errors.Is(err, agentstore.ErrConflict) || agentstore.IsRetryable(err) {
						mu.Lock()
						conflicts++
						mu.Unlock()
						continue
					}
					if err != nil {
						t.Error(err)
						return
					}
					break
				}
			}
		}()
	}
	wg.Wait()
	got := mustLoad(t, stores[0].Sessions(), s.ID)
	const total = goroutines * perG
	if len(got.Messages) != total || got.TotalUsage.InputTokens != total || got.Version != total+1 {
		t.Fatalf("%d messages, input tokens %d, version %d; want %d, %d, %d (conflicts retried: %d)",
			len(got.Messages), got.TotalUsage.InputTokens, got.Version, total, total, total+1, conflicts)
	}
	for i, m := range got.Messages {
		if m.Seq != int64(i+1) {
			t.Fatalf("message %d seq %d", i, m.Seq)
		}
	}
}

// testSessionsBranchWithCycleTerminates: a parent cycle written by a
// careless caller (a -> b -> a) does not hang Load with CurrentBranch, the
// in-memory CurrentBranch or Fork.
func testSessionsBranchWithCycleTerminates(t *testing.T, h *harness) {
	st, _ := newSessionsStore(t, h)
	r := st.Sessions()
	s := repo.NewSession()
	mustSave(t, r, s)
	pa, pb := "b", "a"
	a := textMsg("a", repo.RoleUser, "a")
	a.ParentID = &pa // a -> b -> a: a cycle written by a careless caller
	b := textMsg("b", repo.RoleAssistant, "b")
	b.ParentID = &pb
	if _, err := r.AppendMessages(context.Background(), s.ID, a, b); err != nil {
		t.Fatal(err)
	}
	got := mustLoad(t, r, s.ID, repo.LoadOptions{CurrentBranch: true})
	if !slices.Equal(msgIDs(got.Messages), []string{"a", "b"}) {
		t.Fatalf("branch = %v", msgIDs(got.Messages))
	}
	if len(got.CurrentBranch()) > 2 {
		t.Fatal("in-memory branch walk did not stop")
	}
	f, err := r.Fork(context.Background(), s.ID, "")
	if err != nil || len(f.Messages) != 2 {
		t.Fatalf("fork of a cyclic branch = %v, %v", f, err)
	}
}

// stmtRecorder records the statements a handle reports
// (Config.OnStatement) while it is on, so tests can assert what a call
// wrote.
type stmtRecorder struct {
	mu    sync.Mutex
	on    bool
	stmts []Statement
}

// add records s when recording.
func (r *stmtRecorder) add(s Statement) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.on {
		r.stmts = append(r.stmts, s)
	}
}

// record clears the log and starts recording.
func (r *stmtRecorder) record() {
	r.mu.Lock()
	r.on, r.stmts = true, nil
	r.mu.Unlock()
}

// stop stops recording and returns the statements.
func (r *stmtRecorder) stop() []Statement {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.on = false
	return r.stmts
}

// writesTo returns the statements that write table (its base name).
func writesTo(stmts []Statement, table string) []Statement {
	var out []Statement
	for _, s := range stmts {
		if slices.Contains(s.Writes, table) {
			out = append(out, s)
		}
	}
	return out
}

// assertOnlyWrites checks that stmts write no table but the given ones.
func assertOnlyWrites(t *testing.T, stmts []Statement, tables ...string) {
	t.Helper()
	for _, s := range stmts {
		for _, w := range s.Writes {
			if !slices.Contains(tables, w) {
				t.Fatalf("unexpected write to %s: %s", w, s.Text)
			}
		}
	}
}

// seedMessages appends n messages to s in one call.
func seedMessages(t *testing.T, r repo.Sessions, s *repo.Session, n int) {
	t.Helper()
	batch := make([]repo.Message, 0, n)
	for i := range n {
		batch = append(batch, textMsg(fmt.Sprintf("seed-%d", i), repo.RoleUser, "x"))
	}
	if _, err := r.AppendMessages(context.Background(), s.ID, batch...); err != nil {
		t.Fatal(err)
	}
}

// assertWrites checks that stmts hold exactly n writes to table (base
// name), none a DELETE, affecting rows rows in total. The rows a statement
// reports count only when it writes table alone: a statement that writes
// several tables (data-modifying CTEs) reports one count for all of them,
// and the caller checks its effect on each table from the stored rows.
func assertWrites(t *testing.T, stmts []Statement, table string, n int, rows int64) {
	t.Helper()
	w := writesTo(stmts, table)
	var total int64
	counted := false
	for _, s := range w {
		if s.Delete {
			t.Fatalf("unexpected delete on %s: %s", table, s.Text)
		}
		if len(s.Writes) == 1 {
			total += s.Rows
			counted = true
		}
	}
	if len(w) != n || counted && total != rows {
		t.Fatalf("%s: %d write statements affecting %d rows, want %d affecting %d: %+v", table, len(w), total, n, rows, w)
	}
}

// seedMoreMessages appends n more messages to s in one call.
func seedMoreMessages(t *testing.T, r repo.Sessions, s *repo.Session, n int) {
	t.Helper()
	batch := make([]repo.Message, 0, n)
	for i := range n {
		batch = append(batch, textMsg(fmt.Sprintf("more-%d", i), repo.RoleUser, "y"))
	}
	if _, err := r.AppendMessages(context.Background(), s.ID, batch...); err != nil {
		t.Fatal(err)
	}
}
