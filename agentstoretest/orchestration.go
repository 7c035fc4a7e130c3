package agentstoretest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/Masterminds/semver/v3"
	"golang.org/x/sync/errgroup"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/orchloop"
	"github.com/agentstore/agentstore/repo"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// orchestrationTests are the Orchestration area's tests of this file.
func orchestrationTests() []test {
	return tests(
		test{"ProviderFetchBatchesVisibleMessagesOfOneInstance", testProviderFetchBatchesVisibleMessagesOfOneInstance},
		test{"ProviderFetchAttemptCounts", testProviderFetchAttemptCounts},
		test{"ProviderFetchLockExclusivityAndExpiry", testProviderFetchLockExclusivityAndExpiry},
		test{"ProviderAckInvalidExpiredAndUsedTokens", testProviderAckInvalidExpiredAndUsedTokens},
		test{"ProviderLaterMessagesSurviveAck", testProviderLaterMessagesSurviveAck},
		test{"ProviderCapabilityFilter", testProviderCapabilityFilter},
		test{"ProviderFetchSkipsLockedBacklog", testProviderFetchSkipsLockedBacklog},
		test{"ProviderAckOrderingScheduleAndCancel", testProviderAckOrderingScheduleAndCancel},
		test{"ProviderAckDuplicateEventRollsBackAndKeepsLock", testProviderAckDuplicateEventRollsBackAndKeepsLock},
		test{"ProviderOrphanBatchesCreateNothing", testProviderOrphanBatchesCreateNothing},
		test{"ProviderCompletedAtForEveryTerminalStatus", testProviderCompletedAtForEveryTerminalStatus},
		test{"ProviderContinueAsNewMultiExecution", testProviderContinueAsNewMultiExecution},
		test{"ProviderCorruptHistory", testProviderCorruptHistory},
		test{"ProviderCorruptMessageIsReportedNotDropped", testProviderCorruptMessageIsReportedNotDropped},
		test{"ProviderCustomStatusVersionGating", testProviderCustomStatusVersionGating},
		test{"ProviderRenewKeepsMillisecondsAndAbandonDelay", testProviderRenewKeepsMillisecondsAndAbandonDelay},
		test{"ProviderTimersAndDelayedEnqueue", testProviderTimersAndDelayedEnqueue},
		test{"ProviderReadAndAppendWithExecution", testProviderReadAndAppendWithExecution},
		test{"ProviderLongPollWakesOnEnqueue", testProviderLongPollWakesOnEnqueue},
		test{"ProviderConcurrentFetchOneInstanceExactlyOneWins", testProviderConcurrentFetchOneInstanceExactlyOneWins},
		test{"ProviderConcurrentFetchManyInstancesNoneTwice", testProviderConcurrentFetchManyInstancesNoneTwice},
		test{"ProviderConcurrentAcksOneTokenExactlyOneSucceeds", testProviderConcurrentAcksOneTokenExactlyOneSucceeds},
		test{"ProviderConcurrentSubOrchestrationFanOut", testProviderConcurrentSubOrchestrationFanOut},
		test{"ProviderConcurrentAckAndForceDelete", testProviderConcurrentAckAndForceDelete},
		test{"ProviderRoundTripsPerTurn", testProviderRoundTripsPerTurn},
		test{"ProviderConcurrentTurnsSeeLatestHistory", testProviderConcurrentTurnsSeeLatestHistory},
		test{"ProviderWakeAcrossStores", testProviderWakeAcrossStores},
	)
}

// depthsNow returns the provider's queue depths (visible, unlocked messages).
func (e *pEnv) depthsNow(t *testing.T) *duroxide.QueueDepths {
	t.Helper()
	d, err := e.a.GetQueueDepths(e.ctx)
	if err != nil {
		t.Fatalf("queue depths: %v", err)
	}
	return d
}

// handles returns n providers on separate Store handles (separate pools).
func (e *pEnv) handles(t *testing.T, n int) []duroxide.Provider {
	t.Helper()
	out := []duroxide.Provider{e.p}
	for len(out) < n {
		out = append(out, e.other(t))
	}
	return out
}

// roundTrips records the statements a handle sends to the database server
// (Config.OnRoundTrip), so its count is the number of round trips of a call.
type roundTrips struct {
	mu   sync.Mutex
	sqls []Statement
}

func (c *roundTrips) add(s Statement) {
	c.mu.Lock()
	c.sqls = append(c.sqls, s)
	c.mu.Unlock()
}

// take returns and clears the statements recorded so far.
func (c *roundTrips) take() []Statement {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.sqls
	c.sqls = nil
	return out
}

