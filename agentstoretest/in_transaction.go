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

// inTransactionTests are the InTransaction area: the session API inside a
// transaction the application owns (TxBackend), each test once per kind of
// application transaction.
func inTransactionTests() []test {
	return tests(
		test{"RollbackLeavesNothing", testTxRollbackLeavesNothing},
		test{"CommitMakesAllVisible", testTxCommitMakesAllVisible},
		test{"FailedCallKeepsTransaction", testTxFailedCallKeepsTransaction},
		test{"DequeueInTransaction", testTxDequeueInTransaction},
		test{"EnqueueWakesAtCommit", testTxEnqueueWakesAtCommit},
		test{"ConcurrentAppTransactions", testTxConcurrentAppTransactions},
		test{"TenantScoped", testTxTenantScoped},
		test{"RefusedCalls", testTxRefusedCalls},
	)
}

// txBackend returns the backend as a TxBackend, or skips t.
func (h *harness) txBackend(t testing.TB) TxBackend {
	t.Helper()
	tb, ok := h.b.(TxBackend)
	if !ok {
		t.Skipf("agentstoretest: %s runs the session API in an application's transaction: the backend %T does not implement TxBackend", t.Name(), h.b)
	}
	return tb
}

// forEachTxKind runs fn as a subtest per kind of application transaction.
func forEachTxKind(t *testing.T, h *harness, fn func(t *testing.T, tb TxBackend, kind string)) {
	tb := h.txBackend(t)
	for _, kind := range tb.TxKinds() {
		t.Run(kind, func(t *testing.T) { fn(t, tb, kind) })
	}
}

// beginApp begins an application transaction or fails t.
func beginApp(t testing.TB, tb TxBackend, st Store, kind, tenant string) AppTx {
	t.Helper()
	tx, err := tb.BeginApp(context.Background(), st, kind, tenant)
	if err != nil {
		t.Fatalf("begin an application transaction (%s): %v", kind, err)
	}
	return tx
}

// txWrites is what writeInTx wrote in a transaction.
type txWrites struct {
	fresh *repo.Session // saved in the transaction (with one message), then appended to
	pre   uuid.UUID     // committed before; appended to and enqueued to in the transaction
	items []uuid.UUID   // the items enqueued (to fresh, then to pre)
	key   string        // the application row's key
}

// writeInTx writes through tx: a new session (Save with a message), two
// appended messages, a summary and a todo on it, a message appended to
// pre, an item enqueued to each, and the application's own row; then
// checks that the transaction sees its writes and another handle (other)
// none of them.
func writeInTx(t *testing.T, tx AppTx, other Store, pre uuid.UUID) txWrites {
	t.Helper()
	ctx := context.Background()
	w := txWrites{pre: pre, key: "k-" + uuid.NewString()}
	s := repo.NewSession()
	s.ID = uuid.New()
	s.Messages = []repo.Message{textMsg("m1", repo.RoleUser, "first")}
	if err := tx.Sessions().Save(ctx, s); err != nil {
		t.Fatalf("save in the transaction: %v", err)
	}
	w.fresh = s
	if _, err := tx.Sessions().AppendMessages(ctx, s.ID, textMsg("m2", repo.RoleAssistant, "second"), textMsg("m3", repo.RoleUser, "third")); err != nil {
		t.Fatalf("append in the transaction: %v", err)
	}
	if _, err := tx.Sessions().AddSummary(ctx, repo.SummarySnapshot{SessionID: s.ID, Summary: "so far"}); err != nil {
		t.Fatalf("add summary in the transaction: %v", err)
	}
	if _, err := tx.Sessions().SetTodos(ctx, s.ID, []repo.TodoItem{{Content: "do it", ActiveForm: "doing it", Status: repo.TodoPending}}); err != nil {
		t.Fatalf("set todos in the transaction: %v", err)
	}
	if _, err := tx.Sessions().AppendMessages(ctx, pre, textMsg("p2", repo.RoleAssistant, "more")); err != nil {
		t.Fatalf("append to a committed session in the transaction: %v", err)
	}
	for _, id := range []uuid.UUID{s.ID, pre} {
		it, err := tx.SessionQueue().Enqueue(ctx, id, "work", 1)
		if err != nil {
			t.Fatalf("enqueue in the transaction: %v", err)
		}
		w.items = append(w.items, it.ID)
	}
	if err := tx.WriteAppRow(ctx, w.key); err != nil {
		t.Fatalf("the application's own row: %v", err)
	}
	// The transaction sees its own writes.
	got, err := tx.Sessions().Load(ctx, s.ID)
	if err != nil || len(got.Messages) != 3 || got.Summary == nil || *got.Summary != "so far" || len(got.Todos) != 1 {
		t.Fatalf("load in the transaction = %+v, %v; want 3 messages, the summary and a todo", got, err)
	}
	if items, err := tx.SessionQueue().Items(ctx, pre); err != nil || len(items) != 1 {
		t.Fatalf("items of the committed session in the transaction = %v, %v; want the one enqueued", items, err)
	}
	// Nobody else does before the commit.
	if _, err := other.Sessions().Load(ctx, s.ID); !errors.Is(err, repo.ErrNotFound) {
		t.Fatalf("another handle loads the uncommitted session: %v; want ErrNotFound", err)
	}
	if items, err := other.SessionQueue().Items(ctx, pre); err != nil || len(items) != 0 {
		t.Fatalf("another handle sees uncommitted items %v, %v", items, err)
	}
	return w
}

