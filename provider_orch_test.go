package agentstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/Masterminds/semver/v3"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo"
)

func TestProviderFetchBatchesVisibleMessagesOfOneInstance(t *testing.T) {
	forEachDialect(t, func(t *testing.T, h *harness) {
		e := newPEnv(t, h)
		e.enqueue(t, startItem("i1", nil))
		e.enqueue(t, &repo.ExternalRaised{Instance: "i2", Name: "x", Data: "1"})
		e.enqueue(t, &repo.ExternalRaised{Instance: "i1", Name: "a", Data: "1"})
		e.enqueue(t, &repo.ExternalRaised{Instance: "i1", Name: "b", Data: "2"})
		it := e.fetch(t)
		if it.Instance != "i1" || len(it.Messages) != 3 || it.AttemptCount != 1 || it.LockToken == "" {
			t.Fatalf("item = %s, %d messages, attempt %d, token %q", it.Instance, len(it.Messages), it.AttemptCount, it.LockToken)
		}
		if _, ok := it.Messages[0].(*repo.StartOrchestration); !ok {
			t.Fatalf("first message %T, want StartOrchestration (FIFO)", it.Messages[0])
		}
		if it.Messages[2].(*repo.ExternalRaised).Name != "b" {
			t.Fatalf("messages out of order")
		}
		if it.OrchestrationName != "Orch" || it.Version != "1.0.0" || it.ExecutionID != 1 || len(it.History) != 0 || it.HistoryError != "" {
			t.Fatalf("metadata = %q %q %d history %d err %q", it.OrchestrationName, it.Version, it.ExecutionID, len(it.History), it.HistoryError)
		}
		it2 := e.fetch(t)
		if it2.Instance != "i2" || it2.OrchestrationName != "Unknown" || it2.Version != "unknown" {
			t.Fatalf("second fetch = %s %q %q", it2.Instance, it2.OrchestrationName, it2.Version)
		}
		e.fetchNone(t)
	})
}

func TestProviderFetchAttemptCounts(t *testing.T) {
	forEachDialect(t, func(t *testing.T, h *harness) {
		e := newPEnv(t, h)
		e.enqueue(t, startItem("i1", nil))
		it := e.fetch(t)
		if err := e.p.AbandonOrchestrationItem(e.ctx, it.LockToken, 0, false); err != nil {
			t.Fatal(err)
		}
		e.enqueue(t, &repo.ExternalRaised{Instance: "i1", Name: "b", Data: "2"})
		it = e.fetch(t)
		if it.AttemptCount != 2 || len(it.Messages) != 2 {
			t.Fatalf("attempt = %d (%d msgs), want max 2", it.AttemptCount, len(it.Messages))
		}
		// ignore_attempt undoes the increment
		if err := e.p.AbandonOrchestrationItem(e.ctx, it.LockToken, 0, true); err != nil {
			t.Fatal(err)
		}
		it = e.fetch(t)
		if it.AttemptCount != 2 {
			t.Fatalf("attempt after ignore_attempt abandon = %d, want 2", it.AttemptCount)
		}
		// floor at zero
		e.exec(t, "UPDATE "+e.st.Table(models.TableOrchestratorQueue)+" SET attempt_count = 0")
		if err := e.p.AbandonOrchestrationItem(e.ctx, it.LockToken, 0, true); err != nil {
			t.Fatal(err)
		}
		var minCount int64
		if err := e.st.DB(e.ctx).Raw("SELECT MIN(attempt_count) FROM " + e.st.Table(models.TableOrchestratorQueue)).Scan(&minCount).Error; err != nil {
			t.Fatal(err)
		}
		if minCount != 0 {
			t.Fatalf("attempt_count = %d after ignore_attempt at 0, want 0", minCount)
		}
		if it = e.fetch(t); it.AttemptCount != 1 {
			t.Fatalf("attempt = %d, want 1", it.AttemptCount)
		}
		// unknown token
		wantErr(t, e.p.AbandonOrchestrationItem(e.ctx, "lock_nope", 0, false), agentstore.ErrInvalidLockToken)
	})
}

