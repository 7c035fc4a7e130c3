package agentstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/internal/testkit"
	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// failMarker in a column guarded by installFailTrigger makes the insert of
// that row fail inside the database, after the transaction already wrote
// other rows.
const failMarker = "BOOM-FORCED-FAILURE"

// quotedTable returns the quoted, qualified name of table base of st.
func quotedTable(h *harness, st *agentstore.Store, base string) string {
	name := `"` + st.TablePrefix() + base + `"`
	if h.Schema != "" {
		return `"` + h.Schema + `".` + name
	}
	return name
}

// installFailTrigger makes every INSERT into table base whose column holds
// failMarker fail with a database error.
func installFailTrigger(t *testing.T, h *harness, st *agentstore.Store, base, column string) {
	t.Helper()
	db := st.DB(context.Background())
	tbl := quotedTable(h, st, base)
	var stmts []string
	switch h.Dialect {
	case agentstore.SQLite:
		stmts = []string{`CREATE TRIGGER "boom_` + base + `" BEFORE INSERT ON ` + tbl +
			` WHEN instr(CAST(NEW.` + column + ` AS TEXT), '` + failMarker + `') > 0 BEGIN SELECT RAISE(ABORT, 'forced failure'); END`}
	case agentstore.Postgres:
		fn := `"` + h.Schema + `"."boom_` + base + `"`
		stmts = []string{
			`CREATE FUNCTION ` + fn + `() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN IF position('` + failMarker + `' in NEW.` + column +
				`::text) > 0 THEN RAISE EXCEPTION 'forced failure'; END IF; RETURN NEW; END $$`,
			`CREATE TRIGGER "boom_` + base + `" BEFORE INSERT ON ` + tbl + ` FOR EACH ROW EXECUTE FUNCTION ` + fn + `()`,
		}
	case agentstore.MariaDB:
		stmts = []string{`CREATE TRIGGER "boom_` + base + `" BEFORE INSERT ON ` + tbl + ` FOR EACH ROW BEGIN IF INSTR(CAST(NEW.` + column +
			` AS CHAR), '` + failMarker + `') > 0 THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'forced failure'; END IF; END`}
	}
	for _, s := range stmts {
		if err := db.Exec(s).Error; err != nil {
			t.Fatalf("install trigger on %s: %v", base, err)
		}
	}
}

