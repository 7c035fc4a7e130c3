package agentstoretest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/repo"
)

// changeFeedTests are the ChangeFeed area: the session change feed
// (repo.ChangeFeed), reached through a Store's ChangeFeed method.
func changeFeedTests() []test {
	return tests(
		test{"ChangeFeedKindsAndPaging", testChangeFeedKindsAndPaging},
		test{"ChangeFeedChildKinds", testChangeFeedChildKinds},
		test{"ChangeFeedRefusals", testChangeFeedRefusals},
		test{"ChangeFeedOutOfOrderCommits", testChangeFeedOutOfOrderCommits},
		test{"ChangeFeedWatch", testChangeFeedWatch},
		test{"ChangeFeedPurge", testChangeFeedPurge},
	)
}

// feedHolder is what a Store or TenantView offers when it has a change
// feed (agentstore.Store, agentstore.TenantView).
type feedHolder interface{ ChangeFeed() repo.ChangeFeed }

// feedOf returns v's change feed, or skips t.
func feedOf(t testing.TB, v any) repo.ChangeFeed {
	t.Helper()
	f, ok := v.(feedHolder)
	if !ok {
		t.Skipf("agentstoretest: %T has no ChangeFeed", v)
	}
	return f.ChangeFeed()
}

// fmtChanges formats changes for comparison (the tenant by value).
func fmtChanges(cs []repo.Change) string {
	var b []byte
	for _, c := range cs {
		tenant := "-"
		if c.TenantID != nil {
			tenant = *c.TenantID
		}
		b = fmt.Appendf(b, "[%s %s %s %s v%d (%d,%d] %s %s %d]", c.Cursor, c.Kind, tenant, c.SessionID, c.Version,
			c.FromSeq, c.ToSeq, c.State, c.ItemID, c.Time.UnixMilli())
	}
	return string(b)
}

// readAllChanges pages through the feed from after with page size limit
// until an empty page and returns the changes and the last cursor.
func readAllChanges(t testing.TB, f repo.ChangeFeed, p repo.ChangesParams) ([]repo.Change, repo.ChangeCursor) {
	t.Helper()
	var out []repo.Change
	for {
		page, err := f.Changes(context.Background(), p)
		if err != nil {
			t.Fatalf("changes after %q: %v", p.After, err)
		}
		if len(page.Changes) == 0 {
			if page.Next != p.After {
				t.Fatalf("empty page moved the cursor: %q -> %q", p.After, page.Next)
			}
			return out, p.After
		}
		if page.Next != page.Changes[len(page.Changes)-1].Cursor {
			t.Fatalf("next %q is not the last change's cursor %q", page.Next, page.Changes[len(page.Changes)-1].Cursor)
		}
		out = append(out, page.Changes...)
		p.After = page.Next
	}
}