func TestProviderFetchLockExclusivityAndExpiry(t *testing.T) {
	forEachDialect(t, func(t *testing.T, h *harness) {
		e := newPEnv(t, h)
		other := e.other(t)
		e.enqueue(t, startItem("i1", nil))
		it := e.fetch(t)
		if got, err := other.FetchOrchestrationItem(e.ctx, testLock, 0, nil); err != nil || got != nil {
			t.Fatalf("second handle fetched %v, %v while locked", got, err)
		}
		e.clock.Advance(testLock + time.Millisecond)
		it2, err := other.FetchOrchestrationItem(e.ctx, testLock, 0, nil)
		if err != nil || it2 == nil || it2.Instance != "i1" || it2.AttemptCount != 2 || it2.LockToken == it.LockToken {
			t.Fatalf("after expiry: %+v, %v", it2, err)
		}
		// the expired token is dead: ack and renew fail permanently
		err = e.p.AckOrchestrationItem(e.ctx, it.LockToken, repo.OrchestrationAck{ExecutionID: 1})
		wantErr(t, err, agentstore.ErrInvalidLockToken)
		if !errors.Is(err, agentstore.ErrLockLost) {
			t.Fatalf("invalid token error does not match ErrLockLost: %v", err)
		}
		wantErr(t, e.p.RenewOrchestrationItemLock(e.ctx, it.LockToken, time.Second), agentstore.ErrInvalidLockToken)
		e.ack(t, it2, repo.OrchestrationAck{HistoryDelta: []repo.Event{startedEv("i1", 1, 1, nil)}, Metadata: runningMeta(nil)})
	})
}

func TestProviderAckInvalidExpiredAndUsedTokens(t *testing.T) {
	forEachDialect(t, func(t *testing.T, h *harness) {
		e := newPEnv(t, h)
		wantErr(t, e.p.AckOrchestrationItem(e.ctx, "lock_unknown", repo.OrchestrationAck{ExecutionID: 1}), agentstore.ErrInvalidLockToken)

		e.enqueue(t, startItem("i1", nil))
		it := e.fetch(t)
		e.ack(t, it, repo.OrchestrationAck{HistoryDelta: []repo.Event{startedEv("i1", 1, 1, nil)}, Metadata: runningMeta(nil)})
		// used token
		wantErr(t, e.p.AckOrchestrationItem(e.ctx, it.LockToken, repo.OrchestrationAck{ExecutionID: 1}), agentstore.ErrInvalidLockToken)

		// expired token (no one re-locked it): fails, and the messages are still there
		e.enqueue(t, &repo.ExternalRaised{Instance: "i1", Name: "a"})
		it = e.fetch(t)
		e.clock.Advance(testLock)
		wantErr(t, e.p.AckOrchestrationItem(e.ctx, it.LockToken, repo.OrchestrationAck{ExecutionID: 1,
			HistoryDelta: []repo.Event{ev("i1", 1, 2, &repo.ExternalEventEvent{Name: "a"})}}), agentstore.ErrInvalidLockToken)
		if hist, err := e.p.Read(e.ctx, "i1"); err != nil || len(hist) != 1 {
			t.Fatalf("history after failed ack = %d events, %v; want 1", len(hist), err)
		}
		if it = e.fetch(t); len(it.Messages) != 1 {
			t.Fatalf("message lost after failed ack")
		}
		// event id 0 is refused before SQL
		wantErr(t, e.p.AckOrchestrationItem(e.ctx, it.LockToken, repo.OrchestrationAck{ExecutionID: 1,
			HistoryDelta: []repo.Event{ev("i1", 1, 0, &repo.ExternalEventEvent{Name: "a"})}}), agentstore.ErrInvalidInput)
	})
}

func TestProviderLaterMessagesSurviveAck(t *testing.T) {
	forEachDialect(t, func(t *testing.T, h *harness) {
		e := newPEnv(t, h)
		e.enqueue(t, startItem("i1", nil))
		it := e.fetch(t)
		e.enqueue(t, &repo.ExternalRaised{Instance: "i1", Name: "late"})
		e.fetchNone(t) // instance locked, the late message waits
		e.ack(t, it, repo.OrchestrationAck{HistoryDelta: []repo.Event{startedEv("i1", 1, 1, nil)}, Metadata: runningMeta(nil)})
		it = e.fetch(t)
		if len(it.Messages) != 1 || it.Messages[0].(*repo.ExternalRaised).Name != "late" || len(it.History) != 1 {
			t.Fatalf("after ack: %d messages, %d history", len(it.Messages), len(it.History))
		}
		if _, ok := it.History[0].Kind.(*repo.OrchestrationStartedEvent); !ok {
			t.Fatalf("history[0] = %T", it.History[0].Kind)
		}
	})
}

