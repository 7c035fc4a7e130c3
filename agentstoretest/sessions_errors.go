package agentstoretest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo"
)

// sessionErrorsTests are the SessionErrors area's tests of this file.
func sessionErrorsTests() []test {
	return tests(
		test{"SessionsEnqueueRacingDeleteIsNotFound", testSessionsEnqueueRacingDeleteIsNotFound},
		test{"SessionsSetTodosDuplicateIDRefused", testSessionsSetTodosDuplicateIDRefused},
		test{"SessionsMoneyExactRoundTrip", testSessionsMoneyExactRoundTrip},
		test{"SessionsUpdatedAtNeverBackwards", testSessionsUpdatedAtNeverBackwards},
		test{"SessionsForkFailureLeavesNoFork", testSessionsForkFailureLeavesNoFork},
		test{"SessionsCleanupCountsExpiredDescendants", testSessionsCleanupCountsExpiredDescendants},
		test{"SessionsAppendNothingToMissingSession", testSessionsAppendNothingToMissingSession},
		test{"SessionsCorruptRowIsNotInvalidInput", testSessionsCorruptRowIsNotInvalidInput},
		test{"SessionsAppendIdempotentWithIDs", testSessionsAppendIdempotentWithIDs},
		test{"SessionsStaleVersionCarriesStored", testSessionsStaleVersionCarriesStored},
		test{"SessionsStrictAppend", testSessionsStrictAppend},
		test{"SessionsWithSessionLock", testSessionsWithSessionLock},
		test{"SessionsNoDriverErrorUnderRaces", testSessionsNoDriverErrorUnderRaces},
	)
}

// driverTexts are fragments of database-driver and GORM error text that
// must never reach a caller of the session API.
func driverTexts() []string {
	return []string{"SQLSTATE", "duplicated key", "sqlite3", "violates", "constraint", "UNIQUE", "FOREIGN KEY",
		"cannot affect row", "numeric field overflow", "pq:", "pgconn"}
}

// checkCleanErr fails unless err is nil or matches one of the documented
// sentinels, carries no driver text, and names every one of names.
func checkCleanErr(t *testing.T, what string, err error, names ...string) {
	t.Helper()
	if err == nil {
		return
	}
	known := false
	for _, s := range []error{agentstore.ErrNotFound, agentstore.ErrStaleVersion, agentstore.ErrDuplicate,
		agentstore.ErrInvalidInput, agentstore.ErrCorruptRow, agentstore.ErrLockLost, agentstore.ErrRetryable} {
		if errors.Is(err, s) {
			known = true
		}
	}
	if errors.Is(err, agentstore.ErrConflict) && !errors.Is(err, agentstore.ErrStaleVersion) && !errors.Is(err, agentstore.ErrDuplicate) {
		t.Errorf("%s: ErrConflict without a cause (ErrStaleVersion or ErrDuplicate): %v", what, err)
	}
	if !known {
		t.Errorf("%s: error matches no documented sentinel: %v", what, err)
	}
	for _, d := range driverTexts() {
		if strings.Contains(err.Error(), d) {
			t.Errorf("%s: driver text %q reached the caller: %v", what, d, err)
		}
	}
	for _, n := range names {
		if !strings.Contains(err.Error(), n) {
			t.Errorf("%s: error does not name %s: %v", what, n, err)
		}
	}
}

// testSessionsEnqueueRacingDeleteIsNotFound (issue 12 item 1): an Enqueue
// racing a Delete of its session either lands (and is deleted with it) or
// is ErrNotFound naming the session — never a foreign-key error.
func testSessionsEnqueueRacingDeleteIsNotFound(t *testing.T, h *harness) {
	st, _ := newSessionsStore(t, h)
	r, q := st.Sessions(), st.SessionQueue()
	ctx := context.Background()
	notFound := 0
	for i := 0; i < 30; i++ {
		s := repo.NewSession()
		mustSave(t, r, s)
		var wg sync.WaitGroup
		errs := make([]error, 4)
		wg.Add(5)
		go func() { defer wg.Done(); _, _ = r.Delete(ctx, s.ID) }()
		for j := 0; j < 4; j++ {
			go func() {
				defer wg.Done()
				_, errs[j] = q.Enqueue(ctx, s.ID, fmt.Sprintf("job %d", j), int32(j))
			}()
		}
		wg.Wait()
		for j, err := range errs {
			if err != nil && !errors.Is(err, agentstore.ErrNotFound) {
				t.Fatalf("round %d enqueue %d: %v, want nil or ErrNotFound", i, j, err)
			}
			if err != nil {
				notFound++
			}
			checkCleanErr(t, "enqueue racing delete", err, s.ID.String())
		}
	}
	if n := h.count(t, st, models.TableQueue, nil); n != 0 {
		t.Fatalf("%d queue items outlived their sessions", n)
	}
	t.Logf("%d of 120 enqueues lost the race (ErrNotFound)", notFound)
}