// preSession saves a committed session with one message through st.
func preSession(t *testing.T, st Store) *repo.Session {
	t.Helper()
	s := repo.NewSession()
	s.Messages = []repo.Message{textMsg("p1", repo.RoleUser, "before")}
	mustSave(t, st.Sessions(), s)
	return s
}

// testTxRollbackLeavesNothing: after the application rolls back, nothing
// the transaction wrote through the session API is stored — no session,
// message, summary, todo or queue item, no message or item added to a
// committed session — and neither is the application's own row.
func testTxRollbackLeavesNothing(t *testing.T, h *harness) {
	forEachTxKind(t, h, func(t *testing.T, tb TxBackend, kind string) {
		ctx := context.Background()
		st, other := h.New(t), h.Open(t)
		pre := preSession(t, st)
		tx := beginApp(t, tb, st, kind, "")
		w := writeInTx(t, tx, other, pre.ID)
		if err := tx.Rollback(); err != nil {
			t.Fatalf("rollback: %v", err)
		}
		for _, r := range []Store{st, other} {
			if _, err := r.Sessions().Load(ctx, w.fresh.ID); !errors.Is(err, repo.ErrNotFound) {
				t.Fatalf("the rolled-back session loads: %v; want ErrNotFound", err)
			}
			got := mustLoad(t, r.Sessions(), pre.ID)
			if len(got.Messages) != 1 || got.Version != pre.Version || got.MessageCount != 1 {
				t.Fatalf("the committed session after the rollback: %d messages, version %d (want 1, %d)", len(got.Messages), got.Version, pre.Version)
			}
			if items, err := r.SessionQueue().Items(ctx, pre.ID); err != nil || len(items) != 0 {
				t.Fatalf("items after the rollback: %v, %v; want none", items, err)
			}
			for _, id := range w.items {
				if _, err := r.SessionQueue().Item(ctx, id); !errors.Is(err, repo.ErrNotFound) {
					t.Fatalf("rolled-back item %s: %v; want ErrNotFound", id, err)
				}
			}
		}
		if n, err := tb.AppRows(ctx, st, w.key); err != nil || n != 0 {
			t.Fatalf("application rows after the rollback: %d, %v; want 0", n, err)
		}
	})
}