func TestProviderCapabilityFilter(t *testing.T) {
	forEachDialect(t, func(t *testing.T, h *harness) {
		e := newPEnv(t, h)
		pin := func(inst, v string) {
			e.enqueue(t, startItem(inst, nil))
			it := e.fetch(t)
			md := runningMeta(nil)
			md.PinnedDuroxideVersion = semver.MustParse(v)
			e.ack(t, it, repo.OrchestrationAck{HistoryDelta: []repo.Event{startedEv(inst, 1, 1, nil)}, Metadata: md})
		}
		pin("old", "1.5.0")
		pin("new", "2.1.0")
		pin("big", "1.1000.7") // minor >= 1000: the Rust packed int would overflow into the next major
		for _, inst := range []string{"old", "new", "big"} {
			e.enqueue(t, &repo.ExternalRaised{Instance: inst, Name: "poke"})
		}
		rng := func(a, b string) repo.SemverRange {
			return repo.SemverRange{Min: *semver.MustParse(a), Max: *semver.MustParse(b)}
		}
		fetchWith := func(f *repo.DispatcherCapabilityFilter) *repo.OrchestrationItem {
			it, err := e.p.FetchOrchestrationItem(e.ctx, testLock, 0, f)
			if err != nil {
				t.Fatal(err)
			}
			return it
		}
		// empty filter supports nothing
		if it := fetchWith(&repo.DispatcherCapabilityFilter{}); it != nil {
			t.Fatalf("empty filter fetched %s", it.Instance)
		}
		// only v2 supported: "old" (oldest message) is skipped, not locked
		it := fetchWith(&repo.DispatcherCapabilityFilter{SupportedDuroxideVersions: []repo.SemverRange{rng("2.0.0", "2.9.9")}})
		if it == nil || it.Instance != "new" {
			t.Fatalf("v2 filter fetched %v", it)
		}
		// second range matters (not only the first); the big minor is compared exactly
		it = fetchWith(&repo.DispatcherCapabilityFilter{SupportedDuroxideVersions: []repo.SemverRange{rng("0.1.0", "0.2.0"), rng("1.999.0", "1.1001.0")}})
		if it == nil || it.Instance != "big" {
			t.Fatalf("multi-range filter fetched %v", it)
		}
		if it := fetchWith(&repo.DispatcherCapabilityFilter{SupportedDuroxideVersions: []repo.SemverRange{rng("3.0.0", "4.0.0")}}); it != nil {
			t.Fatalf("v3 filter fetched %s", it.Instance)
		}
		// the skipped instance was never locked
		if it := e.fetch(t); it.Instance != "old" {
			t.Fatalf("unfiltered fetch got %s, want old", it.Instance)
		}
	})
}

func TestProviderAckOrderingScheduleAndCancel(t *testing.T) {
	forEachDialect(t, func(t *testing.T, h *harness) {
		e := newPEnv(t, h)
		e.startInstance(t, "i1", nil)
		// turn 2: schedule activity 2 and 3
		e.enqueue(t, &repo.ExternalRaised{Instance: "i1", Name: "go"})
		it := e.fetch(t)
		e.ack(t, it, repo.OrchestrationAck{HistoryDelta: []repo.Event{
			ev("i1", 1, 2, &repo.ActivityScheduledEvent{Name: "act"}), ev("i1", 1, 3, &repo.ActivityScheduledEvent{Name: "act"})},
			WorkerItems: []repo.WorkItem{activity("i1", 1, 2), activity("i1", 1, 3)}})
		// a worker holds activity 2
		lease, err := e.p.FetchWorkItem(e.ctx, testLock, 0, nil, repo.TagFilter{})
		if err != nil || lease == nil || lease.Item.(*repo.ActivityExecute).ID != 2 {
			t.Fatalf("worker fetch: %+v %v", lease, err)
		}
		// turn 3: cancel activity 2 (held by the worker), schedule and cancel 4 in the same turn
		e.enqueue(t, &repo.ExternalRaised{Instance: "i1", Name: "cancel"})
		it = e.fetch(t)
		e.ack(t, it, repo.OrchestrationAck{HistoryDelta: []repo.Event{ev("i1", 1, 4, &repo.ActivityScheduledEvent{Name: "act"})},
			WorkerItems: []repo.WorkItem{activity("i1", 1, 4)},
			CancelledActivities: []repo.ScheduledActivityIdentifier{{Instance: "i1", ExecutionID: 1, ActivityID: 2},
				{Instance: "i1", ExecutionID: 1, ActivityID: 4}, {Instance: "i1", ExecutionID: 1, ActivityID: 99}}})
		if n := e.count(t, models.TableWorkerQueue); n != 1 {
			t.Fatalf("worker queue = %d rows, want 1 (activity 3 only)", n)
		}
		// the worker learns its activity was cancelled
		wantErr(t, e.p.RenewWorkItemLock(e.ctx, lease.LockToken, time.Second), agentstore.ErrInvalidLockToken)
		wantErr(t, e.p.AckWorkItem(e.ctx, lease.LockToken, &repo.ActivityCompleted{Instance: "i1", ExecutionID: 1, ID: 2, Result: "r"}), agentstore.ErrInvalidLockToken)
		l3, err := e.p.FetchWorkItem(e.ctx, testLock, 0, nil, repo.TagFilter{})
		if err != nil || l3 == nil || l3.Item.(*repo.ActivityExecute).ID != 3 {
			t.Fatalf("worker fetch after cancel: %+v %v", l3, err)
		}
	})
}