// waitForChanges reads the feed from p.After until it holds at least n
// changes. On PostgreSQL a committed change becomes readable once every
// transaction that was running when it committed has ended (on a shared
// server, other clients' transactions too), so a test waits for it.
func waitForChanges(t testing.TB, f repo.ChangeFeed, p repo.ChangesParams, n int) []repo.Change {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		all, _ := readAllChanges(t, f, p)
		if len(all) >= n {
			return all
		}
		if time.Now().After(deadline) {
			t.Fatalf("the feed holds %d changes after %q, want %d, after a minute", len(all), p.After, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// testChangeFeedKindsAndPaging: every write kind lands in the feed in
// commit order with its fields (appends carry their seq range, queue items
// their status); a walk with a small page size resumes exactly where it
// left off; the session and tenant filters and a tenant view keep only
// their rows.
func testChangeFeedKindsAndPaging(t *testing.T, h *harness) {
	st := h.New(t)
	f := feedOf(t, st)
	r, q := st.Sessions(), st.SessionQueue()
	ctx := context.Background()
	_, start := readAllChanges(t, f, repo.ChangesParams{})

	a := repo.NewSession()
	a.TenantID = "acme"
	mustSave(t, r, a)
	if _, err := r.AppendMessages(ctx, a.ID, textMsg("m1", repo.RoleUser, "hi"), textMsg("m2", repo.RoleAssistant, "yo")); err != nil {
		t.Fatal(err)
	}
	if _, err := r.SetTodos(ctx, a.ID, []repo.TodoItem{{Content: "x", ActiveForm: "doing x"}}); err != nil {
		t.Fatal(err)
	}
	it, err := q.Enqueue(ctx, a.ID, "job", 0)
	if err != nil {
		t.Fatal(err)
	}
	got, err := q.Dequeue(ctx, a.ID, repo.DequeueParams{Lease: time.Minute})
	if err != nil || got == nil {
		t.Fatalf("dequeue: %v %v", got, err)
	}
	if err := q.Complete(ctx, got.Lease()); err != nil {
		t.Fatal(err)
	}
	b := repo.NewSession()
	mustSave(t, r, b)
	if ok, err := r.Delete(ctx, b.ID); err != nil || !ok {
		t.Fatalf("delete: %v %v", ok, err)
	}

	all := waitForChanges(t, f, repo.ChangesParams{After: start}, 8)
	type row struct {
		kind     repo.ChangeKind
		sid      uuid.UUID
		from, to int64
		state    string
	}
	var rows []row
	for _, c := range all {
		rows = append(rows, row{c.Kind, c.SessionID, c.FromSeq, c.ToSeq, c.State})
	}
	want := []row{
		{repo.ChangeSessionCreated, a.ID, 0, 0, string(a.State)},
		{repo.ChangeSessionUpdated, a.ID, 0, 2, string(a.State)},
		{repo.ChangeTodos, a.ID, 2, 2, string(a.State)},
		{repo.ChangeQueueItem, a.ID, 0, 0, string(repo.QueuePending)},
		{repo.ChangeQueueItem, a.ID, 0, 0, string(repo.QueueProcessing)},
		{repo.ChangeQueueItem, a.ID, 0, 0, string(repo.QueueCompleted)},
		{repo.ChangeSessionCreated, b.ID, 0, 0, string(b.State)},
		{repo.ChangeSessionDeleted, b.ID, 0, 0, string(b.State)},
	}
	if fmt.Sprint(rows) != fmt.Sprint(want) {
		t.Fatalf("feed:\n got  %v\n want %v", rows, want)
	}
	var lastVersion int64
	for i, c := range all {
		if c.Kind == repo.ChangeQueueItem {
			if c.ItemID != it.ID || c.Version != 0 {
				t.Errorf("change %d: item %s version %d, want %s 0", i, c.ItemID, c.Version, it.ID)
			}
		} else if c.SessionID == a.ID {
			if c.Version <= lastVersion {
				t.Errorf("change %d: version %d after %d", i, c.Version, lastVersion)
			}
			lastVersion = c.Version
		}
		if i < 6 && (c.TenantID == nil || *c.TenantID != "acme") {
			t.Errorf("change %d: tenant %v, want acme", i, c.TenantID)
		}
		if d := time.Since(c.Time); d < -time.Minute || d > time.Minute {
			t.Errorf("change %d: time %v", i, c.Time)
		}
	}
	// Pages of 3 give the same changes.
	paged, _ := readAllChanges(t, f, repo.ChangesParams{After: start, Limit: 3})
	if fmtChanges(paged) != fmtChanges(all) {
		t.Fatalf("paged walk differs:\n%v\n%v", paged, all)
	}
	// Filters.
	onlyB, _ := readAllChanges(t, f, repo.ChangesParams{After: start, SessionID: b.ID, Limit: 1})
	if len(onlyB) != 2 || onlyB[0].SessionID != b.ID || onlyB[1].Kind != repo.ChangeSessionDeleted {
		t.Fatalf("session filter: %v", onlyB)
	}
	acme := "acme"
	onlyAcme, _ := readAllChanges(t, f, repo.ChangesParams{After: start, TenantID: &acme})
	if len(onlyAcme) != 6 {
		t.Fatalf("tenant filter: %d changes, want 6", len(onlyAcme))
	}
	if tv, ok := st.ForTenant("acme").(feedHolder); ok {
		view, _ := readAllChanges(t, tv.ChangeFeed(), repo.ChangesParams{After: start})
		if fmtChanges(view) != fmtChanges(onlyAcme) {
			t.Fatalf("tenant view:\n%v\n%v", view, onlyAcme)
		}
		other, _ := readAllChanges(t, st.ForTenant("other").(feedHolder).ChangeFeed(), repo.ChangesParams{After: start})
		if len(other) != 0 {
			t.Fatalf("other tenant's view sees %d changes", len(other))
		}
	}
}

// testChangeFeedChildKinds: a change of the todos, the plan or the summary
// snapshots is reported with its own kind (todos.changed, plan.changed,
// summary.changed) in place of session.updated, with the session's version
// after it; a Save that changed several of them is one change per kind,
// all at the Save's version; a Save that also appended messages keeps its
// session.updated change (with the appended range) before them; a Save of
// the session row alone is still session.updated.
func testChangeFeedChildKinds(t *testing.T, h *harness) {
	st := h.New(t)
	f := feedOf(t, st)
	r := st.Sessions()
	ctx := context.Background()
	_, start := readAllChanges(t, f, repo.ChangesParams{})

	s := repo.NewSession()
	mustSave(t, r, s)                                                                                        // v1 created
	if _, err := r.SetTodos(ctx, s.ID, []repo.TodoItem{{Content: "a", ActiveForm: "doing a"}}); err != nil { // v2
		t.Fatal(err)
	}
	if _, err := r.AddSummary(ctx, repo.SummarySnapshot{SessionID: s.ID, Summary: "so far"}); err != nil { // v3
		t.Fatal(err)
	}
	got, err := r.Load(ctx, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	got.Todos = append(got.Todos, repo.TodoItem{Content: "b", ActiveForm: "doing b"})
	mustSave(t, r, got) // v4 todos
	got.CurrentPlan = &repo.Plan{Content: "the plan"}
	mustSave(t, r, got) // v5 plan
	got.Todos = got.Todos[:1]
	got.CurrentPlan.Content = "the plan, revised"
	got.AddMessage(textMsg("m1", repo.RoleUser, "go"))
	mustSave(t, r, got) // v6 messages, todos, plan
	got.State = repo.StateActive
	mustSave(t, r, got) // v7 the row alone

	type row struct {
		kind     repo.ChangeKind
		version  int64
		from, to int64
	}
	var rows []row
	for _, c := range waitForChanges(t, f, repo.ChangesParams{After: start, SessionID: s.ID}, 9) {
		rows = append(rows, row{c.Kind, c.Version, c.FromSeq, c.ToSeq})
	}
	want := []row{
		{repo.ChangeSessionCreated, 1, 0, 0},
		{repo.ChangeTodos, 2, 0, 0},
		{repo.ChangeSummary, 3, 0, 0},
		{repo.ChangeTodos, 4, 0, 0},
		{repo.ChangePlan, 5, 0, 0},
		{repo.ChangeSessionUpdated, 6, 0, 1},
		{repo.ChangeTodos, 6, 1, 1},
		{repo.ChangePlan, 6, 1, 1},
		{repo.ChangeSessionUpdated, 7, 1, 1},
	}
	if fmt.Sprint(rows) != fmt.Sprint(want) {
		t.Fatalf("feed:\n got  %v\n want %v", rows, want)
	}
}

// testChangeFeedRefusals: malformed cursors, bad limits, an invalid tenant
// filter, purge arguments and a nil Watch function are ErrInvalidInput.
func testChangeFeedRefusals(t *testing.T, h *harness) {
	st := h.New(t)
	f := feedOf(t, st)
	ctx := context.Background()
	for _, c := range []repo.ChangeCursor{"x", "c1.", "c1.1", "c1.a.1", "c1.1.0", "c1.-1.5", "c1.01.5", "c2.1.1", "c1.1.1.1"} {
		if _, err := f.Changes(ctx, repo.ChangesParams{After: c}); !errors.Is(err, agentstore.ErrInvalidInput) {
			t.Errorf("cursor %q: %v, want ErrInvalidInput", c, err)
		}
		if err := f.Watch(ctx, repo.ChangesParams{After: c}, func(repo.Change) error { return nil }); !errors.Is(err, agentstore.ErrInvalidInput) {
			t.Errorf("watch cursor %q: %v, want ErrInvalidInput", c, err)
		}
	}
	for _, n := range []int{-1, repo.MaxPageLimit + 1} {
		if _, err := f.Changes(ctx, repo.ChangesParams{Limit: n}); !errors.Is(err, agentstore.ErrInvalidInput) {
			t.Errorf("limit %d: %v, want ErrInvalidInput", n, err)
		}
	}
	empty := ""
	if _, err := f.Changes(ctx, repo.ChangesParams{TenantID: &empty}); !errors.Is(err, agentstore.ErrInvalidInput) {
		t.Errorf("empty tenant id: %v, want ErrInvalidInput", err)
	}
	if _, err := f.PurgeChanges(ctx, -time.Second, 0); !errors.Is(err, agentstore.ErrInvalidInput) {
		t.Errorf("negative age: %v", err)
	}
	if _, err := f.PurgeChanges(ctx, 0, repo.MaxPurgeBatch+1); !errors.Is(err, agentstore.ErrInvalidInput) {
		t.Errorf("batch too large: %v", err)
	}
	if err := f.Watch(ctx, repo.ChangesParams{}, nil); !errors.Is(err, agentstore.ErrInvalidInput) {
		t.Errorf("nil fn: %v", err)
	}
}

// testChangeFeedOutOfOrderCommits: writers on several Stores commit out of
// the order they started — transactions held open (WithSessionLock with a
// sleep) after writing while others commit, one of them writing a second
// session after another writer committed to it — and a consumer on yet
// another Store that pages the feed concurrently, resuming from its last
// cursor, sees every committed append exactly once and each session's
// appends in their commit order (each change's FromSeq is the previous
// change's ToSeq).
func testChangeFeedOutOfOrderCommits(t *testing.T, h *harness) {
	const (
		nStores   = 3
		nSessions = 4
		nWriters  = 6
		perWriter = 12
		nHolders  = 3
		hold      = 150 * time.Millisecond
	)
	stores := make([]Store, nStores)
	for i := range stores {
		stores[i] = h.Open(t)
	}
	ctx := context.Background()
	consumer := feedOf(t, h.Open(t))
	_, start := readAllChanges(t, consumer, repo.ChangesParams{})
	sess := make([]*repo.Session, nSessions)
	for i := range sess {
		sess[i] = repo.NewSession()
		mustSave(t, stores[0].Sessions(), sess[i])
	}

	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		errs   []error
		appsMu sync.Mutex
		apps   = map[uuid.UUID]int{} // appends committed per session
	)
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	committed := func(id uuid.UUID, n int) {
		appsMu.Lock()
		apps[id] += n
		appsMu.Unlock()
	}
	for w := 0; w < nWriters; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			r := stores[w%nStores].Sessions()
			for i := 0; i < perWriter; i++ {
				s := sess[(w+i)%nSessions]
				if _, err := r.AppendMessages(ctx, s.ID, textMsg(fmt.Sprintf("w%d-%d", w, i), repo.RoleUser, "x")); err != nil {
					if errors.Is(err, agentstore.ErrRetryable) {
						continue
					}
					fail(err)
					return
				}
				committed(s.ID, 1)
			}
		}(w)
	}
	// Holders: append to session k, keep the transaction open, then append
	// to session k+1 (after other writers committed to it) and commit.
	for k := 0; k < nHolders; k++ {
		wg.Add(1)
		go func(k int) {
			defer wg.Done()
			time.Sleep(time.Duration(k) * 40 * time.Millisecond)
			first, second := sess[k%nSessions], sess[(k+1)%nSessions]
			r := stores[k%nStores].Sessions()
			err := r.WithSessionLock(ctx, first.ID, func(ctx context.Context, tx repo.Sessions) error {
				if _, err := tx.AppendMessages(ctx, first.ID, textMsg(fmt.Sprintf("h%d-a", k), repo.RoleUser, "x")); err != nil {
					return err
				}
				time.Sleep(hold)
				if _, err := tx.AppendMessages(ctx, second.ID, textMsg(fmt.Sprintf("h%d-b", k), repo.RoleUser, "x")); err != nil {
					return err
				}
				time.Sleep(hold / 3)
				return nil
			})
			if errors.Is(err, agentstore.ErrRetryable) {
				return
			}
			if err != nil {
				fail(fmt.Errorf("holder %d: %w", k, err))
				return
			}
			committed(first.ID, 1)
			committed(second.ID, 1)
		}(k)
	}

	// The consumer pages while the writers run, resuming from its cursor.
	done := make(chan struct{})
	var seen []repo.Change
	cursor := start
	poll := func() {
		for {
			page, err := consumer.Changes(ctx, repo.ChangesParams{After: cursor, Limit: 7})
			if err != nil {
				t.Errorf("consumer: %v", err)
				return
			}
			seen = append(seen, page.Changes...)
			cursor = page.Next
			if len(page.Changes) < 7 {
				return
			}
		}
	}
	go func() { wg.Wait(); close(done) }()
	for running := true; running; {
		select {
		case <-done:
			running = false
		case <-time.After(5 * time.Millisecond):
			poll()
		}
	}
	for _, err := range errs {
		t.Error(err)
	}
	// Every writer has committed: the rest becomes readable once the
	// transactions running meanwhile have ended.
	want := 0
	for _, n := range apps {
		want += n
	}
	for deadline := time.Now().Add(time.Minute); ; {
		poll()
		n := 0
		for _, c := range seen {
			n += int(c.ToSeq - c.FromSeq)
		}
		if n >= want || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}

	cursors := map[repo.ChangeCursor]bool{}
	lastTo := map[uuid.UUID]int64{}
	got := map[uuid.UUID]int{}
	for _, c := range seen {
		if cursors[c.Cursor] {
			t.Fatalf("change %s seen twice", c.Cursor)
		}
		cursors[c.Cursor] = true
		if c.Kind != repo.ChangeSessionUpdated {
			continue
		}
		if c.FromSeq != lastTo[c.SessionID] {
			t.Fatalf("session %s: change %s appends (%d, %d] after (.., %d]: out of commit order or a change missed",
				c.SessionID, c.Cursor, c.FromSeq, c.ToSeq, lastTo[c.SessionID])
		}
		lastTo[c.SessionID] = c.ToSeq
		got[c.SessionID] += int(c.ToSeq - c.FromSeq)
	}
	for _, s := range sess {
		if got[s.ID] != apps[s.ID] {
			t.Errorf("session %s: the feed reports %d appended messages, %d were committed", s.ID, got[s.ID], apps[s.ID])
		}
		if n := mustLoad(t, stores[0].Sessions(), s.ID).LastSeq; n != lastTo[s.ID] {
			t.Errorf("session %s: last seq %d, the feed ends at %d", s.ID, n, lastTo[s.ID])
		}
	}
	// A second consumer reading the same range at once agrees.
	again, _ := readAllChanges(t, consumer, repo.ChangesParams{After: start})
	if fmtChanges(again) != fmtChanges(seen) {
		t.Fatalf("a fresh walk differs from the concurrent one (%d vs %d changes)", len(again), len(seen))
	}
}

// testChangeFeedWatch: Watch on one Store delivers the changes another
// Store commits, in order and exactly once, resumes from a cursor, returns
// fn's error as it is and ctx's error when ctx ends.
func testChangeFeedWatch(t *testing.T, h *harness) {
	w, wr := h.Open(t, withPollInterval(50*time.Millisecond)), h.Open(t)
	f := feedOf(t, w)
	r := wr.Sessions()
	ctx := context.Background()
	_, start := readAllChanges(t, f, repo.ChangesParams{})
	s := repo.NewSession()
	mustSave(t, r, s)

	const n = 10
	got := make(chan repo.Change, 4*n)
	wctx, cancel := context.WithCancel(ctx)
	res := make(chan error, 1)
	go func() {
		res <- f.Watch(wctx, repo.ChangesParams{After: start, SessionID: s.ID, Limit: 3}, func(c repo.Change) error {
			got <- c
			return nil
		})
	}()
	for i := 0; i < n; i++ {
		if _, err := r.AppendMessages(ctx, s.ID, textMsg(fmt.Sprintf("m%d", i), repo.RoleUser, "x")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	var seen []repo.Change
	deadline := time.After(30 * time.Second)
	for len(seen) < n+1 {
		select {
		case c := <-got:
			seen = append(seen, c)
		case <-deadline:
			t.Fatalf("watch delivered %d of %d changes", len(seen), n+1)
		}
	}
	cancel()
	if err := <-res; !errors.Is(err, context.Canceled) {
		t.Fatalf("watch after cancel: %v, want context.Canceled", err)
	}
	if seen[0].Kind != repo.ChangeSessionCreated {
		t.Fatalf("first change %v", seen[0])
	}
	for i := 1; i <= n; i++ {
		if seen[i].FromSeq != int64(i-1) || seen[i].ToSeq != int64(i) {
			t.Fatalf("change %d: (%d, %d]", i, seen[i].FromSeq, seen[i].ToSeq)
		}
	}
	select {
	case c := <-got:
		t.Fatalf("extra change %v", c)
	default:
	}
	// fn's error ends the watch; resuming from the last cursor sees only
	// what came after it.
	stop := errors.New("stop")
	if err := f.Watch(ctx, repo.ChangesParams{After: seen[4].Cursor, SessionID: s.ID}, func(c repo.Change) error {
		if c.Cursor != seen[5].Cursor {
			t.Errorf("resumed at %v, want %v", c.Cursor, seen[5].Cursor)
		}
		return stop
	}); err != stop {
		t.Fatalf("watch: %v, want fn's error", err)
	}
	dctx, dcancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer dcancel()
	if err := f.Watch(dctx, repo.ChangesParams{After: seen[n].Cursor, SessionID: s.ID}, func(c repo.Change) error {
		return fmt.Errorf("unexpected change %v", c)
	}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("idle watch: %v, want DeadlineExceeded", err)
	}
}

// testChangeFeedPurge: PurgeChanges deletes the feed's prefix of changes
// older than olderThan (in batches, the count is the total) and keeps the
// younger ones; a consumer's cursor inside the kept part still resumes.
func testChangeFeedPurge(t *testing.T, h *harness) {
	st := h.New(t)
	f := feedOf(t, st)
	r := st.Sessions()
	ctx := context.Background()
	if n, err := f.PurgeChanges(ctx, 0, 0); err != nil {
		t.Fatal(err)
	} else if n != 0 {
		t.Fatalf("purge with the default retention deleted %d fresh changes", n)
	}
	old := repo.NewSession()
	mustSave(t, r, old)
	for i := 0; i < 4; i++ {
		if _, err := r.AppendMessages(ctx, old.ID, textMsg(fmt.Sprintf("o%d", i), repo.RoleUser, "x")); err != nil {
			t.Fatal(err)
		}
	}
	before := waitForChanges(t, f, repo.ChangesParams{}, 5)
	time.Sleep(1500 * time.Millisecond)
	mid := time.Now()
	young := repo.NewSession()
	mustSave(t, r, young)
	if _, err := r.AppendMessages(ctx, young.ID, textMsg("y", repo.RoleUser, "x")); err != nil {
		t.Fatal(err)
	}
	waitForChanges(t, f, repo.ChangesParams{}, len(before)+2)
	// The cutoff falls in the pause, however long the wait above took.
	n, err := f.PurgeChanges(ctx, time.Since(mid)+500*time.Millisecond, 2)
	if err != nil {
		t.Fatal(err)
	}
	if n != len(before) {
		t.Fatalf("purge deleted %d, want the %d older changes", n, len(before))
	}
	left, _ := readAllChanges(t, f, repo.ChangesParams{})
	if len(left) != 2 || left[0].SessionID != young.ID || left[1].SessionID != young.ID {
		t.Fatalf("left after purge: %v", left)
	}
	// The cursor of the last purged change missed nothing: it resumes at
	// the first kept change.
	resumed, _ := readAllChanges(t, f, repo.ChangesParams{After: before[len(before)-1].Cursor})
	if fmtChanges(resumed) != fmtChanges(left) {
		t.Fatalf("resumed %v, want %v", resumed, left)
	}
	// A cursor before it would miss purged changes: ErrCursorExpired, with
	// the horizon to resume after, from Changes and from Watch; the start
	// of the feed reads what is kept.
	stale := before[len(before)-2].Cursor
	_, err = f.Changes(ctx, repo.ChangesParams{After: stale})
	var ce *agentstore.CursorExpiredError
	if !errors.Is(err, agentstore.ErrCursorExpired) || !errors.As(err, &ce) || errors.Is(err, agentstore.ErrRetryable) {
		t.Fatalf("changes after a purged cursor: %v, want a CursorExpiredError", err)
	}
	if ce.Cursor != stale || ce.Horizon != before[len(before)-1].Cursor {
		t.Fatalf("expired error: cursor %q horizon %q, want %q %q", ce.Cursor, ce.Horizon, stale, before[len(before)-1].Cursor)
	}
	if _, err := f.Changes(ctx, repo.ChangesParams{After: stale, SessionID: young.ID}); !errors.Is(err, agentstore.ErrCursorExpired) {
		t.Fatalf("session-filtered changes after a purged cursor: %v", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	called := false
	if err := f.Watch(wctx, repo.ChangesParams{After: stale}, func(repo.Change) error { called = true; return nil }); !errors.Is(err, agentstore.ErrCursorExpired) || called {
		t.Fatalf("watch after a purged cursor: %v (delivered: %v), want ErrCursorExpired before any change", err, called)
	}
	if after, _ := readAllChanges(t, f, repo.ChangesParams{After: ce.Horizon}); fmtChanges(after) != fmtChanges(left) {
		t.Fatalf("after the horizon: %v, want %v", after, left)
	}
	// A tenant's purge sets that tenant's horizon: its cursor expires in its
	// view; another tenant's view is not affected.
	if tv, ok := st.ForTenant("feed-purge-a").(feedHolder); ok {
		_, tstart := readAllChanges(t, f, repo.ChangesParams{})
		ra := st.ForTenant("feed-purge-a").Sessions()
		a := repo.NewSession()
		mustSave(t, ra, a)
		if _, err := ra.AppendMessages(ctx, a.ID, textMsg("a1", repo.RoleUser, "x")); err != nil {
			t.Fatal(err)
		}
		got := waitForChanges(t, tv.ChangeFeed(), repo.ChangesParams{}, 2)
		time.Sleep(20 * time.Millisecond) // both changes older than the cutoff, by the millisecond
		if n, err := tv.ChangeFeed().PurgeChanges(ctx, time.Millisecond, 0); err != nil || n != 2 {
			t.Fatalf("tenant purge: %d, %v, want 2", n, err)
		}
		if _, err := tv.ChangeFeed().Changes(ctx, repo.ChangesParams{After: got[0].Cursor}); !errors.Is(err, agentstore.ErrCursorExpired) {
			t.Fatalf("tenant view after its purge: %v, want ErrCursorExpired", err)
		}
		other := st.ForTenant("feed-purge-b").(feedHolder).ChangeFeed()
		if _, err := other.Changes(ctx, repo.ChangesParams{After: tstart}); err != nil {
			t.Fatalf("another tenant's view after a tenant's purge: %v", err)
		}
	}
}