// testTxCommitMakesAllVisible: after the application commits, every write
// of the transaction is stored and visible to every handle, with the
// application's own row.
func testTxCommitMakesAllVisible(t *testing.T, h *harness) {
	forEachTxKind(t, h, func(t *testing.T, tb TxBackend, kind string) {
		ctx := context.Background()
		st, other := h.New(t), h.Open(t)
		pre := preSession(t, st)
		tx := beginApp(t, tb, st, kind, "")
		w := writeInTx(t, tx, other, pre.ID)
		if err := tx.Commit(); err != nil {
			t.Fatalf("commit: %v", err)
		}
		for _, r := range []Store{st, other} {
			got := mustLoad(t, r.Sessions(), w.fresh.ID)
			if ids := msgIDs(got.Messages); fmt.Sprint(ids) != "[m1 m2 m3]" || got.Summary == nil || len(got.Todos) != 1 {
				t.Fatalf("committed session: messages %v, summary %v, %d todos; want [m1 m2 m3], the summary, 1 todo", ids, got.Summary, len(got.Todos))
			}
			if p := mustLoad(t, r.Sessions(), pre.ID); fmt.Sprint(msgIDs(p.Messages)) != "[p1 p2]" {
				t.Fatalf("committed session appended to: %v; want [p1 p2]", msgIDs(p.Messages))
			}
			for i, id := range w.items {
				it, err := r.SessionQueue().Item(ctx, id)
				if err != nil || it.Status != repo.QueuePending {
					t.Fatalf("committed item %d: %+v, %v; want pending", i, it, err)
				}
			}
			if sums, err := r.Sessions().GetSummaries(ctx, w.fresh.ID); err != nil || len(sums) != 1 {
				t.Fatalf("summaries: %v, %v; want 1", sums, err)
			}
		}
		if n, err := tb.AppRows(ctx, st, w.key); err != nil || n != 1 {
			t.Fatalf("application rows after the commit: %d, %v; want 1", n, err)
		}
		// The items committed in the transaction are dequeued normally.
		it, err := other.SessionQueue().Dequeue(ctx, pre.ID, repo.DequeueParams{})
		if err != nil || it == nil || it.ID != w.items[1] {
			t.Fatalf("dequeue after the commit: %+v, %v; want item %s", it, err, w.items[1])
		}
	})
}