func TestProviderAckDuplicateEventRollsBackAndKeepsLock(t *testing.T) {
	forEachDialect(t, func(t *testing.T, h *harness) {
		e := newPEnv(t, h)
		e.startInstance(t, "i1", nil)
		e.enqueue(t, &repo.ExternalRaised{Instance: "i1", Name: "go"})
		it := e.fetch(t)
		bad := repo.OrchestrationAck{ExecutionID: 1,
			HistoryDelta:      []repo.Event{ev("i1", 1, 2, &repo.ExternalEventEvent{Name: "go"}), ev("i1", 1, 1, &repo.ExternalEventEvent{Name: "dup"})},
			WorkerItems:       []repo.WorkItem{activity("i1", 1, 2)},
			OrchestratorItems: []repo.WorkItem{startItem("child", sp("i1"))},
			Metadata:          repo.ExecutionMetadata{Status: sp(repo.StatusCompleted), Output: sp("x")}}
		wantErr(t, e.p.AckOrchestrationItem(e.ctx, it.LockToken, bad), agentstore.ErrDuplicateEvent)
		if n := e.count(t, models.TableWorkerQueue); n != 0 {
			t.Fatalf("worker items survived rollback: %d", n)
		}
		if n := e.count(t, models.TableOrchestratorQueue); n != 1 {
			t.Fatalf("orchestrator queue = %d rows, want the 1 fetched message", n)
		}
		if info, err := e.a.GetExecutionInfo(e.ctx, "i1", 1); err != nil || info.Status != repo.StatusRunning || info.EventCount != 1 {
			t.Fatalf("execution after rollback = %+v, %v", info, err)
		}
		// lock kept: renew works, nobody else gets the instance
		if err := e.p.RenewOrchestrationItemLock(e.ctx, it.LockToken, time.Second); err != nil {
			t.Fatalf("renew after duplicate: %v", err)
		}
		e.fetchNone(t)
		e.ack(t, it, repo.OrchestrationAck{HistoryDelta: []repo.Event{ev("i1", 1, 2, &repo.ExternalEventEvent{Name: "go"})}})
		if hist, _ := e.p.Read(e.ctx, "i1"); len(hist) != 2 {
			t.Fatalf("history = %d events, want 2", len(hist))
		}
	})
}