// TestReliabilityHalfWaySessionWritesLeaveNothing: a database error forced
// between two writes of one Save / AppendMessages / SetTodos rolls the
// whole operation back: no session row, no message, no todo, no version
// bump, and the in-memory session is left as it was so it can be saved
// again once the bad message is removed.
func TestReliabilityHalfWaySessionWritesLeaveNothing(t *testing.T) {
	requireLongTests(t)
	forEachDialect(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		st := h.New(t)
		installFailTrigger(t, h, st, models.TableMessages, "content")
		installFailTrigger(t, h, st, models.TableTodos, "content")
		ss := st.Sessions()
		good := func(id string) repo.Message {
			return repo.Message{ID: id, Role: repo.RoleUser, Content: []byte(`"fine"`)}
		}
		bad := repo.Message{ID: "bad", Role: repo.RoleUser, Content: []byte(`"` + failMarker + `"`)}
		faults := 0

		// 1. insert: session row written, then the second message fails.
		s := repo.NewSession()
		s.AddMessage(good("m1"))
		s.AddMessage(bad)
		s.AddMessage(good("m3"))
		s.Todos = []repo.TodoItem{{Content: "todo", ActiveForm: "doing", Status: repo.TodoPending}}
		if err := ss.Save(ctx, s); err == nil {
			t.Fatal("save with a failing message succeeded")
		}
		faults++
		if n := tableCount(t, st, models.TableSessions, ""); n != 0 {
			t.Fatalf("%d session rows after a failed insert, want 0", n)
		}
		if n := tableCount(t, st, models.TableMessages, ""); n != 0 {
			t.Fatalf("%d message rows after a failed insert, want 0", n)
		}
		if n := tableCount(t, st, models.TableTodos, ""); n != 0 {
			t.Fatalf("%d todo rows after a failed insert, want 0", n)
		}
		if s.Version != 0 || s.LastSeq != 0 || s.Messages[0].Seq != 0 {
			t.Fatalf("failed Save changed the session in memory: version %d, last seq %d, first seq %d", s.Version, s.LastSeq, s.Messages[0].Seq)
		}
		s.Messages = append(s.Messages[:1], s.Messages[2:]...)
		if err := ss.Save(ctx, s); err != nil {
			t.Fatalf("save after removing the bad message: %v", err)
		}

		// 2. update: new messages and changed todos, one message fails.
		before, err := ss.Load(ctx, s.ID)
		if err != nil {
			t.Fatal(err)
		}
		s.AddMessage(good("m4"))
		s.AddMessage(bad)
		s.Todos = append(s.Todos, repo.TodoItem{Content: "second", ActiveForm: "doing", Status: repo.TodoPending})
		version := s.Version
		if err := ss.Save(ctx, s); err == nil {
			t.Fatal("update with a failing message succeeded")
		}
		faults++
		if s.Version != version {
			t.Fatalf("failed update changed the in-memory version %d -> %d", version, s.Version)
		}
		after, err := ss.Load(ctx, s.ID)
		if err != nil {
			t.Fatal(err)
		}
		if after.Version != before.Version || len(after.Messages) != len(before.Messages) || len(after.Todos) != len(before.Todos) || after.LastSeq != before.LastSeq {
			t.Fatalf("failed update left writes behind: version %d->%d, messages %d->%d, todos %d->%d",
				before.Version, after.Version, len(before.Messages), len(after.Messages), len(before.Todos), len(after.Todos))
		}

		// 3. append: the third of three messages fails.
		if _, err := ss.AppendMessages(ctx, s.ID, good("a1"), good("a2"), bad); err == nil {
			t.Fatal("append with a failing message succeeded")
		}
		faults++
		after2, err := ss.Load(ctx, s.ID)
		if err != nil {
			t.Fatal(err)
		}
		if after2.Version != before.Version || len(after2.Messages) != len(before.Messages) || after2.LastSeq != before.LastSeq ||
			after2.TotalUsage != before.TotalUsage || !equalStrPtr(after2.CurrentLeafID, before.CurrentLeafID) {
			t.Fatalf("failed append left writes behind: version %d->%d, messages %d->%d, leaf %v->%v",
				before.Version, after2.Version, len(before.Messages), len(after2.Messages), before.CurrentLeafID, after2.CurrentLeafID)
		}

		// 4. todos: the second of two inserted todos fails.
		if _, err := ss.SetTodos(ctx, s.ID, []repo.TodoItem{{Content: "x", ActiveForm: "x", Status: repo.TodoPending},
			{Content: failMarker, ActiveForm: "x", Status: repo.TodoPending}}); err == nil {
			t.Fatal("set todos with a failing todo succeeded")
		}
		faults++
		after3, err := ss.Load(ctx, s.ID)
		if err != nil {
			t.Fatal(err)
		}
		if after3.Version != before.Version || len(after3.Todos) != len(before.Todos) || after3.Todos[0].ID != before.Todos[0].ID {
			t.Fatalf("failed SetTodos left writes behind: version %d->%d, todos %d->%d", before.Version, after3.Version, len(before.Todos), len(after3.Todos))
		}
		relLogf(t, "half-way failures: %d forced mid-transaction errors (Save insert, Save update, AppendMessages, SetTodos), partial writes left 0", faults)
	})
}