// testSessionsSetTodosDuplicateIDRefused (item 2): one todo id twice is
// ErrInvalidInput before any SQL on every dialect; nothing is written, and
// a todo id of another session is ErrDuplicate.
func testSessionsSetTodosDuplicateIDRefused(t *testing.T, h *harness) {
	st, _ := newSessionsStore(t, h)
	r := st.Sessions()
	ctx := context.Background()
	s := repo.NewSession()
	mustSave(t, r, s)
	id := uuid.New()
	_, err := r.SetTodos(ctx, s.ID, []repo.TodoItem{{ID: id, Content: "a"}, {ID: id, Content: "b"}})
	if !errors.Is(err, agentstore.ErrInvalidInput) || !strings.Contains(err.Error(), id.String()) {
		t.Fatalf("duplicate todo id: %v, want ErrInvalidInput naming %s", err, id)
	}
	checkCleanErr(t, "set todos", err, s.ID.String())
	if n := h.count(t, st, models.TableTodos, nil); n != 0 {
		t.Fatalf("%d todos stored after a refused list", n)
	}
	s2 := mustLoad(t, r, s.ID)
	s2.Todos = []repo.TodoItem{{ID: id, Content: "a"}, {ID: id, Content: "b"}}
	if err := r.Save(ctx, s2); !errors.Is(err, agentstore.ErrInvalidInput) {
		t.Fatalf("Save with a duplicate todo id: %v, want ErrInvalidInput", err)
	}
	// A todo id stored under another session.
	if _, err := r.SetTodos(ctx, s.ID, []repo.TodoItem{{ID: id, Content: "a"}}); err != nil {
		t.Fatal(err)
	}
	other := repo.NewSession()
	mustSave(t, r, other)
	_, err = r.SetTodos(ctx, other.ID, []repo.TodoItem{{ID: id, Content: "x"}})
	if !errors.Is(err, agentstore.ErrDuplicate) || !errors.Is(err, agentstore.ErrConflict) {
		t.Fatalf("todo id of another session: %v, want ErrDuplicate", err)
	}
	checkCleanErr(t, "set todos of another session's id", err, other.ID.String())
}

// testSessionsMoneyExactRoundTrip (item 3 and "Money"): total_cost_usd
// round-trips digit for digit and with its scale on every dialect within
// the documented bound; beyond it is ErrInvalidInput before any SQL.
func testSessionsMoneyExactRoundTrip(t *testing.T, h *harness) {
	st, _ := newSessionsStore(t, h)
	r := st.Sessions()
	ctx := context.Background()
	for _, v := range []string{"0.0000000001", "1.23456789012", "123456789012.5", "1.10", "-42.000000000000000000001",
		"98765432109876543210987654321098765432109876543210.0123456789012345678901234567890123456789",
		"1" + strings.Repeat("0", 1000), "0." + strings.Repeat("0", repo.MaxCostFractionDigits-1) + "1", strings.Repeat("9", 5000) + ".5"} {
		s := repo.NewSession()
		s.TotalCostUSD = decimal.RequireFromString(v)
		if err := r.Save(ctx, s); err != nil {
			t.Fatalf("save cost %.40s: %v", v, err)
		}
		got := mustLoad(t, r, s.ID)
		if got.TotalCostUSD.String() != s.TotalCostUSD.String() || got.TotalCostUSD.Exponent() != s.TotalCostUSD.Exponent() {
			t.Fatalf("cost %.60s came back as %.60s (exponent %d, want %d)", v, got.TotalCostUSD.String(),
				got.TotalCostUSD.Exponent(), s.TotalCostUSD.Exponent())
		}
		// An update keeps it too.
		got.TotalCostUSD = got.TotalCostUSD.Add(decimal.RequireFromString("0.000000000000000000000000000001"))
		mustSave(t, r, got)
		again := mustLoad(t, r, s.ID)
		if !again.TotalCostUSD.Equal(got.TotalCostUSD) {
			t.Fatalf("updated cost %.60s came back as %.60s", got.TotalCostUSD, again.TotalCostUSD)
		}
	}
	before := h.count(t, st, models.TableSessions, nil)
	for _, v := range []decimal.Decimal{decimal.New(1, -(repo.MaxCostFractionDigits + 1)), decimal.New(1, repo.MaxCostIntegerDigits)} {
		s := repo.NewSession()
		s.TotalCostUSD = v
		err := r.Save(ctx, s)
		if !errors.Is(err, agentstore.ErrInvalidInput) {
			t.Fatalf("cost beyond the bound (exponent %d): %v, want ErrInvalidInput", v.Exponent(), err)
		}
		checkCleanErr(t, "save out-of-bound cost", err)
	}
	if n := h.count(t, st, models.TableSessions, nil); n != before {
		t.Fatalf("refused costs were written: %d sessions, want %d", n, before)
	}
}