func TestProviderOrphanBatchesCreateNothing(t *testing.T) {
	forEachDialect(t, func(t *testing.T, h *harness) {
		e := newPEnv(t, h)
		// a batch for a never-started instance acked without metadata
		e.enqueue(t, &repo.ExternalRaised{Instance: "ghost", Name: "x"})
		it := e.fetch(t)
		if it.OrchestrationName != "Unknown" || it.ExecutionID != 1 {
			t.Fatalf("ghost item = %q exec %d", it.OrchestrationName, it.ExecutionID)
		}
		e.ack(t, it, repo.OrchestrationAck{})
		m, err := e.a.GetSystemMetrics(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if m.TotalInstances != 0 || m.TotalExecutions != 0 || e.count(t, models.TableOrchestratorQueue) != 0 {
			t.Fatalf("orphan ack left rows: %+v", m)
		}
		// all-QueueMessage batches of unknown instances are dropped and the fetch moves on
		e.enqueue(t, &repo.QueueMessage{Instance: "ghost2", Name: "q", Data: "1"})
		e.enqueue(t, startItem("real", nil))
		if it := e.fetch(t); it.Instance != "real" {
			t.Fatalf("fetched %s, want real", it.Instance)
		}
		if n := e.count(t, models.TableOrchestratorQueue); n != 1 {
			t.Fatalf("queue = %d rows, want only real's start", n)
		}
		// history acked without metadata is still readable
		e.enqueue(t, &repo.ExternalRaised{Instance: "bare", Name: "x"})
		it = e.fetch(t)
		e.ack(t, it, repo.OrchestrationAck{HistoryDelta: []repo.Event{startedEv("bare", 1, 1, nil)}})
		if hist, err := e.p.Read(e.ctx, "bare"); err != nil || len(hist) != 1 {
			t.Fatalf("read bare = %d, %v", len(hist), err)
		}
		if m, _ := e.a.GetSystemMetrics(e.ctx); m.TotalExecutions != 0 {
			t.Fatalf("stray execution rows: %+v", m)
		}
	})
}

func TestProviderCompletedAtForEveryTerminalStatus(t *testing.T) {
	forEachDialect(t, func(t *testing.T, h *harness) {
		e := newPEnv(t, h)
		for i, st := range []string{repo.StatusCompleted, repo.StatusFailed, repo.StatusContinuedAsNew} {
			inst := "i" + st
			e.startInstance(t, inst, nil)
			info, err := e.a.GetExecutionInfo(e.ctx, inst, 1)
			if err != nil || info.CompletedAt != nil || info.Status != repo.StatusRunning {
				t.Fatalf("running execution: %+v %v", info, err)
			}
			e.clock.Advance(time.Duration(i+1) * time.Second)
			e.finishInstance(t, inst, st, 2)
			info, err = e.a.GetExecutionInfo(e.ctx, inst, 1)
			if err != nil || info.CompletedAt == nil || !info.CompletedAt.Equal(e.clock.Now().Truncate(time.Millisecond)) || info.Status != st {
				t.Fatalf("%s execution: %+v %v", st, info, err)
			}
			if info.Output == nil || *info.Output != "done" || info.EventCount != 2 {
				t.Fatalf("%s output/events: %+v", st, info)
			}
		}
	})
}

func TestProviderContinueAsNewMultiExecution(t *testing.T) {
	forEachDialect(t, func(t *testing.T, h *harness) {
		e := newPEnv(t, h)
		e.startInstance(t, "i1", nil)
		// the runtime ends execution 1 as ContinuedAsNew and enqueues ContinueAsNew
		e.enqueue(t, &repo.ExternalRaised{Instance: "i1", Name: "go"})
		it := e.fetch(t)
		e.ack(t, it, repo.OrchestrationAck{HistoryDelta: []repo.Event{ev("i1", 1, 2, &repo.OrchestrationContinuedAsNewEvent{Input: "next"})},
			OrchestratorItems: []repo.WorkItem{&repo.ContinueAsNew{Instance: "i1", Orchestration: "Orch", Input: "next", Version: sp("1.0.0")}},
			Metadata:          repo.ExecutionMetadata{Status: sp(repo.StatusContinuedAsNew), Output: sp("next")}})
		it = e.fetch(t)
		if it.ExecutionID != 1 || len(it.History) != 2 {
			t.Fatalf("CAN fetch: exec %d history %d", it.ExecutionID, len(it.History))
		}
		if _, ok := it.Messages[0].(*repo.ContinueAsNew); !ok {
			t.Fatalf("message %T", it.Messages[0])
		}
		e.ack(t, it, repo.OrchestrationAck{ExecutionID: 2, HistoryDelta: []repo.Event{startedEv("i1", 2, 1, nil)}, Metadata: runningMeta(nil)})
		hist, err := e.p.Read(e.ctx, "i1")
		if err != nil || len(hist) != 1 || hist[0].ExecutionID != 2 {
			t.Fatalf("read newest = %+v, %v", hist, err)
		}
		if old, err := e.p.ReadWithExecution(e.ctx, "i1", 1); err != nil || len(old) != 2 {
			t.Fatalf("read execution 1 = %d, %v", len(old), err)
		}
		if ids, _ := e.a.ListExecutions(e.ctx, "i1"); len(ids) != 2 || ids[0] != 1 || ids[1] != 2 {
			t.Fatalf("executions = %v", ids)
		}
		// current_execution_id only grows
		e.enqueue(t, &repo.ExternalRaised{Instance: "i1", Name: "late"})
		it = e.fetch(t)
		if it.ExecutionID != 2 {
			t.Fatalf("fetch exec = %d, want 2", it.ExecutionID)
		}
		e.ack(t, it, repo.OrchestrationAck{ExecutionID: 1, HistoryDelta: []repo.Event{ev("i1", 1, 3, &repo.ExternalEventEvent{Name: "late"})}})
		if id, err := e.a.LatestExecutionID(e.ctx, "i1"); err != nil || id != 2 {
			t.Fatalf("latest = %d, %v", id, err)
		}
		if h2, _ := e.a.ReadHistory(e.ctx, "i1"); len(h2) != 1 {
			t.Fatalf("read_history = %d events", len(h2))
		}
	})
}

func TestProviderCorruptHistory(t *testing.T) {
	forEachDialect(t, func(t *testing.T, h *harness) {
		e := newPEnv(t, h)
		for _, garbage := range []string{"not json at all", `{"garbage": true}`, `{"type":"NoSuchEvent","event_id":1}`} {
			inst := "c" + garbage[:3]
			e.startInstance(t, inst, nil)
			e.exec(t, "UPDATE "+e.st.Table(models.TableHistory)+" SET event_data = ? WHERE instance_id = ?", garbage, inst)
			e.enqueue(t, &repo.ExternalRaised{Instance: inst, Name: "x"})
			it := e.fetch(t)
			if it.HistoryError == "" || len(it.History) != 0 || it.AttemptCount != 1 {
				t.Fatalf("%q: history error %q, %d events, attempt %d", garbage, it.HistoryError, len(it.History), it.AttemptCount)
			}
			e.fetchNone(t) // lock held
			if err := e.p.AbandonOrchestrationItem(e.ctx, it.LockToken, 0, false); err != nil {
				t.Fatal(err)
			}
			if it = e.fetch(t); it.AttemptCount != 2 || it.HistoryError == "" {
				t.Fatalf("refetch: attempt %d err %q", it.AttemptCount, it.HistoryError)
			}
			_, err := e.p.Read(e.ctx, inst)
			wantErr(t, err, agentstore.ErrCorruptRow)
			_, err = e.a.ReadHistory(e.ctx, inst)
			wantErr(t, err, agentstore.ErrCorruptRow)
			e.ack(t, it, repo.OrchestrationAck{Metadata: repo.ExecutionMetadata{Status: sp(repo.StatusFailed)}})
		}
	})
}

func TestProviderCorruptMessageIsReportedNotDropped(t *testing.T) {
	forEachDialect(t, func(t *testing.T, h *harness) {
		e := newPEnv(t, h)
		e.enqueue(t, &repo.ExternalRaised{Instance: "i1", Name: "x"})
		e.exec(t, "UPDATE "+e.st.Table(models.TableOrchestratorQueue)+` SET work_item = '{"Bogus":{}}'`)
		_, err := e.p.FetchOrchestrationItem(e.ctx, time.Second, 0, nil)
		wantErr(t, err, agentstore.ErrCorruptRow)
		if n := e.count(t, models.TableOrchestratorQueue); n != 1 {
			t.Fatalf("corrupt message dropped")
		}
		e.fetchNone(t) // locked until expiry
		e.clock.Advance(time.Second)
		_, err = e.p.FetchOrchestrationItem(e.ctx, time.Second, 0, nil)
		wantErr(t, err, agentstore.ErrCorruptRow)
	})
}

func TestProviderCustomStatusVersionGating(t *testing.T) {
	forEachDialect(t, func(t *testing.T, h *harness) {
		e := newPEnv(t, h)
		if cs, err := e.p.GetCustomStatus(e.ctx, "nope", 0); err != nil || cs != nil {
			t.Fatalf("unknown instance: %+v %v", cs, err)
		}
		e.startInstance(t, "i1", nil)
		if cs, err := e.p.GetCustomStatus(e.ctx, "i1", 0); err != nil || cs != nil {
			t.Fatalf("fresh instance: %+v %v", cs, err)
		}
		turn := func(id uint64, statuses ...*string) {
			e.enqueue(t, &repo.ExternalRaised{Instance: "i1", Name: "x"})
			it := e.fetch(t)
			var delta []repo.Event
			for i, s := range statuses {
				delta = append(delta, ev("i1", 1, id+uint64(i), &repo.CustomStatusUpdatedEvent{Status: s}))
			}
			e.ack(t, it, repo.OrchestrationAck{HistoryDelta: delta})
		}
		turn(2, sp("a"), sp("b")) // two updates, one version bump, last wins
		cs, err := e.p.GetCustomStatus(e.ctx, "i1", 0)
		if err != nil || cs == nil || cs.Version != 1 || cs.Status == nil || *cs.Status != "b" {
			t.Fatalf("after set: %+v %v", cs, err)
		}
		if cs, _ := e.p.GetCustomStatus(e.ctx, "i1", 1); cs != nil {
			t.Fatalf("version 1 seen, got %+v", cs)
		}
		turn(4) // no status event: no bump
		turn(5, nil)
		cs, err = e.p.GetCustomStatus(e.ctx, "i1", 1)
		if err != nil || cs == nil || cs.Version != 2 || cs.Status != nil {
			t.Fatalf("after clear: %+v %v", cs, err)
		}
	})
}

func TestProviderRenewKeepsMillisecondsAndAbandonDelay(t *testing.T) {
	forEachDialect(t, func(t *testing.T, h *harness) {
		e := newPEnv(t, h)
		e.enqueue(t, startItem("i1", nil))
		it, err := e.p.FetchOrchestrationItem(e.ctx, time.Second, 0, nil)
		if err != nil || it == nil {
			t.Fatal(err)
		}
		if err := e.p.RenewOrchestrationItemLock(e.ctx, it.LockToken, 1500*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(1400 * time.Millisecond)
		e.fetchNone(t) // sub-second extension kept (Rust truncates to whole seconds)
		if err := e.p.RenewOrchestrationItemLock(e.ctx, it.LockToken, 200*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(201 * time.Millisecond)
		wantErr(t, e.p.RenewOrchestrationItemLock(e.ctx, it.LockToken, time.Second), agentstore.ErrInvalidLockToken)
		it = e.fetch(t)
		if err := e.p.AbandonOrchestrationItem(e.ctx, it.LockToken, 5*time.Second, false); err != nil {
			t.Fatal(err)
		}
		e.fetchNone(t)
		e.clock.Advance(4999 * time.Millisecond)
		e.fetchNone(t)
		e.clock.Advance(time.Millisecond)
		if it = e.fetch(t); it.AttemptCount != 3 {
			t.Fatalf("attempt = %d, want 3", it.AttemptCount)
		}
	})
}

func TestProviderTimersAndDelayedEnqueue(t *testing.T) {
	forEachDialect(t, func(t *testing.T, h *harness) {
		e := newPEnv(t, h)
		e.startInstance(t, "i1", nil)
		fire := uint64(e.clock.Now().Add(10 * time.Second).UnixMilli())
		e.enqueue(t, &repo.ExternalRaised{Instance: "i1", Name: "x"})
		it := e.fetch(t)
		e.ack(t, it, repo.OrchestrationAck{HistoryDelta: []repo.Event{ev("i1", 1, 2, &repo.TimerCreatedEvent{FireAtMS: fire})},
			OrchestratorItems: []repo.WorkItem{&repo.TimerFired{Instance: "i1", ExecutionID: 1, ID: 2, FireAtMS: fire}}})
		e.fetchNone(t)
		if d, _ := e.a.GetQueueDepths(e.ctx); d.OrchestratorQueue != 0 {
			t.Fatalf("depth counts invisible timer: %+v", d)
		}
		e.clock.Advance(10 * time.Second)
		it = e.fetch(t)
		if tf, ok := it.Messages[0].(*repo.TimerFired); !ok || tf.FireAtMS != fire {
			t.Fatalf("timer message = %#v", it.Messages[0])
		}
		if err := e.p.AbandonOrchestrationItem(e.ctx, it.LockToken, 0, false); err != nil {
			t.Fatal(err)
		}
		// delayed enqueue
		if err := e.p.EnqueueForOrchestrator(e.ctx, &repo.ExternalRaised{Instance: "i2", Name: "later"}, 3*time.Second); err != nil {
			t.Fatal(err)
		}
		it = e.fetch(t)
		if it.Instance != "i1" {
			t.Fatalf("fetched %s", it.Instance)
		}
		e.fetchNone(t)
		e.clock.Advance(3 * time.Second)
		if it = e.fetch(t); it.Instance != "i2" {
			t.Fatalf("fetched %s, want i2", it.Instance)
		}
		// enqueue refuses ActivityExecute
		wantErr(t, e.p.EnqueueForOrchestrator(e.ctx, activity("i1", 1, 9), 0), agentstore.ErrInvalidInput)
	})
}

func TestProviderReadAndAppendWithExecution(t *testing.T) {
	forEachDialect(t, func(t *testing.T, h *harness) {
		e := newPEnv(t, h)
		if hist, err := e.p.Read(e.ctx, "nobody"); err != nil || hist == nil || len(hist) != 0 {
			t.Fatalf("unknown read = %v, %v", hist, err)
		}
		e.startInstance(t, "i1", nil)
		extra := []repo.Event{ev("i1", 1, 2, &repo.ExternalEventEvent{Name: "a", Data: "1"}), ev("i1", 1, 3, &repo.ExternalEventEvent{Name: "b", Data: "2"})}
		if err := e.p.AppendWithExecution(e.ctx, "i1", 1, extra); err != nil {
			t.Fatal(err)
		}
		// duplicates ignored
		if err := e.p.AppendWithExecution(e.ctx, "i1", 1, extra[:1]); err != nil {
			t.Fatal(err)
		}
		hist, err := e.p.Read(e.ctx, "i1")
		if err != nil || len(hist) != 3 || hist[2].Kind.(*repo.ExternalEventEvent).Data != "2" {
			t.Fatalf("read = %+v, %v", hist, err)
		}
		wantErr(t, e.p.AppendWithExecution(e.ctx, "i1", 1, []repo.Event{ev("i1", 1, 0, &repo.ExternalEventEvent{})}), agentstore.ErrInvalidInput)
	})
}

func TestProviderLongPollWakesOnEnqueue(t *testing.T) {
	forEachDialect(t, func(t *testing.T, h *harness) {
		e := newPEnv(t, h)
		// empty queue: waits the poll timeout, then nothing
		start := time.Now()
		it, err := e.p.FetchOrchestrationItem(e.ctx, testLock, 100*time.Millisecond, nil)
		if err != nil || it != nil || time.Since(start) < 100*time.Millisecond {
			t.Fatalf("empty long poll: %v %v after %v", it, err, time.Since(start))
		}
		type res struct {
			it  *repo.OrchestrationItem
			err error
			d   time.Duration
		}
		done := make(chan res, 1)
		go func() {
			s := time.Now()
			it, err := e.p.FetchOrchestrationItem(e.ctx, testLock, 10*time.Second, nil)
			done <- res{it, err, time.Since(s)}
		}()
		time.Sleep(50 * time.Millisecond) // real waiting is the point here
		e.enqueue(t, startItem("i1", nil))
		r := <-done
		if r.err != nil || r.it == nil || r.d > 5*time.Second {
			t.Fatalf("long poll: %v %v after %v", r.it, r.err, r.d)
		}
		// worker side too
		wdone := make(chan res, 1)
		go func() {
			s := time.Now()
			l, err := e.p.FetchWorkItem(e.ctx, testLock, 10*time.Second, nil, repo.TagFilter{})
			var it *repo.OrchestrationItem
			if l != nil {
				it = &repo.OrchestrationItem{}
			}
			wdone <- res{it, err, time.Since(s)}
		}()
		time.Sleep(50 * time.Millisecond)
		if err := e.p.EnqueueForWorker(e.ctx, activity("i1", 1, 2)); err != nil {
			t.Fatal(err)
		}
		r = <-wdone
		if r.err != nil || r.it == nil || r.d > 5*time.Second {
			t.Fatalf("worker long poll: %v %v after %v", r.it, r.err, r.d)
		}
		// a cancelled context ends the wait
		ctx, cancel := context.WithTimeout(e.ctx, 50*time.Millisecond)
		defer cancel()
		if _, err := e.p.FetchWorkItem(ctx, testLock, 10*time.Second, nil, repo.TagFilter{}); err == nil {
			t.Fatalf("fetch with expired context returned no error")
		}
	})
}