// testTxFailedCallKeepsTransaction: calls that fail inside the transaction
// — a duplicate session id, a missing session, an idempotency key taken
// with other content, a message id stored with other content, a
// WithSessionLock function that fails after writing — are undone alone:
// the transaction goes on, later calls and the application's row work,
// and the commit stores exactly the successful calls' writes.
func testTxFailedCallKeepsTransaction(t *testing.T, h *harness) {
	forEachTxKind(t, h, func(t *testing.T, tb TxBackend, kind string) {
		ctx := context.Background()
		st := h.New(t)
		tx := beginApp(t, tb, st, kind, "")
		s := repo.NewSession()
		s.ID = uuid.New()
		if err := tx.Sessions().Save(ctx, s); err != nil {
			t.Fatal(err)
		}
		dup := repo.NewSession()
		dup.ID = s.ID
		if err := tx.Sessions().Save(ctx, dup); !errors.Is(err, agentstore.ErrDuplicate) {
			t.Fatalf("saving a duplicate session in the transaction: %v; want ErrDuplicate", err)
		}
		if _, err := tx.Sessions().AppendMessages(ctx, uuid.New(), textMsg("x", repo.RoleUser, "x")); !errors.Is(err, repo.ErrNotFound) {
			t.Fatalf("append to a missing session: %v; want ErrNotFound", err)
		}
		if _, err := tx.Sessions().AppendMessages(ctx, s.ID, textMsg("a1", repo.RoleUser, "one")); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Sessions().AppendMessages(ctx, s.ID, textMsg("a1", repo.RoleUser, "other content")); !errors.Is(err, agentstore.ErrDuplicate) {
			t.Fatalf("append of a stored id with other content: %v; want ErrDuplicate", err)
		}
		if _, err := tx.SessionQueue().EnqueueWith(ctx, s.ID, repo.EnqueueParams{Content: "a", IdempotencyKey: "k"}); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.SessionQueue().EnqueueWith(ctx, s.ID, repo.EnqueueParams{Content: "b", IdempotencyKey: "k"}); !errors.Is(err, agentstore.ErrDuplicate) {
			t.Fatalf("enqueue with a taken key and other content: %v; want ErrDuplicate", err)
		}
		boom := errors.New("boom")
		err := tx.Sessions().WithSessionLock(ctx, s.ID, func(ctx context.Context, in repo.Sessions) error {
			if _, err := in.AppendMessages(ctx, s.ID, textMsg("lost", repo.RoleUser, "undone")); err != nil {
				return err
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatalf("WithSessionLock in the transaction: %v; want fn's error", err)
		}
		err = tx.Sessions().WithSessionLock(ctx, s.ID, func(ctx context.Context, in repo.Sessions) error {
			_, err := in.AppendMessages(ctx, s.ID, textMsg("kept", repo.RoleAssistant, "kept"))
			return err
		})
		if err != nil {
			t.Fatalf("WithSessionLock in the transaction: %v", err)
		}
		if _, err := tx.Sessions().AppendMessages(ctx, s.ID, textMsg("a2", repo.RoleAssistant, "two")); err != nil {
			t.Fatalf("append after the failed calls: %v", err)
		}
		key := "k-" + uuid.NewString()
		if err := tx.WriteAppRow(ctx, key); err != nil {
			t.Fatalf("the application's row after the failed calls: %v", err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatalf("commit after the failed calls: %v", err)
		}
		got := mustLoad(t, st.Sessions(), s.ID)
		if ids := fmt.Sprint(msgIDs(got.Messages)); ids != "[a1 kept a2]" || got.Messages[0].Seq != 1 || got.Messages[2].Seq != 3 {
			t.Fatalf("committed messages %s (seqs %v); want [a1 kept a2] with seqs 1..3", ids, msgSeqs(got.Messages))
		}
		if items, err := st.SessionQueue().Items(ctx, s.ID); err != nil || len(items) != 1 || items[0].Content != "a" {
			t.Fatalf("committed items %v, %v; want the one item \"a\"", items, err)
		}
		if n, err := tb.AppRows(ctx, st, key); err != nil || n != 1 {
			t.Fatalf("application rows: %d, %v; want 1", n, err)
		}
	})
}

// testTxDequeueInTransaction: a Dequeue and Complete inside the
// transaction are undone by its rollback (the item is pending again, its
// attempt count as before) and stored by its commit.
func testTxDequeueInTransaction(t *testing.T, h *harness) {
	forEachTxKind(t, h, func(t *testing.T, tb TxBackend, kind string) {
		ctx := context.Background()
		st := h.New(t)
		s := repo.NewSession()
		mustSave(t, st.Sessions(), s)
		want, err := st.SessionQueue().Enqueue(ctx, s.ID, "job", 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, commit := range []bool{false, true} {
			tx := beginApp(t, tb, st, kind, "")
			it, err := tx.SessionQueue().Dequeue(ctx, s.ID, repo.DequeueParams{Owner: "app", Lease: time.Minute})
			if err != nil || it == nil || it.ID != want.ID || it.Attempts != 1 {
				t.Fatalf("dequeue in the transaction: %+v, %v; want the item, attempt 1", it, err)
			}
			if err := tx.SessionQueue().Complete(ctx, it.Lease()); err != nil {
				t.Fatalf("complete in the transaction: %v", err)
			}
			if again, err := tx.SessionQueue().Dequeue(ctx, s.ID, repo.DequeueParams{}); err != nil || again != nil {
				t.Fatalf("second dequeue in the transaction: %+v, %v; want nothing", again, err)
			}
			end := tx.Rollback
			if commit {
				end = tx.Commit
			}
			if err := end(); err != nil {
				t.Fatal(err)
			}
			got, err := st.SessionQueue().Item(ctx, want.ID)
			switch {
			case err != nil:
				t.Fatal(err)
			case !commit && (got.Status != repo.QueuePending || got.Attempts != 0 || got.LeaseToken != nil):
				t.Fatalf("after the rollback: %+v; want pending, 0 attempts, no lease", got)
			case commit && (got.Status != repo.QueueCompleted || got.Attempts != 1):
				t.Fatalf("after the commit: %+v; want completed after 1 attempt", got)
			}
		}
	})
}

// testTxEnqueueWakesAtCommit: a Dequeue waiting on another handle is not
// given an item enqueued in a transaction before the commit, and is woken
// by the commit well before its 3 s fallback re-check (at the re-check
// where the database has no wake-up channel).
func testTxEnqueueWakesAtCommit(t *testing.T, h *harness) {
	forEachTxKind(t, h, func(t *testing.T, tb TxBackend, kind string) {
		ctx := context.Background()
		fallback := 3 * time.Second
		waiter := h.New(t, withPollInterval(fallback))
		writer := h.Open(t)
		s := repo.NewSession()
		mustSave(t, writer.Sessions(), s)
		// Warm up: the first wait starts the wake-up channel.
		if it, err := waiter.SessionQueue().Dequeue(ctx, s.ID, repo.DequeueParams{Wait: 200 * time.Millisecond}); err != nil || it != nil {
			t.Fatalf("warm-up dequeue: %v %v", it, err)
		}
		type res struct {
			it  *repo.QueueItem
			err error
			at  time.Time
		}
		done := make(chan res, 1)
		go func() {
			it, err := waiter.SessionQueue().Dequeue(ctx, s.ID, repo.DequeueParams{Owner: "waiter", Wait: 20 * time.Second})
			done <- res{it, err, time.Now()}
		}()
		time.Sleep(300 * time.Millisecond)
		tx := beginApp(t, tb, writer, kind, "")
		want, err := tx.SessionQueue().Enqueue(ctx, s.ID, "at commit", 0)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond)
		select {
		case r := <-done:
			t.Fatalf("the waiting dequeue returned %+v, %v before the commit", r.it, r.err)
		default:
		}
		committed := time.Now()
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		r := <-done
		if r.err != nil || r.it == nil || r.it.ID != want.ID {
			t.Fatalf("waiting dequeue = %+v, %v; want item %s", r.it, r.err, want.ID)
		}
		d := r.at.Sub(committed)
		t.Logf("woken %v after the commit (fallback %v)", d, fallback)
		// Woken by the commit: before the fallback re-check (a pooler such
		// as PgBouncer can delay the notification by up to a second or two).
		// Without a wake-up channel (CapWakeup off) the commit is seen at
		// the fallback re-check.
		limit := fallback - 200*time.Millisecond
		if wakeLimit(waiter, fallback) > time.Second {
			limit = wakeLimit(waiter, fallback)
		}
		if d > limit {
			t.Fatalf("the waiting dequeue returned %v after the commit; want < %v (fallback %v)", d, limit, fallback)
		}
	})
}

// testTxConcurrentAppTransactions: many goroutines on two handles each run
// application transactions (half committed, half rolled back) while
// others write through the handles directly; every committed transaction
// is stored whole and no rolled-back one leaves anything.
func testTxConcurrentAppTransactions(t *testing.T, h *harness) {
	tb := h.txBackend(t)
	ctx := context.Background()
	stores := []Store{h.New(t), h.Open(t)}
	kinds := tb.TxKinds()
	shared := repo.NewSession()
	mustSave(t, stores[0].Sessions(), shared)
	const workers, perWorker = 6, 4
	type outcome struct {
		id     uuid.UUID
		key    string
		commit bool
	}
	var (
		mu   sync.Mutex
		outs []outcome
		wg   sync.WaitGroup
		errc = make(chan error, workers+2)
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := stores[w%2]
			for j := range perWorker {
				kind := kinds[(w+j)%len(kinds)]
				tx, err := tb.BeginApp(ctx, st, kind, "")
				if err != nil {
					errc <- fmt.Errorf("worker %d: begin: %w", w, err)
					return
				}
				o := outcome{id: uuid.New(), key: fmt.Sprintf("c-%d-%d-%s", w, j, uuid.NewString()), commit: j%2 == 0}
				s := repo.NewSession()
				s.ID = o.id
				err = tx.Sessions().Save(ctx, s)
				if err == nil {
					_, err = tx.Sessions().AppendMessages(ctx, s.ID, textMsg("a", repo.RoleUser, "a"), textMsg("b", repo.RoleAssistant, "b"))
				}
				if err == nil {
					_, err = tx.SessionQueue().Enqueue(ctx, s.ID, "job", 0)
				}
				if err == nil {
					err = tx.WriteAppRow(ctx, o.key)
				}
				if err != nil {
					_ = tx.Rollback()
					errc <- fmt.Errorf("worker %d (%s): %w", w, kind, err)
					return
				}
				if o.commit {
					err = tx.Commit()
				} else {
					err = tx.Rollback()
				}
				if err != nil {
					errc <- fmt.Errorf("worker %d: end: %w", w, err)
					return
				}
				mu.Lock()
				outs = append(outs, o)
				mu.Unlock()
			}
		}()
	}
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 10 {
				if _, err := stores[i].Sessions().AppendMessages(ctx, shared.ID, textMsg(fmt.Sprintf("s-%d-%d", i, j), repo.RoleUser, "direct")); err != nil {
					errc <- fmt.Errorf("direct append: %w", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if len(outs) != workers*perWorker {
		t.Fatalf("%d transactions ended, want %d", len(outs), workers*perWorker)
	}
	for _, o := range outs {
		got, err := stores[1].Sessions().Load(ctx, o.id)
		n, nerr := tb.AppRows(ctx, stores[0], o.key)
		if nerr != nil {
			t.Fatal(nerr)
		}
		if !o.commit {
			if !errors.Is(err, repo.ErrNotFound) || n != 0 {
				t.Fatalf("rolled-back transaction: session %v, %d application rows; want ErrNotFound, 0", err, n)
			}
			continue
		}
		if err != nil || len(got.Messages) != 2 || n != 1 {
			t.Fatalf("committed transaction: %v, %d application rows; want 2 messages, 1 row", err, n)
		}
		if items, err := stores[0].SessionQueue().Items(ctx, o.id); err != nil || len(items) != 1 {
			t.Fatalf("committed transaction's items: %v, %v", items, err)
		}
	}
	if got := mustLoad(t, stores[0].Sessions(), shared.ID); len(got.Messages) != 20 {
		t.Fatalf("the direct appends stored %d messages, want 20", len(got.Messages))
	}
}

// testTxTenantScoped: a tenant's transaction view writes sessions of its
// tenant and sees another tenant's sessions as missing, as the tenant's
// own view does.
func testTxTenantScoped(t *testing.T, h *harness) {
	forEachTxKind(t, h, func(t *testing.T, tb TxBackend, kind string) {
		ctx := context.Background()
		st := h.New(t)
		theirs := repo.NewSession()
		mustSave(t, st.ForTenant("b").Sessions(), theirs)
		tx := beginApp(t, tb, st, kind, "a")
		mine := repo.NewSession()
		if err := tx.Sessions().Save(ctx, mine); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Sessions().Load(ctx, theirs.ID); !errors.Is(err, repo.ErrNotFound) {
			t.Fatalf("another tenant's session through the tenant's transaction view: %v; want ErrNotFound", err)
		}
		if _, err := tx.SessionQueue().Enqueue(ctx, theirs.ID, "x", 0); !errors.Is(err, repo.ErrNotFound) {
			t.Fatalf("enqueue to another tenant's session: %v; want ErrNotFound", err)
		}
		if _, err := tx.SessionQueue().Enqueue(ctx, mine.ID, "x", 0); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		got := mustLoad(t, st.ForTenant("a").Sessions(), mine.ID)
		if got.TenantID != "a" {
			t.Fatalf("tenant of the session saved in the tenant's transaction: %q, want a", got.TenantID)
		}
		if _, err := st.ForTenant("b").Sessions().Load(ctx, mine.ID); !errors.Is(err, repo.ErrNotFound) {
			t.Fatalf("tenant b loads tenant a's session: %v", err)
		}
	})
}

// testTxRefusedCalls: a waiting Dequeue inside the transaction is
// ErrInvalidInput (and does not break the transaction), and every call
// after the transaction ended is ErrInvalidInput.
func testTxRefusedCalls(t *testing.T, h *harness) {
	forEachTxKind(t, h, func(t *testing.T, tb TxBackend, kind string) {
		ctx := context.Background()
		st := h.New(t)
		s := repo.NewSession()
		mustSave(t, st.Sessions(), s)
		tx := beginApp(t, tb, st, kind, "")
		if _, err := tx.SessionQueue().Dequeue(ctx, s.ID, repo.DequeueParams{Wait: time.Second}); !errors.Is(err, repo.ErrInvalidInput) {
			t.Fatalf("waiting dequeue in the transaction: %v; want ErrInvalidInput", err)
		}
		if _, err := tx.SessionQueue().Enqueue(ctx, s.ID, "after the refusal", 0); err != nil {
			t.Fatalf("enqueue after the refused call: %v", err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Sessions().Load(ctx, s.ID); !errors.Is(err, repo.ErrInvalidInput) {
			t.Fatalf("load through the view of a committed transaction: %v; want ErrInvalidInput", err)
		}
		if _, err := tx.SessionQueue().Enqueue(ctx, s.ID, "late", 0); !errors.Is(err, repo.ErrInvalidInput) {
			t.Fatalf("enqueue through the view of a committed transaction: %v; want ErrInvalidInput", err)
		}
		if items, err := st.SessionQueue().Items(ctx, s.ID); err != nil || len(items) != 1 {
			t.Fatalf("items: %v, %v; want the one committed", items, err)
		}
	})
}