// testSessionsUpdatedAtNeverBackwards (item 4): a writer whose clock reads
// earlier than the stored updated_at (as a writer delayed between reading
// the clock and taking the row lock does) leaves updated_at where it is;
// every session writer obeys it, and a (updated_at, id) walk stays whole.
func testSessionsUpdatedAtNeverBackwards(t *testing.T, h *harness) {
	late := newTestClock()
	late.Advance(time.Hour)
	early := newTestClock()
	stLate := h.New(t, withClock(late.Now))
	stEarly := h.Open(t, withClock(early.Now))
	ctx := context.Background()
	s := repo.NewSession()
	mustSave(t, stLate.Sessions(), s)
	if _, err := stLate.Sessions().AppendMessages(ctx, s.ID, textMsg("a", repo.RoleUser, "a")); err != nil {
		t.Fatal(err)
	}
	want := late.Now()
	re := stEarly.Sessions()
	check := func(what string) {
		t.Helper()
		got := mustLoad(t, re, s.ID)
		if !got.UpdatedAt.Equal(want) {
			t.Fatalf("after %s with an earlier clock: updated_at %v, want %v (it moved backwards)", what, got.UpdatedAt, want)
		}
	}
	if _, err := re.AppendMessages(ctx, s.ID, textMsg("b", repo.RoleAssistant, "b")); err != nil {
		t.Fatal(err)
	}
	check("AppendMessages")
	if _, err := re.SetTodos(ctx, s.ID, []repo.TodoItem{{Content: "t"}}); err != nil {
		t.Fatal(err)
	}
	check("SetTodos")
	if _, err := re.AddSummary(ctx, repo.SummarySnapshot{SessionID: s.ID, Summary: "sum"}); err != nil {
		t.Fatal(err)
	}
	check("AddSummary")
	cur := mustLoad(t, re, s.ID)
	cur.State = repo.StateActive
	mustSave(t, re, cur)
	if !cur.UpdatedAt.Equal(want) {
		t.Fatalf("Save set the struct's UpdatedAt to %v, want the stored %v", cur.UpdatedAt, want)
	}
	check("Save")
}

// testSessionsForkFailureLeavesNoFork (item 5): a Fork whose read-back
// fails (a corrupt row on the branch) leaves no fork behind, however often
// it is retried.
func testSessionsForkFailureLeavesNoFork(t *testing.T, h *harness) {
	st, _ := newSessionsStore(t, h)
	r := st.Sessions()
	ctx := context.Background()
	s := repo.NewSession()
	s.AddMessage(textMsg("m1", repo.RoleUser, "1"))
	s.AddMessage(textMsg("m2", repo.RoleAssistant, "2"))
	mustSave(t, r, s)
	// plant: an unknown role on the branch (the API refuses to write it).
	h.update(t, st, models.TableMessages, Row{"session_id": s.ID, "seq": 1}, Row{"role": "developer"})
	for i := 0; i < 3; i++ {
		f, err := r.Fork(ctx, s.ID, "")
		if !errors.Is(err, agentstore.ErrCorruptRow) || f != nil {
			t.Fatalf("fork over a corrupt row: %v, %v; want ErrCorruptRow and no session", f, err)
		}
		checkCleanErr(t, "fork", err, s.ID.String())
	}
	kids, err := r.ListChildren(ctx, s.ID)
	if err != nil || len(kids) != 0 {
		t.Fatalf("failed forks left %v (%v)", kids, err)
	}
	if n := h.count(t, st, models.TableSessions, nil); n != 1 {
		t.Fatalf("%d sessions after failed forks, want 1", n)
	}
}

// testSessionsCleanupCountsExpiredDescendants (item 6): an expired child
// deleted by its expired parent's cascade counts, whatever the batch size;
// an unexpired child is deleted by the cascade but not counted.
func testSessionsCleanupCountsExpiredDescendants(t *testing.T, h *harness) {
	for _, batch := range []int{1, 2, 0} {
		st, clock := newSessionsStore(t, h)
		r := st.Sessions()
		exp := clock.Now().Add(time.Minute)
		parent := repo.NewSession()
		parent.ExpiresAt = &exp
		mustSave(t, r, parent)
		child := repo.NewSubagentSession(parent.ID, "a", "d")
		child.ExpiresAt = &exp
		mustSave(t, r, child)
		grandchild := repo.NewSubagentSession(child.ID, "a", "d")
		grandchild.ExpiresAt = &exp
		mustSave(t, r, grandchild)
		keep := repo.NewSubagentSession(parent.ID, "a", "never expires")
		mustSave(t, r, keep)
		clock.Advance(time.Hour)
		n, err := r.CleanupExpired(context.Background(), batch)
		if err != nil || n != 3 {
			t.Fatalf("batch %d: CleanupExpired = %d, %v; want 3 (parent, child, grandchild)", batch, n, err)
		}
		if c := h.count(t, st, models.TableSessions, nil); c != 0 {
			t.Fatalf("batch %d: %d sessions left", batch, c)
		}
	}
}