func equalStrPtr(a, b *string) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// TestReliabilityHalfWayProviderAcksLeaveNothing: a database error forced
// in the middle of AckOrchestrationItem (after the history and status
// writes, while inserting a worker item) and of AckWorkItem (after the
// delete, while enqueueing the completion) rolls everything back: the
// history, status and queues are unchanged, and the work is handed out
// again once the lock expires, then completes exactly once.
func TestReliabilityHalfWayProviderAcksLeaveNothing(t *testing.T) {
	requireLongTests(t)
	forEachDialect(t, func(t *testing.T, h *harness) {
		e := newPEnv(t, h)
		installFailTrigger(t, h, e.st, models.TableWorkerQueue, "work_item")
		installFailTrigger(t, h, e.st, models.TableOrchestratorQueue, "work_item")
		e.StartInstance(t, "i1", nil)
		e.Enqueue(t, &duroxide.ExternalRaised{Instance: "i1", Name: "go", Data: "x"})
		histBefore, err := e.P.Read(e.Ctx, "i1")
		if err != nil {
			t.Fatal(err)
		}
		it := e.Fetch(t)
		badAck := duroxide.OrchestrationAck{ExecutionID: 1,
			HistoryDelta: []duroxide.Event{testkit.Ev("i1", 1, 2, &duroxide.ActivityScheduledEvent{Name: "act", Input: "ok"}),
				testkit.Ev("i1", 1, 3, &duroxide.ActivityScheduledEvent{Name: "act", Input: failMarker}),
				testkit.Ev("i1", 1, 4, &duroxide.CustomStatusUpdatedEvent{Status: testkit.Sp("nope")})},
			WorkerItems: []duroxide.WorkItem{&duroxide.ActivityExecute{Instance: "i1", ExecutionID: 1, ID: 2, Name: "act", Input: "ok"},
				&duroxide.ActivityExecute{Instance: "i1", ExecutionID: 1, ID: 3, Name: "act", Input: failMarker}},
			Metadata: duroxide.ExecutionMetadata{Status: testkit.Sp(duroxide.StatusCompleted), Output: testkit.Sp("should not stick")}}
		err = e.P.AckOrchestrationItem(e.Ctx, it.LockToken, badAck)
		if err == nil {
			t.Fatal("ack with a failing worker insert succeeded")
		}
		if errors.Is(err, agentstore.ErrInvalidLockToken) {
			t.Fatalf("forced failure reported as a lock problem: %v", err)
		}
		hist, err := e.P.Read(e.Ctx, "i1")
		if err != nil || len(hist) != len(histBefore) {
			t.Fatalf("history after the failed ack: %d events (%v), want %d", len(hist), err, len(histBefore))
		}
		if n := e.count(t, models.TableWorkerQueue); n != 0 {
			t.Fatalf("%d worker items after the failed ack, want 0", n)
		}
		if n := e.count(t, models.TableOrchestratorQueue); n != 1 {
			t.Fatalf("%d orchestrator messages after the failed ack, want the 1 fetched", n)
		}
		info, err := e.A.GetInstanceInfo(e.Ctx, "i1")
		if err != nil || info.Status != duroxide.StatusRunning {
			t.Fatalf("instance after the failed ack: %+v %v, want Running", info, err)
		}
		if cs, err := e.P.GetCustomStatus(e.Ctx, "i1", 0); err != nil || cs != nil {
			t.Fatalf("custom status after the failed ack: %+v %v, want none", cs, err)
		}
		// The batch comes back (after the lock expires, at the latest) and a good ack goes through once.
		e.Clock.Advance(testLock + time.Second)
		it2 := e.Fetch(t)
		if it2.Instance != "i1" || len(it2.Messages) != 1 || it2.AttemptCount != 2 {
			t.Fatalf("refetch: %s with %d messages, attempt %d; want i1, 1, 2", it2.Instance, len(it2.Messages), it2.AttemptCount)
		}
		e.Ack(t, it2, duroxide.OrchestrationAck{HistoryDelta: []duroxide.Event{testkit.Ev("i1", 1, 2, &duroxide.ActivityScheduledEvent{Name: "act", Input: "ok"})},
			WorkerItems: []duroxide.WorkItem{&duroxide.ActivityExecute{Instance: "i1", ExecutionID: 1, ID: 2, Name: "act", Input: "ok"}},
			Metadata:    testkit.RunningMeta(nil)})

		// AckWorkItem: delete the item, then enqueueing the completion fails.
		l, err := e.P.FetchWorkItem(e.Ctx, testLock, 0, nil, duroxide.TagFilter{})
		if err != nil || l == nil {
			t.Fatalf("fetch work: %v %v", l, err)
		}
		if err := e.P.AckWorkItem(e.Ctx, l.LockToken, &duroxide.ActivityCompleted{Instance: "i1", ExecutionID: 1, ID: 2, Result: failMarker}); err == nil {
			t.Fatal("work ack with a failing completion insert succeeded")
		}
		if n := e.count(t, models.TableWorkerQueue); n != 1 {
			t.Fatalf("%d worker items after the failed work ack, want 1 (the delete must roll back)", n)
		}
		if n := e.count(t, models.TableOrchestratorQueue); n != 0 {
			t.Fatalf("%d orchestrator messages after the failed work ack, want 0", n)
		}
		e.Clock.Advance(testLock + time.Second)
		l2, err := e.P.FetchWorkItem(e.Ctx, testLock, 0, nil, duroxide.TagFilter{})
		if err != nil || l2 == nil || l2.AttemptCount != 2 {
			t.Fatalf("refetch work: %+v %v, want attempt 2", l2, err)
		}
		if err := e.P.AckWorkItem(e.Ctx, l2.LockToken, &duroxide.ActivityCompleted{Instance: "i1", ExecutionID: 1, ID: 2, Result: "done"}); err != nil {
			t.Fatal(err)
		}
		if n := e.count(t, models.TableOrchestratorQueue); n != 1 {
			t.Fatalf("%d completions enqueued, want exactly 1", n)
		}
		relLogf(t, "half-way failures: 2 forced mid-transaction errors (AckOrchestrationItem, AckWorkItem), partial writes left 0, work redelivered with attempt 2 and completed once")
	})
}