// testProviderFetchBatchesVisibleMessagesOfOneInstance: a fetch locks one
// instance and returns all its visible messages in FIFO order, attempt 1, a
// lock token and the instance's metadata ("Unknown"/"unknown" for an
// instance never started); the next fetch moves on to the next instance.
func testProviderFetchBatchesVisibleMessagesOfOneInstance(t *testing.T, h *harness) {
	e := newPEnv(t, h)
	e.enqueue(t, startItem("i1", nil))
	e.enqueue(t, &duroxide.ExternalRaised{Instance: "i2", Name: "x", Data: "1"})
	e.enqueue(t, &duroxide.ExternalRaised{Instance: "i1", Name: "a", Data: "1"})
	e.enqueue(t, &duroxide.ExternalRaised{Instance: "i1", Name: "b", Data: "2"})
	it := e.fetch(t)
	if it.Instance != "i1" || len(it.Messages) != 3 || it.AttemptCount != 1 || it.LockToken == "" {
		t.Fatalf("item = %s, %d messages, attempt %d, token %q", it.Instance, len(it.Messages), it.AttemptCount, it.LockToken)
	}
	if _, ok := it.Messages[0].(*duroxide.StartOrchestration); !ok {
		t.Fatalf("first message %T, want StartOrchestration (FIFO)", it.Messages[0])
	}
	if it.Messages[2].(*duroxide.ExternalRaised).Name != "b" {
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
}

// testProviderFetchAttemptCounts: a batch's attempt count is the highest of
// its messages' counts, incremented on every fetch; abandon with
// ignore_attempt undoes the increment but never goes below zero; abandon of
// an unknown token is ErrInvalidLockToken.
func testProviderFetchAttemptCounts(t *testing.T, h *harness) {
	e := newPEnv(t, h)
	e.enqueue(t, startItem("i1", nil))
	it := e.fetch(t)
	if err := e.p.AbandonOrchestrationItem(e.ctx, it.LockToken, 0, false); err != nil {
		t.Fatal(err)
	}
	e.enqueue(t, &duroxide.ExternalRaised{Instance: "i1", Name: "b", Data: "2"})
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
	// plant: a locked batch at attempt 0 (every fetch counts one attempt)
	e.update(t, models.TableOrchestratorQueue, nil, Row{"attempt_count": 0})
	if err := e.p.AbandonOrchestrationItem(e.ctx, it.LockToken, 0, true); err != nil {
		t.Fatal(err)
	}
	// the next fetch counts one attempt on top of what the abandon left:
	// 1 means the abandon kept every message at 0
	if it = e.fetch(t); it.AttemptCount != 1 {
		t.Fatalf("attempt = %d after ignore_attempt at 0, want 1 (floor 0)", it.AttemptCount)
	}
	// unknown token
	wantErr(t, e.p.AbandonOrchestrationItem(e.ctx, "lock_nope", 0, false), agentstore.ErrInvalidLockToken)
}

// testProviderFetchLockExclusivityAndExpiry: a locked instance is not handed
// to another Store until its lock expires; then it is, with attempt 2 and a
// new token, and the expired token is dead (ack and renew fail with
// ErrInvalidLockToken, which also matches ErrLockLost).
func testProviderFetchLockExclusivityAndExpiry(t *testing.T, h *harness) {
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
	err = e.p.AckOrchestrationItem(e.ctx, it.LockToken, duroxide.OrchestrationAck{ExecutionID: 1})
	wantErr(t, err, agentstore.ErrInvalidLockToken)
	if !errors.Is(err, agentstore.ErrLockLost) {
		t.Fatalf("invalid token error does not match ErrLockLost: %v", err)
	}
	wantErr(t, e.p.RenewOrchestrationItemLock(e.ctx, it.LockToken, time.Second), agentstore.ErrInvalidLockToken)
	e.ack(t, it2, duroxide.OrchestrationAck{HistoryDelta: []duroxide.Event{startedEv("i1", 1, 1, nil)}, Metadata: runningMeta(nil)})
}

// testProviderAckInvalidExpiredAndUsedTokens: ack with an unknown, used or
// expired token fails with ErrInvalidLockToken and writes nothing (the
// history and the messages are kept); an event id 0 is ErrInvalidInput.
func testProviderAckInvalidExpiredAndUsedTokens(t *testing.T, h *harness) {
	e := newPEnv(t, h)
	wantErr(t, e.p.AckOrchestrationItem(e.ctx, "lock_unknown", duroxide.OrchestrationAck{ExecutionID: 1}), agentstore.ErrInvalidLockToken)

	e.enqueue(t, startItem("i1", nil))
	it := e.fetch(t)
	e.ack(t, it, duroxide.OrchestrationAck{HistoryDelta: []duroxide.Event{startedEv("i1", 1, 1, nil)}, Metadata: runningMeta(nil)})
	// used token
	wantErr(t, e.p.AckOrchestrationItem(e.ctx, it.LockToken, duroxide.OrchestrationAck{ExecutionID: 1}), agentstore.ErrInvalidLockToken)

	// expired token (no one re-locked it): fails, and the messages are still there
	e.enqueue(t, &duroxide.ExternalRaised{Instance: "i1", Name: "a"})
	it = e.fetch(t)
	e.clock.Advance(testLock)
	wantErr(t, e.p.AckOrchestrationItem(e.ctx, it.LockToken, duroxide.OrchestrationAck{ExecutionID: 1,
		HistoryDelta: []duroxide.Event{ev("i1", 1, 2, &duroxide.ExternalEventEvent{Name: "a"})}}), agentstore.ErrInvalidLockToken)
	if hist, err := e.p.Read(e.ctx, "i1"); err != nil || len(hist) != 1 {
		t.Fatalf("history after failed ack = %d events, %v; want 1", len(hist), err)
	}
	if it = e.fetch(t); len(it.Messages) != 1 {
		t.Fatalf("message lost after failed ack")
	}
	// event id 0 is refused before SQL
	wantErr(t, e.p.AckOrchestrationItem(e.ctx, it.LockToken, duroxide.OrchestrationAck{ExecutionID: 1,
		HistoryDelta: []duroxide.Event{ev("i1", 1, 0, &duroxide.ExternalEventEvent{Name: "a"})}}), agentstore.ErrInvalidInput)
}

// testProviderLaterMessagesSurviveAck: a message enqueued for a locked
// instance waits, is not deleted by the ack of the earlier batch, and is
// fetched next with the acked history.
func testProviderLaterMessagesSurviveAck(t *testing.T, h *harness) {
	e := newPEnv(t, h)
	e.enqueue(t, startItem("i1", nil))
	it := e.fetch(t)
	e.enqueue(t, &duroxide.ExternalRaised{Instance: "i1", Name: "late"})
	e.fetchNone(t) // instance locked, the late message waits
	e.ack(t, it, duroxide.OrchestrationAck{HistoryDelta: []duroxide.Event{startedEv("i1", 1, 1, nil)}, Metadata: runningMeta(nil)})
	it = e.fetch(t)
	if len(it.Messages) != 1 || it.Messages[0].(*duroxide.ExternalRaised).Name != "late" || len(it.History) != 1 {
		t.Fatalf("after ack: %d messages, %d history", len(it.Messages), len(it.History))
	}
	if _, ok := it.History[0].Kind.(*duroxide.OrchestrationStartedEvent); !ok {
		t.Fatalf("history[0] = %T", it.History[0].Kind)
	}
}

// testProviderCapabilityFilter: a dispatcher capability filter fetches only
// instances whose pinned duroxide version is in one of its ranges (an empty
// filter supports nothing, every range counts, a minor >= 1000 compares
// exactly); skipped instances are not locked.
func testProviderCapabilityFilter(t *testing.T, h *harness) {
	e := newPEnv(t, h)
	pin := func(inst, v string) {
		e.enqueue(t, startItem(inst, nil))
		it := e.fetch(t)
		md := runningMeta(nil)
		md.PinnedDuroxideVersion = semver.MustParse(v)
		e.ack(t, it, duroxide.OrchestrationAck{HistoryDelta: []duroxide.Event{startedEv(inst, 1, 1, nil)}, Metadata: md})
	}
	pin("old", "1.5.0")
	pin("new", "2.1.0")
	pin("big", "1.1000.7") // minor >= 1000: the Rust packed int would overflow into the next major
	for _, inst := range []string{"old", "new", "big"} {
		e.enqueue(t, &duroxide.ExternalRaised{Instance: inst, Name: "poke"})
	}
	rng := func(a, b string) duroxide.SemverRange {
		return duroxide.SemverRange{Min: *semver.MustParse(a), Max: *semver.MustParse(b)}
	}
	fetchWith := func(f *duroxide.DispatcherCapabilityFilter) *duroxide.OrchestrationItem {
		it, err := e.p.FetchOrchestrationItem(e.ctx, testLock, 0, f)
		if err != nil {
			t.Fatal(err)
		}
		return it
	}
	// empty filter supports nothing
	if it := fetchWith(&duroxide.DispatcherCapabilityFilter{}); it != nil {
		t.Fatalf("empty filter fetched %s", it.Instance)
	}
	// only v2 supported: "old" (oldest message) is skipped, not locked
	it := fetchWith(&duroxide.DispatcherCapabilityFilter{SupportedDuroxideVersions: []duroxide.SemverRange{rng("2.0.0", "2.9.9")}})
	if it == nil || it.Instance != "new" {
		t.Fatalf("v2 filter fetched %v", it)
	}
	// second range matters (not only the first); the big minor is compared exactly
	it = fetchWith(&duroxide.DispatcherCapabilityFilter{SupportedDuroxideVersions: []duroxide.SemverRange{rng("0.1.0", "0.2.0"), rng("1.999.0", "1.1001.0")}})
	if it == nil || it.Instance != "big" {
		t.Fatalf("multi-range filter fetched %v", it)
	}
	if it := fetchWith(&duroxide.DispatcherCapabilityFilter{SupportedDuroxideVersions: []duroxide.SemverRange{rng("3.0.0", "4.0.0")}}); it != nil {
		t.Fatalf("v3 filter fetched %s", it.Instance)
	}
	// the skipped instance was never locked
	if it := e.fetch(t); it.Instance != "old" {
		t.Fatalf("unfiltered fetch got %s, want old", it.Instance)
	}
}

// testProviderFetchSkipsLockedBacklog: while a locked instance has many
// visible messages queued ahead of everyone else's (more than any window
// a fetch may look at first), fetches still hand out the other instances
// in message order, with the capability filter applied and without
// messages that are not visible yet; once its lock is released, the
// locked instance gets its whole backlog as one batch.
func testProviderFetchSkipsLockedBacklog(t *testing.T, h *harness) {
	e := newPEnv(t, h)
	for _, inst := range []string{"busy", "b", "c", "later"} {
		e.startInstance(t, inst, nil)
	}
	e.enqueue(t, startItem("old", nil)) // "old" is pinned to duroxide 1.5.0
	it := e.fetch(t)
	md := runningMeta(nil)
	md.PinnedDuroxideVersion = semver.MustParse("1.5.0")
	e.ack(t, it, duroxide.OrchestrationAck{HistoryDelta: []duroxide.Event{startedEv("old", 1, 1, nil)}, Metadata: md})
	e.enqueue(t, &duroxide.ExternalRaised{Instance: "busy", Name: "first"})
	held := e.fetch(t) // busy stays locked
	if held.Instance != "busy" {
		t.Fatalf("fetched %s, want busy", held.Instance)
	}
	const backlog = 150
	for i := 0; i < backlog; i++ {
		e.enqueue(t, &duroxide.ExternalRaised{Instance: "busy", Name: "backlog"})
	}
	if err := e.p.EnqueueForOrchestrator(e.ctx, &duroxide.ExternalRaised{Instance: "later", Name: "timer"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	v2 := &duroxide.DispatcherCapabilityFilter{SupportedDuroxideVersions: []duroxide.SemverRange{{Min: *semver.MustParse("2.0.0"), Max: *semver.MustParse("2.9.9")}}}
	// round 0 with few queued instances; round 1 with hundreds more that
	// have only messages not visible yet
	for round := range 2 {
		if round == 1 {
			for i := range 300 {
				if err := e.p.EnqueueForOrchestrator(e.ctx, &duroxide.ExternalRaised{Instance: fmt.Sprintf("timer-%03d", i), Name: "t"}, time.Hour); err != nil {
					t.Fatal(err)
				}
			}
		}
		for _, inst := range []string{"old", "b", "c"} {
			e.enqueue(t, &duroxide.ExternalRaised{Instance: inst, Name: "poke"})
		}
		got, err := e.p.FetchOrchestrationItem(e.ctx, testLock, 0, v2)
		if err != nil || got == nil || got.Instance != "b" {
			t.Fatalf("round %d: v2 fetch behind the locked backlog = %v, %v; want b (old is pinned to 1.5.0)", round, got, err)
		}
		items := []*duroxide.OrchestrationItem{got, e.fetch(t), e.fetch(t)}
		if items[1].Instance != "old" || items[2].Instance != "c" {
			t.Fatalf("round %d: fetches behind the locked backlog = %s %s, want old c", round, items[1].Instance, items[2].Instance)
		}
		e.fetchNone(t) // busy is locked, the other messages are not visible yet
		for _, it := range items {
			e.ack(t, it, duroxide.OrchestrationAck{Metadata: runningMeta(nil)})
		}
	}
	e.ack(t, held, duroxide.OrchestrationAck{Metadata: runningMeta(nil)})
	batch := e.fetch(t)
	if batch.Instance != "busy" || len(batch.Messages) != backlog {
		t.Fatalf("after the ack: %s with %d messages, want busy with its %d", batch.Instance, len(batch.Messages), backlog)
	}
}

// testProviderAckOrderingScheduleAndCancel: an ack's cancelled activities
// are removed from the worker queue, whether held by a worker (whose lease
// then fails with ErrInvalidLockToken) or scheduled in the same ack;
// cancelling an unknown activity is ignored.
func testProviderAckOrderingScheduleAndCancel(t *testing.T, h *harness) {
	e := newPEnv(t, h)
	e.startInstance(t, "i1", nil)
	// turn 2: schedule activity 2 and 3
	e.enqueue(t, &duroxide.ExternalRaised{Instance: "i1", Name: "go"})
	it := e.fetch(t)
	e.ack(t, it, duroxide.OrchestrationAck{HistoryDelta: []duroxide.Event{
		ev("i1", 1, 2, &duroxide.ActivityScheduledEvent{Name: "act"}), ev("i1", 1, 3, &duroxide.ActivityScheduledEvent{Name: "act"})},
		WorkerItems: []duroxide.WorkItem{activity("i1", 1, 2), activity("i1", 1, 3)}})
	// a worker holds activity 2
	lease, err := e.p.FetchWorkItem(e.ctx, testLock, 0, nil, duroxide.TagFilter{})
	if err != nil || lease == nil || lease.Item.(*duroxide.ActivityExecute).ID != 2 {
		t.Fatalf("worker fetch: %+v %v", lease, err)
	}
	// turn 3: cancel activity 2 (held by the worker), schedule and cancel 4 in the same turn
	e.enqueue(t, &duroxide.ExternalRaised{Instance: "i1", Name: "cancel"})
	it = e.fetch(t)
	e.ack(t, it, duroxide.OrchestrationAck{HistoryDelta: []duroxide.Event{ev("i1", 1, 4, &duroxide.ActivityScheduledEvent{Name: "act"})},
		WorkerItems: []duroxide.WorkItem{activity("i1", 1, 4)},
		CancelledActivities: []duroxide.ScheduledActivityIdentifier{{Instance: "i1", ExecutionID: 1, ActivityID: 2},
			{Instance: "i1", ExecutionID: 1, ActivityID: 4}, {Instance: "i1", ExecutionID: 1, ActivityID: 99}}})
	if d := e.depthsNow(t); d.WorkerQueue != 1 {
		t.Fatalf("worker queue depth = %d, want 1 (activity 3 only)", d.WorkerQueue)
	}
	// the worker learns its activity was cancelled
	wantErr(t, e.p.RenewWorkItemLock(e.ctx, lease.LockToken, time.Second), agentstore.ErrInvalidLockToken)
	wantErr(t, e.p.AckWorkItem(e.ctx, lease.LockToken, &duroxide.ActivityCompleted{Instance: "i1", ExecutionID: 1, ID: 2, Result: "r"}), agentstore.ErrInvalidLockToken)
	l3, err := e.p.FetchWorkItem(e.ctx, testLock, 0, nil, duroxide.TagFilter{})
	if err != nil || l3 == nil || l3.Item.(*duroxide.ActivityExecute).ID != 3 {
		t.Fatalf("worker fetch after cancel: %+v %v", l3, err)
	}
	// once every lease has expired all remaining items are visible: only
	// activity 3 is left (2 and 4 were deleted, not merely unlocked)
	e.clock.Advance(testLock)
	if d := e.depthsNow(t); d.WorkerQueue != 1 {
		t.Fatalf("worker queue = %d items after the leases expired, want 1 (activity 3 only)", d.WorkerQueue)
	}
}

// testProviderAckDuplicateEventRollsBackAndKeepsLock: an ack whose history
// delta repeats an event id fails with ErrDuplicateEvent and writes nothing
// (no worker or orchestrator items, metadata unchanged, the fetched message
// kept); the lock is kept, so the same token renews and acks again.
func testProviderAckDuplicateEventRollsBackAndKeepsLock(t *testing.T, h *harness) {
	e := newPEnv(t, h)
	e.startInstance(t, "i1", nil)
	e.enqueue(t, &duroxide.ExternalRaised{Instance: "i1", Name: "go"})
	it := e.fetch(t)
	bad := duroxide.OrchestrationAck{ExecutionID: 1,
		HistoryDelta:      []duroxide.Event{ev("i1", 1, 2, &duroxide.ExternalEventEvent{Name: "go"}), ev("i1", 1, 1, &duroxide.ExternalEventEvent{Name: "dup"})},
		WorkerItems:       []duroxide.WorkItem{activity("i1", 1, 2)},
		OrchestratorItems: []duroxide.WorkItem{startItem("child", sp("i1"))},
		Metadata:          duroxide.ExecutionMetadata{Status: sp(duroxide.StatusCompleted), Output: sp("x")}}
	wantErr(t, e.p.AckOrchestrationItem(e.ctx, it.LockToken, bad), agentstore.ErrDuplicateEvent)
	if d := e.depthsNow(t); d.WorkerQueue != 0 {
		t.Fatalf("worker items survived rollback: %d", d.WorkerQueue)
	}
	// white-box: the fetched message is locked, so no API sees it without
	// letting the lock this test keeps expire
	if n := e.count(t, models.TableOrchestratorQueue); n != 1 {
		t.Fatalf("orchestrator queue = %d rows, want the 1 fetched message", n)
	}
	if info, err := e.a.GetExecutionInfo(e.ctx, "i1", 1); err != nil || info.Status != duroxide.StatusRunning || info.EventCount != 1 {
		t.Fatalf("execution after rollback = %+v, %v", info, err)
	}
	// lock kept: renew works, nobody else gets the instance
	if err := e.p.RenewOrchestrationItemLock(e.ctx, it.LockToken, time.Second); err != nil {
		t.Fatalf("renew after duplicate: %v", err)
	}
	e.fetchNone(t)
	e.ack(t, it, duroxide.OrchestrationAck{HistoryDelta: []duroxide.Event{ev("i1", 1, 2, &duroxide.ExternalEventEvent{Name: "go"})}})
	if hist, _ := e.p.Read(e.ctx, "i1"); len(hist) != 2 {
		t.Fatalf("history = %d events, want 2", len(hist))
	}
}

// testProviderOrphanBatchesCreateNothing: acking a batch of a never-started
// instance without metadata or history creates no instance or execution
// and deletes the messages; batches of only QueueMessages for unknown
// instances are dropped and the fetch moves on; history acked without
// metadata is readable and has its execution row.
func testProviderOrphanBatchesCreateNothing(t *testing.T, h *harness) {
	e := newPEnv(t, h)
	// a batch for a never-started instance acked without metadata
	e.enqueue(t, &duroxide.ExternalRaised{Instance: "ghost", Name: "x"})
	it := e.fetch(t)
	if it.OrchestrationName != "Unknown" || it.ExecutionID != 1 {
		t.Fatalf("ghost item = %q exec %d", it.OrchestrationName, it.ExecutionID)
	}
	e.ack(t, it, duroxide.OrchestrationAck{})
	m, err := e.a.GetSystemMetrics(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	// past the fetch's lock, a message the ack left would be visible again
	e.clock.Advance(testLock)
	if d := e.depthsNow(t); m.TotalInstances != 0 || m.TotalExecutions != 0 || d.OrchestratorQueue != 0 {
		t.Fatalf("orphan ack left rows: %+v, queue %+v", m, d)
	}
	// all-QueueMessage batches of unknown instances are dropped and the fetch moves on
	e.enqueue(t, &duroxide.QueueMessage{Instance: "ghost2", Name: "q", Data: "1"})
	e.enqueue(t, startItem("real", nil))
	if it := e.fetch(t); it.Instance != "real" {
		t.Fatalf("fetched %s, want real", it.Instance)
	}
	// real's start is locked; ghost2's message is neither visible nor (see
	// the end) merely skipped
	if d := e.depthsNow(t); d.OrchestratorQueue != 0 {
		t.Fatalf("queue depth = %d, want 0 (only real's start, locked)", d.OrchestratorQueue)
	}
	// history acked without metadata is still readable
	e.enqueue(t, &duroxide.ExternalRaised{Instance: "bare", Name: "x"})
	it = e.fetch(t)
	e.ack(t, it, duroxide.OrchestrationAck{HistoryDelta: []duroxide.Event{startedEv("bare", 1, 1, nil)}})
	if hist, err := e.p.Read(e.ctx, "bare"); err != nil || len(hist) != 1 {
		t.Fatalf("read bare = %d, %v", len(hist), err)
	}
	// an ack that writes history is no orphan: its execution row exists
	// (as duroxide writes it), though no instance row does
	if m, _ := e.a.GetSystemMetrics(e.ctx); m.TotalExecutions != 1 || m.TotalInstances != 0 {
		t.Fatalf("metrics after bare ack = %+v, want 1 execution, 0 instances", m)
	}
	if ids, err := e.a.ListExecutions(e.ctx, "bare"); err != nil || !slices.Equal(ids, []uint64{1}) {
		t.Fatalf("bare executions = %v %v", ids, err)
	}
	// every lock expired: the queue holds only real's start (ghost2's
	// message was dropped, bare's deleted by its ack)
	e.clock.Advance(testLock)
	if d := e.depthsNow(t); d.OrchestratorQueue != 1 {
		t.Fatalf("queue = %d messages, want only real's start", d.OrchestratorQueue)
	}
}

// testProviderCompletedAtForEveryTerminalStatus: an execution gets its
// completed_at (the clock at the ack, milliseconds), status, output and
// event count when it reaches any terminal status (Completed, Failed,
// ContinuedAsNew); a running execution has none.
func testProviderCompletedAtForEveryTerminalStatus(t *testing.T, h *harness) {
	e := newPEnv(t, h)
	for i, st := range []string{duroxide.StatusCompleted, duroxide.StatusFailed, duroxide.StatusContinuedAsNew} {
		inst := "i" + st
		e.startInstance(t, inst, nil)
		info, err := e.a.GetExecutionInfo(e.ctx, inst, 1)
		if err != nil || info.CompletedAt != nil || info.Status != duroxide.StatusRunning {
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
}

// testProviderContinueAsNewMultiExecution: continue-as-new starts execution 2
// (Read returns the newest execution, ReadWithExecution and ListExecutions
// the older one too), and the current execution id only grows: a late ack
// for execution 1 does not move it back.
func testProviderContinueAsNewMultiExecution(t *testing.T, h *harness) {
	e := newPEnv(t, h)
	e.startInstance(t, "i1", nil)
	// the runtime ends execution 1 as ContinuedAsNew and enqueues ContinueAsNew
	e.enqueue(t, &duroxide.ExternalRaised{Instance: "i1", Name: "go"})
	it := e.fetch(t)
	e.ack(t, it, duroxide.OrchestrationAck{HistoryDelta: []duroxide.Event{ev("i1", 1, 2, &duroxide.OrchestrationContinuedAsNewEvent{Input: "next"})},
		OrchestratorItems: []duroxide.WorkItem{&duroxide.ContinueAsNew{Instance: "i1", Orchestration: "Orch", Input: "next", Version: sp("1.0.0")}},
		Metadata:          duroxide.ExecutionMetadata{Status: sp(duroxide.StatusContinuedAsNew), Output: sp("next")}})
	it = e.fetch(t)
	if it.ExecutionID != 1 || len(it.History) != 2 {
		t.Fatalf("CAN fetch: exec %d history %d", it.ExecutionID, len(it.History))
	}
	if _, ok := it.Messages[0].(*duroxide.ContinueAsNew); !ok {
		t.Fatalf("message %T", it.Messages[0])
	}
	e.ack(t, it, duroxide.OrchestrationAck{ExecutionID: 2, HistoryDelta: []duroxide.Event{startedEv("i1", 2, 1, nil)}, Metadata: runningMeta(nil)})
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
	e.enqueue(t, &duroxide.ExternalRaised{Instance: "i1", Name: "late"})
	it = e.fetch(t)
	if it.ExecutionID != 2 {
		t.Fatalf("fetch exec = %d, want 2", it.ExecutionID)
	}
	e.ack(t, it, duroxide.OrchestrationAck{ExecutionID: 1, HistoryDelta: []duroxide.Event{ev("i1", 1, 3, &duroxide.ExternalEventEvent{Name: "late"})}})
	if id, err := e.a.LatestExecutionID(e.ctx, "i1"); err != nil || id != 2 {
		t.Fatalf("latest = %d, %v", id, err)
	}
	if h2, _ := e.a.ReadHistory(e.ctx, "i1"); len(h2) != 1 {
		t.Fatalf("read_history = %d events", len(h2))
	}
}

// testProviderCorruptHistory: an instance whose history rows do not decode is
// still fetched, with HistoryError set and no events (locked, abandonable,
// attempt counted), and Read and ReadHistory fail with ErrCorruptRow.
func testProviderCorruptHistory(t *testing.T, h *harness) {
	e := newPEnv(t, h)
	for _, garbage := range []string{"not json at all", `{"garbage": true}`, `{"type":"NoSuchEvent","event_id":1}`} {
		inst := "c" + garbage[:3]
		e.startInstance(t, inst, nil)
		// plant: history rows that do not decode
		e.update(t, models.TableHistory, Row{"instance_id": inst}, Row{"event_data": garbage})
		e.enqueue(t, &duroxide.ExternalRaised{Instance: inst, Name: "x"})
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
		e.ack(t, it, duroxide.OrchestrationAck{Metadata: duroxide.ExecutionMetadata{Status: sp(duroxide.StatusFailed)}})
	}
}

// testProviderCorruptMessageIsReportedNotDropped: a queue message that does
// not decode makes the fetch fail with ErrCorruptRow; the message is kept,
// locked until its lock expires, then reported again.
func testProviderCorruptMessageIsReportedNotDropped(t *testing.T, h *harness) {
	e := newPEnv(t, h)
	e.enqueue(t, &duroxide.ExternalRaised{Instance: "i1", Name: "x"})
	// plant: a work item of an unknown type
	e.update(t, models.TableOrchestratorQueue, nil, Row{"work_item": `{"Bogus":{}}`})
	_, err := e.p.FetchOrchestrationItem(e.ctx, time.Second, 0, nil)
	wantErr(t, err, agentstore.ErrCorruptRow)
	e.fetchNone(t) // locked until expiry
	e.clock.Advance(time.Second)
	if d := e.depthsNow(t); d.OrchestratorQueue != 1 {
		t.Fatalf("corrupt message dropped: queue depth %d after its lock expired, want 1", d.OrchestratorQueue)
	}
	_, err = e.p.FetchOrchestrationItem(e.ctx, time.Second, 0, nil)
	wantErr(t, err, agentstore.ErrCorruptRow)
}

// testProviderCustomStatusVersionGating: GetCustomStatus returns nil for an
// unknown or fresh instance and for a version already seen; a turn with
// custom-status events bumps the version once and the last status wins; a
// turn without them does not bump; a nil status clears it.
func testProviderCustomStatusVersionGating(t *testing.T, h *harness) {
	e := newPEnv(t, h)
	if cs, err := e.p.GetCustomStatus(e.ctx, "nope", 0); err != nil || cs != nil {
		t.Fatalf("unknown instance: %+v %v", cs, err)
	}
	e.startInstance(t, "i1", nil)
	if cs, err := e.p.GetCustomStatus(e.ctx, "i1", 0); err != nil || cs != nil {
		t.Fatalf("fresh instance: %+v %v", cs, err)
	}
	turn := func(id uint64, statuses ...*string) {
		e.enqueue(t, &duroxide.ExternalRaised{Instance: "i1", Name: "x"})
		it := e.fetch(t)
		var delta []duroxide.Event
		for i, s := range statuses {
			delta = append(delta, ev("i1", 1, id+uint64(i), &duroxide.CustomStatusUpdatedEvent{Status: s}))
		}
		e.ack(t, it, duroxide.OrchestrationAck{HistoryDelta: delta})
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
}

// testProviderRenewKeepsMillisecondsAndAbandonDelay: lock renewal keeps
// sub-second durations, an expired lock cannot be renewed, and abandon
// with a delay hides the instance's messages exactly that long.
func testProviderRenewKeepsMillisecondsAndAbandonDelay(t *testing.T, h *harness) {
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
}

// testProviderTimersAndDelayedEnqueue: a TimerFired item and a delayed
// enqueue stay invisible (to fetch and to the queue depths) until their
// time; EnqueueForOrchestrator refuses an ActivityExecute.
func testProviderTimersAndDelayedEnqueue(t *testing.T, h *harness) {
	e := newPEnv(t, h)
	e.startInstance(t, "i1", nil)
	fire := uint64(e.clock.Now().Add(10 * time.Second).UnixMilli())
	e.enqueue(t, &duroxide.ExternalRaised{Instance: "i1", Name: "x"})
	it := e.fetch(t)
	e.ack(t, it, duroxide.OrchestrationAck{HistoryDelta: []duroxide.Event{ev("i1", 1, 2, &duroxide.TimerCreatedEvent{FireAtMS: fire})},
		OrchestratorItems: []duroxide.WorkItem{&duroxide.TimerFired{Instance: "i1", ExecutionID: 1, ID: 2, FireAtMS: fire}}})
	e.fetchNone(t)
	if d, _ := e.a.GetQueueDepths(e.ctx); d.OrchestratorQueue != 0 {
		t.Fatalf("depth counts invisible timer: %+v", d)
	}
	e.clock.Advance(10 * time.Second)
	it = e.fetch(t)
	if tf, ok := it.Messages[0].(*duroxide.TimerFired); !ok || tf.FireAtMS != fire {
		t.Fatalf("timer message = %#v", it.Messages[0])
	}
	if err := e.p.AbandonOrchestrationItem(e.ctx, it.LockToken, 0, false); err != nil {
		t.Fatal(err)
	}
	// delayed enqueue
	if err := e.p.EnqueueForOrchestrator(e.ctx, &duroxide.ExternalRaised{Instance: "i2", Name: "later"}, 3*time.Second); err != nil {
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
}

// testProviderReadAndAppendWithExecution: Read of an unknown instance is an
// empty, non-nil history; AppendWithExecution appends events, ignores
// duplicates and refuses event id 0 (ErrInvalidInput).
func testProviderReadAndAppendWithExecution(t *testing.T, h *harness) {
	e := newPEnv(t, h)
	if hist, err := e.p.Read(e.ctx, "nobody"); err != nil || hist == nil || len(hist) != 0 {
		t.Fatalf("unknown read = %v, %v", hist, err)
	}
	e.startInstance(t, "i1", nil)
	extra := []duroxide.Event{ev("i1", 1, 2, &duroxide.ExternalEventEvent{Name: "a", Data: "1"}), ev("i1", 1, 3, &duroxide.ExternalEventEvent{Name: "b", Data: "2"})}
	if err := e.p.AppendWithExecution(e.ctx, "i1", 1, extra); err != nil {
		t.Fatal(err)
	}
	// duplicates ignored
	if err := e.p.AppendWithExecution(e.ctx, "i1", 1, extra[:1]); err != nil {
		t.Fatal(err)
	}
	hist, err := e.p.Read(e.ctx, "i1")
	if err != nil || len(hist) != 3 || hist[2].Kind.(*duroxide.ExternalEventEvent).Data != "2" {
		t.Fatalf("read = %+v, %v", hist, err)
	}
	wantErr(t, e.p.AppendWithExecution(e.ctx, "i1", 1, []duroxide.Event{ev("i1", 1, 0, &duroxide.ExternalEventEvent{})}), agentstore.ErrInvalidInput)
}

// testProviderLongPollWakesOnEnqueue: a long-polling fetch (orchestration and
// worker) waits for its timeout on an empty queue and returns soon after an
// enqueue on the same Store; a cancelled context ends the wait with an error.
func testProviderLongPollWakesOnEnqueue(t *testing.T, h *harness) {
	e := newPEnv(t, h)
	// empty queue: waits the poll timeout, then nothing
	start := time.Now()
	it, err := e.p.FetchOrchestrationItem(e.ctx, testLock, 100*time.Millisecond, nil)
	if err != nil || it != nil || time.Since(start) < 100*time.Millisecond {
		t.Fatalf("empty long poll: %v %v after %v", it, err, time.Since(start))
	}
	type res struct {
		it  *duroxide.OrchestrationItem
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
		l, err := e.p.FetchWorkItem(e.ctx, testLock, 10*time.Second, nil, duroxide.TagFilter{})
		var it *duroxide.OrchestrationItem
		if l != nil {
			it = &duroxide.OrchestrationItem{}
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
	if _, err := e.p.FetchWorkItem(ctx, testLock, 10*time.Second, nil, duroxide.TagFilter{}); err == nil {
		t.Fatalf("fetch with expired context returned no error")
	}
}

// testProviderConcurrentFetchOneInstanceExactlyOneWins: concurrent fetches on
// several Stores for one instance's messages: exactly one gets it.
func testProviderConcurrentFetchOneInstanceExactlyOneWins(t *testing.T, h *harness) {
	e := newPEnv(t, h)
	ps := e.handles(t, 5)
	for round := range 3 {
		inst := fmt.Sprintf("i%d", round)
		e.enqueue(t, startItem(inst, nil))
		var mu sync.Mutex
		var won []*duroxide.OrchestrationItem
		var g errgroup.Group
		for i := range 10 {
			p := ps[i%len(ps)]
			g.Go(func() error {
				it, err := p.FetchOrchestrationItem(e.ctx, testLock, 0, nil)
				if it != nil {
					mu.Lock()
					won = append(won, it)
					mu.Unlock()
				}
				return err
			})
		}
		if err := g.Wait(); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if len(won) != 1 || won[0].Instance != inst {
			t.Fatalf("round %d: %d winners, want exactly 1", round, len(won))
		}
		e.ack(t, won[0], duroxide.OrchestrationAck{HistoryDelta: []duroxide.Event{startedEv(inst, 1, 1, nil)}, Metadata: runningMeta(nil)})
	}
}

// testProviderConcurrentFetchManyInstancesNoneTwice: concurrent fetches on
// several Stores over many instances hand out each instance exactly once
// with all its messages (a fetch that loses a race moves on).
func testProviderConcurrentFetchManyInstancesNoneTwice(t *testing.T, h *harness) {
	e := newPEnv(t, h)
	ps := e.handles(t, 4)
	for i := range 20 {
		e.enqueue(t, startItem(fmt.Sprintf("i%02d", i), nil))
		e.enqueue(t, &duroxide.ExternalRaised{Instance: fmt.Sprintf("i%02d", i), Name: "x"})
	}
	var mu sync.Mutex
	got := map[string]int{}
	var g errgroup.Group
	for i := range 40 {
		p := ps[i%len(ps)]
		g.Go(func() error {
			it, err := p.FetchOrchestrationItem(e.ctx, testLock, 0, nil)
			if it != nil {
				mu.Lock()
				got[it.Instance]++
				mu.Unlock()
				if len(it.Messages) != 2 {
					return fmt.Errorf("%s: %d messages, want 2", it.Instance, len(it.Messages))
				}
			}
			return err
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	if len(got) != 20 {
		t.Fatalf("%d distinct instances handed out, want 20 (a lost race must move on)", len(got))
	}
	for inst, n := range got {
		if n != 1 {
			t.Fatalf("%s handed out %d times", inst, n)
		}
	}
}

// testProviderConcurrentAcksOneTokenExactlyOneSucceeds: two concurrent acks
// of one token on two Stores: exactly one succeeds, the other fails with
// ErrInvalidLockToken, and the ack's items are enqueued once.
func testProviderConcurrentAcksOneTokenExactlyOneSucceeds(t *testing.T, h *harness) {
	e := newPEnv(t, h)
	ps := e.handles(t, 2)
	e.startInstance(t, "i1", nil)
	for round := range 5 {
		e.enqueue(t, &duroxide.ExternalRaised{Instance: "i1", Name: "x"})
		it := e.fetch(t)
		if it.Instance != "i1" {
			t.Fatalf("fetched %s", it.Instance)
		}
		ack := duroxide.OrchestrationAck{ExecutionID: 1, // empty delta: only the lock claim protects against a double enqueue
			// a far-future timer: stays invisible, so later fetches see only i1
			OrchestratorItems: []duroxide.WorkItem{&duroxide.TimerFired{Instance: fmt.Sprintf("t%d", round), ExecutionID: 1, ID: 1,
				FireAtMS: uint64(e.clock.Now().Add(time.Hour).UnixMilli())}}}
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for i := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = ps[i].AckOrchestrationItem(e.ctx, it.LockToken, ack)
			}()
		}
		wg.Wait()
		ok := 0
		for _, err := range errs {
			if err == nil {
				ok++
			} else if !errors.Is(err, agentstore.ErrInvalidLockToken) {
				t.Fatalf("round %d: loser error %v, want ErrInvalidLockToken", round, err)
			}
		}
		if ok != 1 {
			t.Fatalf("round %d: %d acks succeeded (%v)", round, ok, errs)
		}
		// i1's message is consumed, the timers are invisible for an hour
		if d := e.depthsNow(t); d.OrchestratorQueue != 0 {
			t.Fatalf("round %d: queue depth = %d, want 0", round, d.OrchestratorQueue)
		}
	}
	// the timers fire: one per round, none enqueued twice
	e.clock.Advance(time.Hour)
	if d := e.depthsNow(t); d.OrchestratorQueue != 5 {
		t.Fatalf("queue = %d timers, want 5 (double enqueue?)", d.OrchestratorQueue)
	}
}

// testProviderConcurrentSubOrchestrationFanOut runs 50 parents that each fan
// out to 5 sub-orchestrations (each running one activity) on three Store
// handles, each with its own orchestrator and worker loop. Every instance
// must complete and no loop may fail (deadlocks would surface as errors
// once the internal retries are exhausted).
func testProviderConcurrentSubOrchestrationFanOut(t *testing.T, h *harness) {
	e := newPEnv(t, h)
	parent := func(c *orchloop.Ctx, input string) (string, bool, error) {
		done := true
		sum := 0
		for i := range 5 {
			out, ok, err := c.SubOrchestration("child", fmt.Sprintf("%s-%d", input, i))
			if err != nil {
				return "", false, err
			}
			done = done && ok
			sum += len(out)
		}
		return fmt.Sprint(sum), done, nil
	}
	child := func(c *orchloop.Ctx, input string) (string, bool, error) { return c.Activity("echo", input) }
	// a hang guard, not a speed bound: the portable path under -race beside
	// the rest of a suite ran past 2 minutes on a loaded machine
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var engines []*orchloop.Engine
	for range 3 {
		st := h.Open(t)
		engines = append(engines, &orchloop.Engine{P: st.Provider(), PollTimeout: 50 * time.Millisecond,
			Orchestrations: map[string]orchloop.Orchestration{"parent": parent, "child": child},
			Activities:     map[string]orchloop.Activity{"echo": func(_ context.Context, s string) (string, error) { return s, nil }}})
	}
	ids := make([]string, 50)
	for i := range ids {
		ids[i] = fmt.Sprintf("p%02d", i)
		if err := engines[i%3].Start(ctx, ids[i], "parent", ids[i]); err != nil {
			t.Fatal(err)
		}
	}
	loopCtx, stop := context.WithCancel(ctx)
	g, gctx := errgroup.WithContext(loopCtx)
	for _, eng := range engines {
		g.Go(func() error { return eng.RunOrchestrator(gctx) })
		g.Go(func() error { return eng.RunWorker(gctx) })
	}
	infos, werr := orchloop.Wait(ctx, e.a, ids, 20*time.Millisecond)
	stop()
	if err := g.Wait(); err != nil {
		t.Fatalf("loop failed: %v", err)
	}
	if werr != nil {
		t.Fatal(werr)
	}
	for _, info := range infos {
		if info.Status != duroxide.StatusCompleted {
			t.Fatalf("%s: %s %v", info.InstanceID, info.Status, info.Output)
		}
	}
	m, err := e.a.GetSystemMetrics(e.ctx)
	if err != nil || m.TotalInstances != 300 || m.CompletedInstances != 300 {
		t.Fatalf("metrics = %+v %v", m, err)
	}
	var retries int64
	for _, eng := range engines {
		retries += eng.Stats().Retries
	}
	t.Logf("300 instances completed, %d loop-level retries", retries)
}

// testProviderConcurrentAckAndForceDelete races an ack against a forced
// delete of the same instance on two handles: whichever wins, the instance
// is gone afterwards (no zombie re-creation by a late ack) and neither side
// reports anything but success or ErrInvalidLockToken.
func testProviderConcurrentAckAndForceDelete(t *testing.T, h *harness) {
	e := newPEnv(t, h)
	other := e.h.Open(t, withClock(e.clock.Now)).ProviderAdmin()
	for round := range 8 {
		inst := fmt.Sprintf("r%d", round)
		e.startInstance(t, inst, nil)
		e.enqueue(t, &duroxide.ExternalRaised{Instance: inst, Name: "x"})
		it := e.fetch(t)
		var ackErr, delErr error
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			ackErr = e.p.AckOrchestrationItem(e.ctx, it.LockToken, duroxide.OrchestrationAck{ExecutionID: 1,
				HistoryDelta: []duroxide.Event{ev(inst, 1, 2, &duroxide.ExternalEventEvent{Name: "x"})}, Metadata: runningMeta(nil),
				WorkerItems: []duroxide.WorkItem{activity(inst, 1, 3)}})
		}()
		go func() {
			defer wg.Done()
			for {
				_, delErr = other.DeleteInstance(e.ctx, inst, true)
				if !errors.Is(delErr, agentstore.ErrRetryable) {
					return
				}
			}
		}()
		wg.Wait()
		if delErr != nil {
			t.Fatalf("round %d: delete: %v", round, delErr)
		}
		if ackErr != nil && !errors.Is(ackErr, agentstore.ErrInvalidLockToken) {
			t.Fatalf("round %d: ack: %v", round, ackErr)
		}
		if _, err := e.a.GetInstanceInfo(e.ctx, inst); !errors.Is(err, agentstore.ErrNotFound) {
			t.Fatalf("round %d: instance survived (ack err %v): %v", round, ackErr, err)
		}
		if ackErr == nil { // the ack won: its worker item was deleted with the instance
			if d := e.depthsNow(t); d.WorkerQueue != 0 {
				t.Fatalf("round %d: %d worker items left", round, d.WorkerQueue)
			}
		}
	}
}

// testProviderRoundTripsPerTurn runs a 1-activity orchestration (start
// turn, activity, completion turn) and, on a handle whose round trips the
// backend counts (Config.OnRoundTrip: PostgreSQL) with agentstore's fast
// paths (CapFastPaths), asserts the statements (= round trips) of each
// provider call: a fetch is one
// autocommit statement (a new instance's included: the claim vouches for
// its empty metadata), an ack one, the worker's fetch and ack one
// each; none opens a transaction. Before the one-statement fetch and ack,
// the orchestration fetch took 6-7 and the ack 8-9 round trips.
func testProviderRoundTripsPerTurn(t *testing.T, h *harness) {
	ctx := context.Background()
	clock := newTestClock()
	counter := &roundTrips{}
	st, err := h.tryOpen(t, withClock(clock.Now), withRoundTrips(counter.add))
	counted := err == nil
	if errors.Is(err, ErrNotSupported) { // the calls still run, uncounted
		t.Logf("round trips not counted: %v", err)
		st, err = h.tryOpen(t, withClock(clock.Now))
	}
	if err != nil {
		t.Fatal(err)
	}
	p := st.Provider()
	fast := counted && capable(st, agentstore.CapFastPaths)
	expect := func(what string, want int) {
		t.Helper()
		got := counter.take()
		if !fast {
			return
		}
		t.Logf("%s: %d statements", what, len(got))
		for _, s := range got {
			if s.TxControl {
				t.Errorf("%s: runs %q; want autocommit statements only", what, s.Text)
			}
		}
		if len(got) != want {
			for i, s := range got {
				t.Logf("  %d: %.160s", i+1, s.Text)
			}
			t.Errorf("%s: %d statements (round trips), want %d", what, len(got), want)
		}
	}

	if err := p.EnqueueForOrchestrator(ctx, startItem("rt", nil), 0); err != nil {
		t.Fatal(err)
	}
	counter.take()

	// turn 1: new instance
	it, err := p.FetchOrchestrationItem(ctx, testLock, 0, nil)
	if err != nil || it == nil {
		t.Fatalf("fetch 1: %v, %v", it, err)
	}
	expect("fetch (new instance)", 1)
	if it.OrchestrationName != "Orch" || it.Version != "1.0.0" || it.ExecutionID != 1 || len(it.History) != 0 || len(it.Messages) != 1 {
		t.Fatalf("fetch 1 = %q %q exec %d, %d events, %d messages", it.OrchestrationName, it.Version, it.ExecutionID, len(it.History), len(it.Messages))
	}
	err = p.AckOrchestrationItem(ctx, it.LockToken, duroxide.OrchestrationAck{ExecutionID: 1,
		HistoryDelta: []duroxide.Event{startedEv("rt", 1, 1, nil), ev("rt", 1, 2, &duroxide.ActivityScheduledEvent{Name: "act", Input: "in"})},
		WorkerItems:  []duroxide.WorkItem{activity("rt", 1, 2)},
		Metadata:     runningMeta(nil)})
	if err != nil {
		t.Fatal(err)
	}
	expect("ack (history, activity, metadata)", 1)

	// the activity
	lease, err := p.FetchWorkItem(ctx, testLock, 0, nil, duroxide.TagFilter{})
	if err != nil || lease == nil {
		t.Fatalf("fetch work: %v, %v", lease, err)
	}
	expect("worker fetch", 1)
	if err := p.AckWorkItem(ctx, lease.LockToken, &duroxide.ActivityCompleted{Instance: "rt", ExecutionID: 1, ID: 2, Result: "out"}); err != nil {
		t.Fatal(err)
	}
	expect("worker ack", 1)

	// turn 2: existing instance, metadata and history read in the same statement
	it, err = p.FetchOrchestrationItem(ctx, testLock, 0, nil)
	if err != nil || it == nil {
		t.Fatalf("fetch 2: %v, %v", it, err)
	}
	expect("fetch (existing instance)", 1)
	if it.OrchestrationName != "Orch" || it.ExecutionID != 1 || len(it.History) != 2 || len(it.Messages) != 1 {
		t.Fatalf("fetch 2 = %q exec %d, %d events, %d messages", it.OrchestrationName, it.ExecutionID, len(it.History), len(it.Messages))
	}
	if _, ok := it.History[1].Kind.(*duroxide.ActivityScheduledEvent); !ok {
		t.Fatalf("history[1] = %T", it.History[1].Kind)
	}
	err = p.AckOrchestrationItem(ctx, it.LockToken, duroxide.OrchestrationAck{ExecutionID: 1,
		HistoryDelta: []duroxide.Event{ev("rt", 1, 3, &duroxide.ActivityCompletedEvent{Result: "out"}), ev("rt", 1, 4, &duroxide.OrchestrationCompletedEvent{Output: "out"})},
		Metadata:     duroxide.ExecutionMetadata{Status: sp(duroxide.StatusCompleted), Output: sp("out"), OrchestrationName: sp("Orch"), OrchestrationVersion: sp("1.0.0")}})
	if err != nil {
		t.Fatal(err)
	}
	expect("ack (completion)", 1)

	// a second ack of the same token: one statement, nothing written
	err = p.AckOrchestrationItem(ctx, it.LockToken, duroxide.OrchestrationAck{ExecutionID: 1,
		HistoryDelta: []duroxide.Event{ev("rt", 1, 5, &duroxide.OrchestrationCompletedEvent{Output: "again"})}})
	wantErr(t, err, agentstore.ErrInvalidLockToken)
	expect("second ack", 1)

	// an empty queue: one statement
	if it, err := p.FetchOrchestrationItem(ctx, testLock, 0, nil); err != nil || it != nil {
		t.Fatalf("fetch on empty queue: %v, %v", it, err)
	}
	expect("fetch (nothing to do)", 1)

	info, err := st.ProviderAdmin().GetInstanceInfo(ctx, "rt")
	if err != nil {
		t.Fatal(err)
	}
	if info.Status != duroxide.StatusCompleted || info.Output == nil || *info.Output != "out" {
		t.Fatalf("instance = %s %v", info.Status, info.Output)
	}
	evs, err := p.Read(ctx, "rt")
	if err != nil || len(evs) != 4 {
		t.Fatalf("history = %d events, %v; want 4", len(evs), err)
	}

	// A session append on the same Store: one autocommit statement (lock
	// and advance the session row, insert the message); was 4 round trips
	// (BEGIN, lock-and-advance, INSERT, COMMIT).
	sess := repo.NewSession()
	if err := st.Sessions().Save(ctx, sess); err != nil {
		t.Fatal(err)
	}
	counter.take()
	got, err := st.Sessions().AppendMessages(ctx, sess.ID, textMsg("rt-1", repo.RoleUser, "hi"))
	if err != nil || len(got) != 1 || got[0].Seq != 1 {
		t.Fatalf("append = %+v, %v", got, err)
	}
	expect("AppendMessages (1 message)", 1)
}

// testProviderConcurrentTurnsSeeLatestHistory races turns of a few
// instances across several Stores while events keep arriving: every turn
// appends one event per fetched message after the fetched history, so a
// fetch that returned history older than the last ack (the PostgreSQL
// fetch reads in the snapshot its statement started with, before it took
// the lock) would make the ack collide on event ids (ErrDuplicateEvent),
// and a lost or doubled message would show in the final history.
func testProviderConcurrentTurnsSeeLatestHistory(t *testing.T, h *harness) {
	const instances, events, stores, loopsPerStore = 4, 40, 3, 2
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	first := h.New(t)
	provs := []duroxide.Provider{first.Provider()}
	for range stores - 1 {
		provs = append(provs, h.Open(t).Provider())
	}
	for i := range instances {
		if err := first.Provider().EnqueueForOrchestrator(ctx, startItem(fmt.Sprintf("race%d", i), nil), 0); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	// producer: events interleaved over the instances
	wg.Add(1)
	go func() {
		defer wg.Done()
		for e := range events {
			for i := range instances {
				w := &duroxide.ExternalRaised{Instance: fmt.Sprintf("race%d", i), Name: "e", Data: fmt.Sprint(e)}
				if err := provs[e%stores].EnqueueForOrchestrator(ctx, w, 0); err != nil {
					errs <- err
					return
				}
			}
		}
	}()
	var mu sync.Mutex
	delivered := 0 // ExternalEventEvents acked
	loopCtx, stop := context.WithCancel(ctx)
	defer stop()
	for _, p := range provs {
		for range loopsPerStore {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for loopCtx.Err() == nil {
					it, err := p.FetchOrchestrationItem(loopCtx, testLock, 20*time.Millisecond, nil)
					if err != nil {
						if loopCtx.Err() == nil && !errors.Is(err, agentstore.ErrRetryable) {
							errs <- fmt.Errorf("fetch: %w", err)
						}
						continue
					}
					if it == nil {
						continue
					}
					next := uint64(len(it.History)) + 1
					if len(it.History) > 0 && it.History[len(it.History)-1].EventID != next-1 {
						errs <- fmt.Errorf("%s: history ends at id %d with %d events", it.Instance, it.History[len(it.History)-1].EventID, len(it.History))
					}
					var delta []duroxide.Event
					n := 0
					for _, m := range it.Messages {
						switch m := m.(type) {
						case *duroxide.StartOrchestration:
							delta = append(delta, startedEv(it.Instance, 1, next, nil))
						case *duroxide.ExternalRaised:
							delta = append(delta, ev(it.Instance, 1, next, &duroxide.ExternalEventEvent{Name: m.Name, Data: m.Data}))
							n++
						default:
							errs <- fmt.Errorf("unexpected message %T", m)
							continue
						}
						next++
					}
					err = p.AckOrchestrationItem(loopCtx, it.LockToken, duroxide.OrchestrationAck{ExecutionID: 1, HistoryDelta: delta, Metadata: runningMeta(nil)})
					switch {
					case err == nil:
						mu.Lock()
						delivered += n
						mu.Unlock()
					case loopCtx.Err() != nil:
					default:
						errs <- fmt.Errorf("ack %s (%d events from id %d): %w", it.Instance, len(delta), next-uint64(len(delta)), err)
					}
				}
			}()
		}
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		mu.Lock()
		d := delivered
		mu.Unlock()
		if d >= instances*events || time.Now().After(deadline) || len(errs) > 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i := range instances {
		inst := fmt.Sprintf("race%d", i)
		evs, err := first.Provider().Read(ctx, inst)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]int{}
		for j, e := range evs {
			if e.EventID != uint64(j+1) {
				t.Fatalf("%s: event %d has id %d", inst, j, e.EventID)
			}
			if x, ok := e.Kind.(*duroxide.ExternalEventEvent); ok {
				seen[x.Data]++
			}
		}
		for e := range events {
			if seen[fmt.Sprint(e)] != 1 {
				t.Errorf("%s: event %d delivered %d times, want once", inst, e, seen[fmt.Sprint(e)])
			}
		}
	}
}

// testProviderWakeAcrossStores: a fetcher waiting on one Store is woken by
// an enqueue through ANOTHER Store on the same database. The fallback
// re-check is set to 3 s, so a return well before that proves the wake-up
// crossed Stores: on PostgreSQL through LISTEN/NOTIFY. SQLite has no
// cross-process channel: there the fetch is served by the fallback re-check,
// which the test checks with a short interval instead. Without CapWakeup the
// fetch must return within the fallback re-check (and a second).
func testProviderWakeAcrossStores(t *testing.T, h *harness) {
	ctx := context.Background()
	// A fallback re-check far above the limit below: only the
	// cross-Store wake-up (LISTEN/NOTIFY on PostgreSQL, the
	// data_version watcher on SQLite) can make the fetch return in time.
	fallback := 3 * time.Second
	waiter := h.New(t, withPollInterval(fallback))
	other := h.Open(t)
	for _, kind := range []string{"orchestration", "work"} {
		// Warm up: the first long poll starts the listener; give it
		// time to LISTEN before measuring.
		if kind == "orchestration" {
			if it, err := waiter.Provider().FetchOrchestrationItem(ctx, time.Minute, 200*time.Millisecond, nil); err != nil || it != nil {
				t.Fatalf("warm-up fetch: %v %v", it, err)
			}
		}
		type res struct {
			ok  bool
			err error
			d   time.Duration
		}
		done := make(chan res, 1)
		var enqueued time.Time
		go func() {
			var ok bool
			var err error
			if kind == "orchestration" {
				var it *duroxide.OrchestrationItem
				it, err = waiter.Provider().FetchOrchestrationItem(ctx, time.Minute, 20*time.Second, nil)
				ok = it != nil
			} else {
				var l *duroxide.WorkItemLease
				l, err = waiter.Provider().FetchWorkItem(ctx, time.Minute, 20*time.Second, nil, duroxide.TagFilter{})
				ok = l != nil
			}
			done <- res{ok, err, time.Since(enqueued)}
		}()
		time.Sleep(300 * time.Millisecond) // real waiting is the point: the fetcher must be idle
		enqueued = time.Now()
		var err error
		if kind == "orchestration" {
			err = other.Provider().EnqueueForOrchestrator(ctx, startItem("wake-"+kind, nil), 0)
		} else {
			err = other.Provider().EnqueueForWorker(ctx, activity("wake-"+kind, 1, 7))
		}
		if err != nil {
			t.Fatal(err)
		}
		r := <-done
		if r.err != nil || !r.ok {
			t.Fatalf("%s fetch after enqueue on another Store: ok=%v err=%v", kind, r.ok, r.err)
		}
		// far below the 3 s fallback; without CapWakeup (a PostgreSQL-wire
		// engine without LISTEN/NOTIFY) the fallback itself is the bound
		limit := wakeLimit(waiter, fallback)
		t.Logf("%s: woken %v after another Store's enqueue (fallback %v)", kind, r.d, fallback)
		if r.d > limit {
			t.Fatalf("%s: fetch returned %v after another Store's enqueue; want < %v (fallback %v)", kind, r.d, limit, fallback)
		}
	}
	// Close stops the listener and publisher; a closed store's fetch fails.
	if err := waiter.Close(); err != nil {
		t.Fatal(err)
	}
	_, err := waiter.Provider().FetchWorkItem(ctx, time.Minute, 0, nil, duroxide.TagFilter{})
	if err == nil {
		t.Fatal("fetch on a closed store succeeded")
	}
}