// testSessionsAppendNothingToMissingSession (item 7): an empty append is
// ErrNotFound for a session that does not exist, and nil for one that does.
func testSessionsAppendNothingToMissingSession(t *testing.T, h *harness) {
	st, _ := newSessionsStore(t, h)
	r := st.Sessions()
	ctx := context.Background()
	missing := uuid.New()
	_, err := r.AppendMessages(ctx, missing)
	if !errors.Is(err, agentstore.ErrNotFound) {
		t.Fatalf("empty append to a missing session: %v, want ErrNotFound", err)
	}
	checkCleanErr(t, "empty append", err, missing.String())
	_, err = r.AppendMessagesWith(ctx, missing, repo.AppendOptions{ExpectedVersion: 1})
	if !errors.Is(err, agentstore.ErrNotFound) {
		t.Fatalf("empty strict append to a missing session: %v, want ErrNotFound", err)
	}
	s := repo.NewSession()
	mustSave(t, r, s)
	if out, err := r.AppendMessages(ctx, s.ID); err != nil || len(out) != 0 {
		t.Fatalf("empty append: %v, %v", out, err)
	}
	if _, err := r.AppendMessagesWith(ctx, s.ID, repo.AppendOptions{ExpectedVersion: 2}); !errors.Is(err, agentstore.ErrStaleVersion) {
		t.Fatalf("empty strict append at a wrong version: %v, want ErrStaleVersion", err)
	}
	if got := mustLoad(t, r, s.ID); got.Version != 1 {
		t.Fatalf("empty appends bumped the version to %d", got.Version)
	}
	// A tenant view does not see another tenant's session.
	other := repo.NewSession()
	other.TenantID = "a"
	mustSave(t, r, other)
	if _, err := st.ForTenant("b").Sessions().AppendMessages(ctx, other.ID); !errors.Is(err, agentstore.ErrNotFound) {
		t.Fatalf("empty append to another tenant's session: %v, want ErrNotFound", err)
	}
}

// testSessionsCorruptRowIsNotInvalidInput (item 8): an unknown enum value
// in a stored row is ErrCorruptRow and never ErrInvalidInput (which means
// "refused before any SQL"), on every reader.
func testSessionsCorruptRowIsNotInvalidInput(t *testing.T, h *harness) {
	st, _ := newSessionsStore(t, h)
	r := st.Sessions()
	ctx := context.Background()
	s := repo.NewSession()
	s.AddMessage(textMsg("m1", repo.RoleUser, "1"))
	mustSave(t, r, s)
	it, err := st.SessionQueue().Enqueue(ctx, s.ID, "job", 0)
	if err != nil {
		t.Fatal(err)
	}
	// plant: unknown enum values the API refuses to write.
	h.update(t, st, models.TableSessions, Row{"id": s.ID}, Row{"state": "hibernating"})
	h.update(t, st, models.TableQueue, Row{"session_id": s.ID}, Row{"status": "parked"})
	_, loadErr := r.Load(ctx, s.ID)
	_, listErr := r.List(ctx, repo.ListParams{})
	_, itemErr := st.SessionQueue().Item(ctx, it.ID)
	for what, err := range map[string]error{"Load": loadErr, "List": listErr, "Item": itemErr} {
		var ce *agentstore.CorruptRowError
		if !errors.Is(err, agentstore.ErrCorruptRow) || !errors.As(err, &ce) {
			t.Errorf("%s of a corrupt row: %v, want a CorruptRowError", what, err)
			continue
		}
		if errors.Is(err, agentstore.ErrInvalidInput) {
			t.Errorf("%s of a corrupt row also matches ErrInvalidInput: %v", what, err)
		}
		if !strings.Contains(err.Error(), "hibernating") && !strings.Contains(err.Error(), "parked") {
			t.Errorf("%s: the error does not show the stored value: %v", what, err)
		}
	}
}

// testSessionsAppendIdempotentWithIDs (item 9, "Idempotent writes"): the
// same batch with caller-set ids appended again returns the stored
// messages with their seqs and writes nothing; a different message under a
// stored id, or a batch only partly stored, is ErrDuplicate naming the id;
// one id twice in a batch is ErrInvalidInput.
func testSessionsAppendIdempotentWithIDs(t *testing.T, h *harness) {
	st, _ := newSessionsStore(t, h)
	r := st.Sessions()
	ctx := context.Background()
	s := repo.NewSession()
	mustSave(t, r, s)
	if _, err := r.AppendMessages(ctx, s.ID, textMsg("m0", repo.RoleUser, "0")); err != nil {
		t.Fatal(err)
	}
	batch := []repo.Message{textMsg("m1", repo.RoleUser, "1"), textMsg("m2", repo.RoleAssistant, "2")}
	first, err := r.AppendMessages(ctx, s.ID, batch...)
	if err != nil {
		t.Fatal(err)
	}
	v := mustLoad(t, r, s.ID).Version
	for i := 0; i < 2; i++ {
		again, err := r.AppendMessages(ctx, s.ID, batch...)
		if err != nil {
			t.Fatalf("retry %d: %v, want the stored messages", i, err)
		}
		if fmt.Sprint(msgSeqs(again)) != fmt.Sprint(msgSeqs(first)) || fmt.Sprint(msgIDs(again)) != "[m1 m2]" ||
			*again[0].ParentID != "m0" || string(again[1].Content) != string(batch[1].Content) {
			t.Fatalf("retry %d returned %v %v, want seqs %v", i, msgIDs(again), msgSeqs(again), msgSeqs(first))
		}
	}
	got := mustLoad(t, r, s.ID)
	if got.MessageCount != 3 || got.Version != v || h.count(t, st, models.TableMessages, nil) != 3 {
		t.Fatalf("retries wrote: count %d version %d (want 3, %d)", got.MessageCount, got.Version, v)
	}
	// Another message under a stored id.
	_, err = r.AppendMessages(ctx, s.ID, textMsg("m2", repo.RoleAssistant, "other text"))
	if !errors.Is(err, agentstore.ErrDuplicate) || !errors.Is(err, agentstore.ErrConflict) || errors.Is(err, agentstore.ErrStaleVersion) {
		t.Fatalf("other content under m2: %v, want ErrDuplicate", err)
	}
	checkCleanErr(t, "append duplicate id", err, s.ID.String(), `"m2"`)
	// A batch only partly stored.
	_, err = r.AppendMessages(ctx, s.ID, batch[0], textMsg("m3", repo.RoleUser, "3"))
	if !errors.Is(err, agentstore.ErrDuplicate) {
		t.Fatalf("partly stored batch: %v, want ErrDuplicate", err)
	}
	checkCleanErr(t, "append partly stored batch", err, s.ID.String(), `"m1"`)
	// One id twice in a batch.
	_, err = r.AppendMessages(ctx, s.ID, textMsg("x", repo.RoleUser, "1"), textMsg("x", repo.RoleUser, "2"))
	if !errors.Is(err, agentstore.ErrInvalidInput) {
		t.Fatalf("one id twice: %v, want ErrInvalidInput", err)
	}
	if h.count(t, st, models.TableMessages, nil) != 3 {
		t.Fatal("refused appends wrote messages")
	}
	// Roles system and tool round-trip (and are part of the comparison).
	sys := textMsg("sys", repo.RoleSystem, "You are terse.")
	tool := textMsg("tool-1", repo.RoleTool, `{"result":42}`)
	if _, err := r.AppendMessages(ctx, s.ID, sys, tool); err != nil {
		t.Fatalf("system and tool messages: %v", err)
	}
	loaded := mustLoad(t, r, s.ID)
	if n := len(loaded.Messages); n != 5 || loaded.Messages[3].Role != repo.RoleSystem || loaded.Messages[4].Role != repo.RoleTool {
		t.Fatalf("roles after load: %+v", loaded.Messages)
	}
	tool.Role = repo.RoleUser
	if _, err := r.AppendMessages(ctx, s.ID, sys, tool); !errors.Is(err, agentstore.ErrDuplicate) {
		t.Fatalf("same id, other role: %v, want ErrDuplicate", err)
	}
	// Save writes system and tool messages too.
	loaded.AddMessage(textMsg("sys-2", repo.RoleSystem, "again"))
	mustSave(t, r, loaded)
	if m := mustLoad(t, r, s.ID).Messages; m[len(m)-1].Role != repo.RoleSystem {
		t.Fatalf("Save of a system message: %+v", m[len(m)-1])
	}
}

// testSessionsStaleVersionCarriesStored ("Idempotent writes", item 11): a
// stale Save is ErrStaleVersion (and ErrConflict, not ErrDuplicate), a
// *StaleVersionError with the stored version, and says what to do; Save of
// a new session under a stored id is ErrDuplicate.
func testSessionsStaleVersionCarriesStored(t *testing.T, h *harness) {
	st, _ := newSessionsStore(t, h)
	r := st.Sessions()
	ctx := context.Background()
	s := repo.NewSession()
	mustSave(t, r, s)
	if _, err := r.AppendMessages(ctx, s.ID, textMsg("a", repo.RoleUser, "a")); err != nil {
		t.Fatal(err)
	}
	s.State = repo.StateActive
	err := r.Save(ctx, s) // the struct is at version 1, the row at 2
	var sv *agentstore.StaleVersionError
	if !errors.As(err, &sv) || sv.Stored != 2 || sv.Expected != 1 || sv.SessionID != s.ID {
		t.Fatalf("stale save: %v (%+v), want a StaleVersionError stored 2 expected 1", err, sv)
	}
	if !errors.Is(err, agentstore.ErrStaleVersion) || !errors.Is(err, agentstore.ErrConflict) || errors.Is(err, agentstore.ErrDuplicate) {
		t.Fatalf("stale save matches the wrong sentinels: %v", err)
	}
	if !strings.Contains(err.Error(), "Load") || !strings.Contains(err.Error(), "WithSessionLock") {
		t.Fatalf("stale save does not say what to do: %v", err)
	}
	checkCleanErr(t, "stale save", err, s.ID.String())
	// After a Load it works.
	cur := mustLoad(t, r, s.ID)
	cur.State = repo.StateActive
	mustSave(t, r, cur)
	dup := repo.NewSession()
	dup.ID = s.ID
	err = r.Save(ctx, dup)
	if !errors.Is(err, agentstore.ErrDuplicate) || errors.Is(err, agentstore.ErrStaleVersion) {
		t.Fatalf("save of a new session under a stored id: %v, want ErrDuplicate", err)
	}
	checkCleanErr(t, "duplicate session id", err, s.ID.String())
}

// testSessionsStrictAppend ("Concurrency helpers"): AppendMessagesWith at
// the stored version appends and moves it to ExpectedVersion+1; at another
// version it writes nothing and is a StaleVersionError with the stored
// version; a strict retry that landed returns the stored messages.
func testSessionsStrictAppend(t *testing.T, h *harness) {
	st, _ := newSessionsStore(t, h)
	r := st.Sessions()
	ctx := context.Background()
	s := repo.NewSession()
	mustSave(t, r, s)
	out, err := r.AppendMessagesWith(ctx, s.ID, repo.AppendOptions{ExpectedVersion: 1}, textMsg("a", repo.RoleUser, "a"))
	if err != nil || len(out) != 1 || out[0].Seq != 1 {
		t.Fatalf("strict append at the stored version: %v, %v", out, err)
	}
	if v := mustLoad(t, r, s.ID).Version; v != 2 {
		t.Fatalf("version after a strict append: %d, want 2", v)
	}
	_, err = r.AppendMessagesWith(ctx, s.ID, repo.AppendOptions{ExpectedVersion: 1}, textMsg("b", repo.RoleUser, "b"))
	var sv *agentstore.StaleVersionError
	if !errors.As(err, &sv) || sv.Stored != 2 || sv.Expected != 1 {
		t.Fatalf("strict append at a stale version: %v, want StaleVersionError stored 2", err)
	}
	checkCleanErr(t, "strict append", err, s.ID.String())
	if got := mustLoad(t, r, s.ID); got.MessageCount != 1 || got.Version != 2 {
		t.Fatalf("a refused strict append wrote: %d messages version %d", got.MessageCount, got.Version)
	}
	// The retry of the first strict append (its reply lost) returns it.
	again, err := r.AppendMessagesWith(ctx, s.ID, repo.AppendOptions{ExpectedVersion: 1}, textMsg("a", repo.RoleUser, "a"))
	if err != nil || len(again) != 1 || again[0].Seq != 1 {
		t.Fatalf("strict retry: %v, %v; want the stored message", again, err)
	}
	// Racing strict appends at one version: exactly one lands.
	var wg sync.WaitGroup
	var mu sync.Mutex
	won, stale := 0, 0
	for i := 0; i < 6; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := r.AppendMessagesWith(ctx, s.ID, repo.AppendOptions{ExpectedVersion: 2}, textMsg(fmt.Sprintf("r%d", i), repo.RoleUser, "r"))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won++
			case errors.Is(err, agentstore.ErrStaleVersion):
				stale++
			default:
				t.Errorf("racing strict append: %v", err)
			}
		}()
	}
	wg.Wait()
	if won != 1 || stale != 5 {
		t.Fatalf("racing strict appends: %d landed, %d stale; want 1 and 5", won, stale)
	}
}

// testSessionsWithSessionLock ("Concurrency helpers"): read-modify-write
// under WithSessionLock from many goroutines loses nothing and never
// conflicts; fn's error rolls its writes back and is returned unchanged; a
// missing session is ErrNotFound; waiting for a held lock is bounded by ctx.
func testSessionsWithSessionLock(t *testing.T, h *harness) {
	st, _ := newSessionsStore(t, h)
	r := st.Sessions()
	ctx := context.Background()
	s := repo.NewSession()
	mustSave(t, r, s)
	const n = 8
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := r.WithSessionLock(ctx, s.ID, func(ctx context.Context, tx repo.Sessions) error {
				cur, err := tx.Load(ctx, s.ID)
				if err != nil {
					return err
				}
				cur.CurrentInputTokens++
				cur.AddMessage(textMsg(fmt.Sprintf("w%d", i), repo.RoleUser, "x"))
				return tx.Save(ctx, cur)
			})
			if err != nil {
				t.Errorf("locked read-modify-write %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	got := mustLoad(t, r, s.ID)
	if got.CurrentInputTokens != n || got.MessageCount != n {
		t.Fatalf("after %d locked increments: counter %d, %d messages", n, got.CurrentInputTokens, got.MessageCount)
	}
	// fn's error: returned unchanged, its writes rolled back.
	boom := errors.New("boom")
	err := r.WithSessionLock(ctx, s.ID, func(ctx context.Context, tx repo.Sessions) error {
		if _, err := tx.AppendMessages(ctx, s.ID, textMsg("rolled-back", repo.RoleUser, "x")); err != nil {
			return err
		}
		return boom
	})
	if err != boom {
		t.Fatalf("fn's error came back as %v", err)
	}
	if c := mustLoad(t, r, s.ID).MessageCount; c != n {
		t.Fatalf("a failed fn's append was kept: %d messages", c)
	}
	missing := uuid.New()
	called := false
	err = r.WithSessionLock(ctx, missing, func(context.Context, repo.Sessions) error { called = true; return nil })
	if !errors.Is(err, agentstore.ErrNotFound) || called {
		t.Fatalf("lock of a missing session: %v (fn called %v)", err, called)
	}
	checkCleanErr(t, "lock missing session", err, missing.String())
	// Bounded by ctx: while one holder sleeps, another gives up at its deadline.
	held := make(chan struct{})
	release := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- r.WithSessionLock(ctx, s.ID, func(context.Context, repo.Sessions) error {
			close(held)
			<-release
			return nil
		})
	}()
	<-held
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	start := time.Now()
	err = r.WithSessionLock(short, s.ID, func(context.Context, repo.Sessions) error { called = true; return nil })
	cancel()
	waited := time.Since(start)
	close(release)
	if err == nil || called || waited > 5*time.Second {
		t.Fatalf("second locker: %v after %v (fn called %v), want an error at its deadline", err, waited, called)
	}
	if err := <-done; err != nil {
		t.Fatalf("holder: %v", err)
	}
}

// testSessionsNoDriverErrorUnderRaces (the general rule): a Delete racing
// every session writer, concurrent inserts of one id and duplicate inputs
// give only documented sentinels, with messages that name the session and
// carry no driver text.
func testSessionsNoDriverErrorUnderRaces(t *testing.T, h *harness) {
	st, _ := newSessionsStore(t, h)
	r, q := st.Sessions(), st.SessionQueue()
	ctx := context.Background()
	type writer struct {
		name string
		fn   func(s *repo.Session) error
	}
	writers := []writer{
		{"AppendMessages", func(s *repo.Session) error {
			_, err := r.AppendMessages(ctx, s.ID, textMsg("", repo.RoleUser, "x"))
			return err
		}},
		{"AppendMessagesWith", func(s *repo.Session) error {
			_, err := r.AppendMessagesWith(ctx, s.ID, repo.AppendOptions{ExpectedVersion: 1}, textMsg("id", repo.RoleUser, "x"))
			return err
		}},
		{"Save update", func(s *repo.Session) error {
			c := *s
			c.Messages = slices.Clone(s.Messages)
			c.AddMessage(textMsg("", repo.RoleUser, "x"))
			c.Todos = []repo.TodoItem{{Content: "t"}}
			return r.Save(ctx, &c)
		}},
		{"Save child", func(s *repo.Session) error { return r.Save(ctx, repo.NewSubagentSession(s.ID, "a", "d")) }},
		{"AddSummary", func(s *repo.Session) error {
			_, err := r.AddSummary(ctx, repo.SummarySnapshot{SessionID: s.ID, Summary: "s"})
			return err
		}},
		{"SetTodos", func(s *repo.Session) error {
			_, err := r.SetTodos(ctx, s.ID, []repo.TodoItem{{Content: "t"}})
			return err
		}},
		{"Fork", func(s *repo.Session) error { _, err := r.Fork(ctx, s.ID, ""); return err }},
		{"Enqueue", func(s *repo.Session) error { _, err := q.Enqueue(ctx, s.ID, "j", 0); return err }},
		{"EnqueueWith", func(s *repo.Session) error {
			_, err := q.EnqueueWith(ctx, s.ID, repo.EnqueueParams{Content: "j", IdempotencyKey: "k"})
			return err
		}},
		{"Dequeue", func(s *repo.Session) error { _, err := q.Dequeue(ctx, s.ID, repo.DequeueParams{}); return err }},
		{"WithSessionLock", func(s *repo.Session) error {
			return r.WithSessionLock(ctx, s.ID, func(ctx context.Context, tx repo.Sessions) error {
				_, err := tx.SetTodos(ctx, s.ID, []repo.TodoItem{{Content: "t"}})
				return err
			})
		}},
	}
	for _, w := range writers {
		for round := 0; round < 8; round++ {
			s := repo.NewSession()
			s.AddMessage(textMsg("first", repo.RoleUser, "x"))
			mustSave(t, r, s)
			var wg sync.WaitGroup
			errs := make([]error, 3)
			wg.Add(4)
			go func() { defer wg.Done(); _, _ = r.Delete(ctx, s.ID) }()
			for i := range errs {
				go func() { defer wg.Done(); errs[i] = w.fn(s) }()
			}
			wg.Wait()
			for _, err := range errs {
				if err != nil && !errors.Is(err, agentstore.ErrNotFound) && !errors.Is(err, agentstore.ErrStaleVersion) &&
					!errors.Is(err, agentstore.ErrRetryable) {
					t.Errorf("%s racing Delete: %v, want nil, ErrNotFound, ErrStaleVersion or ErrRetryable", w.name, err)
				}
				checkCleanErr(t, w.name+" racing Delete", err, s.ID.String())
			}
		}
	}
	if n := h.count(t, st, models.TableSessions, nil); n != 0 {
		t.Fatalf("%d sessions outlived the deletes (children or forks of deleted sessions?)", n)
	}

	// Concurrent inserts of one id.
	id := uuid.New()
	var wg sync.WaitGroup
	errs := make([]error, 6)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := repo.NewSession()
			s.ID = id
			errs[i] = r.Save(ctx, s)
		}()
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		if err == nil {
			ok++
			continue
		}
		if !errors.Is(err, agentstore.ErrDuplicate) {
			t.Errorf("concurrent insert of one session id: %v, want ErrDuplicate", err)
		}
		checkCleanErr(t, "concurrent session insert", err, id.String())
	}
	if ok != 1 {
		t.Fatalf("%d concurrent inserts of one id succeeded, want 1", ok)
	}
	// Concurrent appends of one batch with ids, and enqueues of one key:
	// every caller gets the one stored result.
	seqs := make([]string, 6)
	items := make([]uuid.UUID, 6)
	for i := range errs {
		wg.Add(2)
		go func() {
			defer wg.Done()
			out, err := r.AppendMessages(ctx, id, textMsg("same-1", repo.RoleUser, "a"), textMsg("same-2", repo.RoleAssistant, "b"))
			checkCleanErr(t, "concurrent idempotent append", err, id.String())
			if err == nil {
				seqs[i] = fmt.Sprint(msgSeqs(out))
			}
		}()
		go func() {
			defer wg.Done()
			it, err := q.EnqueueWith(ctx, id, repo.EnqueueParams{Content: "job", Priority: 3, IdempotencyKey: "once"})
			checkCleanErr(t, "concurrent idempotent enqueue", err, id.String())
			if err == nil {
				items[i] = it.ID
			}
		}()
	}
	wg.Wait()
	for i := range seqs {
		if seqs[i] != "[1 2]" || items[i] != items[0] || items[i] == uuid.Nil {
			t.Fatalf("concurrent idempotent writes: seqs %v items %v; want [1 2] and one item for all", seqs, items)
		}
	}
	if m, qi := h.count(t, st, models.TableMessages, nil), h.count(t, st, models.TableQueue, nil); m != 2 || qi != 1 {
		t.Fatalf("concurrent idempotent writes stored %d messages, %d items; want 2, 1", m, qi)
	}
	// Duplicate inputs.
	_, err := q.EnqueueWith(ctx, id, repo.EnqueueParams{Content: "another job", IdempotencyKey: "once"})
	if !errors.Is(err, agentstore.ErrDuplicate) {
		t.Fatalf("a taken idempotency key with other content: %v, want ErrDuplicate", err)
	}
	checkCleanErr(t, "enqueue taken key", err, id.String(), `"once"`)
	tid := uuid.New()
	_, err = r.SetTodos(ctx, id, []repo.TodoItem{{ID: tid}, {ID: tid}})
	checkCleanErr(t, "duplicate todos", err, id.String(), tid.String())
	s := mustLoad(t, r, id)
	s.AddMessage(textMsg("same-1", repo.RoleUser, "other"))
	err = r.Save(ctx, s)
	if !errors.Is(err, agentstore.ErrDuplicate) {
		t.Fatalf("Save of a message under a stored id: %v, want ErrDuplicate", err)
	}
	checkCleanErr(t, "save duplicate message id", err, id.String())
	_, err = r.Load(ctx, uuid.Nil)
	checkCleanErr(t, "load missing", err, uuid.Nil.String())
}
