package agentstoretest

import (
	"encoding/json"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// The provider obligations duroxide's contract gained after core 0.1.29
// (see the duroxide-pg 0024 migration and core's race_replay validation):
// the new parent-link wire fields, history returned exactly as acked,
// delayed ContinueAsNew successors, counted abandons, completed_at.

func init() {
	register("Orchestration",
		test{"ProviderParentLinkSurvivesEveryPath", testProviderParentLinkSurvivesEveryPath},
		test{"ProviderRootItemsStoredAsIn0129", testProviderRootItemsStoredAsIn0129},
		test{"ProviderHistoryExactlyAsAckedByANewerRuntime", testProviderHistoryExactlyAsAcked},
		test{"ProviderContinueAsNewSuccessorDelayAndCountedAbandons", testProviderContinueAsNewSuccessorDelayAndCountedAbandons},
		test{"ProviderContinueAsNewSuccessorVisibleWithInputsInOneAck", testProviderContinueAsNewSuccessorVisibleWithInputsInOneAck},
	)
	register("WorkerQueue",
		test{"ProviderWorkerCountedAbandonsReachMaxAttempts", testProviderWorkerCountedAbandonsReachMaxAttempts},
	)
}

// storedWorkItems returns the stored work_item texts of instance's
// orchestrator-queue messages in id order.
func (e *pEnv) storedWorkItems(t *testing.T, instance string) []string {
	t.Helper()
	var out []string
	if err := e.st.DB(e.ctx).Raw(`SELECT work_item FROM `+e.st.Table(models.TableOrchestratorQueue)+` WHERE instance_id = ? ORDER BY id`,
		instance).Scan(&out).Error; err != nil {
		t.Fatalf("stored work items of %s: %v", instance, err)
	}
	return out
}

// storedEvents returns the stored event_data texts of one execution in
// event id order.
func (e *pEnv) storedEvents(t *testing.T, instance string, exec uint64) []string {
	t.Helper()
	var out []string
	if err := e.st.DB(e.ctx).Raw(`SELECT event_data FROM `+e.st.Table(models.TableHistory)+` WHERE instance_id = ? AND execution_id = ? ORDER BY event_id`,
		instance, int64(exec)).Scan(&out).Error; err != nil {
		t.Fatalf("stored events of %s/%d: %v", instance, exec, err)
	}
	return out
}

// mustJSON returns the JSON of v.
func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// wantEvents fails unless got equals want field for field (every common
// field, the kind and all its fields).
func wantEvents(t *testing.T, what string, got, want []duroxide.Event) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\n got %s\nwant %s", what, mustJSON(t, got), mustJSON(t, want))
	}
}

// readsOfExecution checks that every read of one execution's history
// returns want: ReadWithExecution, ProviderAdmin.ReadHistoryWithExecutionID
// and ProviderAdminExt.ReadHistoryPage at several page sizes; for the
// current execution (latest) also Read and ProviderAdmin.ReadHistory.
func (e *pEnv) readsOfExecution(t *testing.T, instance string, exec uint64, latest bool, want []duroxide.Event) {
	t.Helper()
	got, err := e.p.ReadWithExecution(e.ctx, instance, exec)
	if err != nil {
		t.Fatal(err)
	}
	wantEvents(t, "ReadWithExecution", got, want)
	if got, err = e.a.ReadHistoryWithExecutionID(e.ctx, instance, exec); err != nil {
		t.Fatal(err)
	}
	wantEvents(t, "ReadHistoryWithExecutionID", got, want)
	x := e.st.ProviderAdminExt()
	for _, limit := range []int{1, 2, 100} {
		got = walkPages(t, limit, func(p repo.PageParams) ([]duroxide.Event, string, error) {
			return x.ReadHistoryPage(e.ctx, instance, exec, p)
		})
		wantEvents(t, "ReadHistoryPage", got, want)
	}
	if !latest {
		return
	}
	if got, err = e.p.Read(e.ctx, instance); err != nil {
		t.Fatal(err)
	}
	wantEvents(t, "Read", got, want)
	if got, err = e.a.ReadHistory(e.ctx, instance); err != nil {
		t.Fatal(err)
	}
	wantEvents(t, "ReadHistory", got, want)
}

func up(v uint64) *uint64 { return &v }

// testProviderParentLinkSurvivesEveryPath: the parent link of a
// sub-orchestration (parent_execution_id on its StartOrchestration and
// OrchestrationStarted; parent_instance, parent_id and parent_execution_id
// on its ContinueAsNew) is stored exactly as encoded and comes back
// unchanged from every path: enqueue through an ack and through
// EnqueueForOrchestrator, fetch, history reads (fetch, Read,
// ReadWithExecution, the admin reads), across ContinueAsNew. The instance's
// parent (GetInstanceInfo, GetParentID, ListChildren) survives an
// execution whose ack names no parent, and the child's completion reaches
// the parent with the parent's execution.
func testProviderParentLinkSurvivesEveryPath(t *testing.T, h *harness) {
	e := newPEnv(t, h)
	const child = "p::sub::2"
	e.startInstance(t, "p", nil)
	e.enqueue(t, &duroxide.ExternalRaised{Instance: "p", Name: "go", Data: "x"})
	it := e.fetch(t)
	start := &duroxide.StartOrchestration{Instance: child, Orchestration: "Child", Input: "ci", Version: sp("1.0.0"),
		ParentInstance: sp("p"), ParentID: up(2), ParentExecutionID: up(1), ExecutionID: 1}
	e.ack(t, it, duroxide.OrchestrationAck{HistoryDelta: []duroxide.Event{ev("p", 1, 2, &duroxide.SubOrchestrationScheduledEvent{Name: "Child", Instance: child, Input: "ci"})},
		OrchestratorItems: []duroxide.WorkItem{start}})
	if got := e.storedWorkItems(t, child); !slices.Equal(got, []string{mustJSON(t, start)}) {
		t.Fatalf("stored start = %q, want %q", got, mustJSON(t, start))
	}
	cit := e.fetch(t)
	if cit.Instance != child || len(cit.Messages) != 1 || !reflect.DeepEqual(cit.Messages[0], duroxide.WorkItem(start)) {
		t.Fatalf("fetched %s %s, want the start %s", cit.Instance, mustJSON(t, cit.Messages), mustJSON(t, start))
	}

	// execution 1 records the link and continues as new with it
	link := func(exec uint64, cf [][2]string) duroxide.Event {
		return duroxide.Event{EventID: 1, InstanceID: child, ExecutionID: exec, TimestampMS: 1760000000000 + exec, DuroxideVersion: "0.1.31",
			Kind: &duroxide.OrchestrationStartedEvent{Name: "Child", Version: "1.0.0", Input: "ci", ParentInstance: sp("p"), ParentID: up(2),
				ParentExecutionID: up(1), CarryForwardEvents: cf}}
	}
	hist1 := []duroxide.Event{link(1, nil), ev(child, 1, 2, &duroxide.OrchestrationContinuedAsNewEvent{Input: "n2"})}
	can := &duroxide.ContinueAsNew{Instance: child, Orchestration: "Child", Input: "n2", Version: sp("1.0.0"), ParentInstance: sp("p"),
		ParentID: up(2), ParentExecutionID: up(1), CarryForwardEvents: [][2]string{{"evt", "x"}}}
	e.ack(t, cit, duroxide.OrchestrationAck{ExecutionID: 1, HistoryDelta: hist1, OrchestratorItems: []duroxide.WorkItem{can},
		Metadata: duroxide.ExecutionMetadata{Status: sp(duroxide.StatusContinuedAsNew), Output: sp("n2"), OrchestrationName: sp("Child"),
			OrchestrationVersion: sp("1.0.0"), ParentInstanceID: sp("p")}})
	if got := e.storedWorkItems(t, child); !slices.Equal(got, []string{mustJSON(t, can)}) {
		t.Fatalf("stored ContinueAsNew = %q, want %q", got, mustJSON(t, can))
	}
	if got := e.storedEvents(t, child, 1); len(got) != 2 || got[0] != mustJSON(t, hist1[0]) {
		t.Fatalf("stored execution 1 = %q", got)
	}
	cit = e.fetch(t)
	if cit.ExecutionID != 1 || len(cit.Messages) != 1 || !reflect.DeepEqual(cit.Messages[0], duroxide.WorkItem(can)) {
		t.Fatalf("fetched exec %d %s, want the ContinueAsNew %s", cit.ExecutionID, mustJSON(t, cit.Messages), mustJSON(t, can))
	}
	wantEvents(t, "history of the ContinueAsNew fetch", cit.History, hist1)

	// execution 2: the link from the ContinueAsNew; this ack's metadata
	// names no parent (the instance keeps its own)
	hist2 := []duroxide.Event{link(2, can.CarryForwardEvents)}
	e.ack(t, cit, duroxide.OrchestrationAck{ExecutionID: 2, HistoryDelta: hist2,
		Metadata: duroxide.ExecutionMetadata{Status: sp(duroxide.StatusRunning), OrchestrationName: sp("Child"), OrchestrationVersion: sp("1.0.0")}})
	e.readsOfExecution(t, child, 1, false, hist1)
	e.readsOfExecution(t, child, 2, true, hist2)
	if info, err := e.a.GetInstanceInfo(e.ctx, child); err != nil || info.ParentInstanceID == nil || *info.ParentInstanceID != "p" || info.CurrentExecutionID != 2 {
		t.Fatalf("child info after ContinueAsNew = %+v, %v", info, err)
	}
	if parent, err := e.a.GetParentID(e.ctx, child); err != nil || parent != "p" {
		t.Fatalf("parent of the child = %q, %v", parent, err)
	}
	if kids, err := e.a.ListChildren(e.ctx, "p"); err != nil || !slices.Equal(kids, []string{child}) {
		t.Fatalf("children of p = %v, %v", kids, err)
	}

	// execution 2 completes and reports to the parent execution that
	// scheduled it
	e.enqueue(t, &duroxide.ExternalRaised{Instance: child, Name: "finish"})
	cit = e.fetch(t)
	wantEvents(t, "history of execution 2's fetch", cit.History, hist2)
	done := &duroxide.SubOrchCompleted{ParentInstance: "p", ParentExecutionID: *can.ParentExecutionID, ParentID: *can.ParentID, Result: "r"}
	e.ack(t, cit, duroxide.OrchestrationAck{ExecutionID: 2, HistoryDelta: []duroxide.Event{ev(child, 2, 2, &duroxide.OrchestrationCompletedEvent{Output: "r"})},
		OrchestratorItems: []duroxide.WorkItem{done}, Metadata: duroxide.ExecutionMetadata{Status: sp(duroxide.StatusCompleted), Output: sp("r")}})
	pit := e.fetch(t)
	if pit.Instance != "p" || pit.ExecutionID != 1 || len(pit.Messages) != 1 || !reflect.DeepEqual(pit.Messages[0], duroxide.WorkItem(done)) {
		t.Fatalf("parent fetched %s exec %d %s", pit.Instance, pit.ExecutionID, mustJSON(t, pit.Messages))
	}
	for exec, st := range map[uint64]string{1: duroxide.StatusContinuedAsNew, 2: duroxide.StatusCompleted} {
		if info, err := e.a.GetExecutionInfo(e.ctx, child, exec); err != nil || info.Status != st || info.CompletedAt == nil {
			t.Fatalf("child execution %d = %+v, %v; want %s with completed_at", exec, info, err, st)
		}
	}

	// EnqueueForOrchestrator keeps the fields too
	direct := &duroxide.StartOrchestration{Instance: "p::sub::9", Orchestration: "Child", Input: "d", ParentInstance: sp("p"), ParentID: up(9),
		ParentExecutionID: up(1), ExecutionID: 1}
	e.enqueue(t, direct)
	if got := e.storedWorkItems(t, direct.Instance); !slices.Equal(got, []string{mustJSON(t, direct)}) {
		t.Fatalf("stored direct start = %q", got)
	}
	if err := e.p.AbandonOrchestrationItem(e.ctx, pit.LockToken, 0, true); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		got := e.fetch(t)
		if got.Instance == direct.Instance && !reflect.DeepEqual(got.Messages, []duroxide.WorkItem{direct}) {
			t.Fatalf("fetched direct start %s", mustJSON(t, got.Messages))
		}
	}
}

// testProviderRootItemsStoredAsIn0129: a top-level StartOrchestration, a
// root ContinueAsNew and an OrchestrationStarted without parent are stored
// byte for byte as duroxide 0.1.29 encodes them (none of the new keys),
// through EnqueueForOrchestrator, an ack's orchestrator items and an ack's
// history.
func testProviderRootItemsStoredAsIn0129(t *testing.T, h *harness) {
	e := newPEnv(t, h)
	e.enqueue(t, &duroxide.StartOrchestration{Instance: "r1", Orchestration: "O", Input: "{}", Version: sp("1.0.0"), ExecutionID: 1})
	const start0129 = `{"StartOrchestration":{"instance":"r1","orchestration":"O","input":"{}","version":"1.0.0","parent_instance":null,"parent_id":null,"execution_id":1}}`
	if got := e.storedWorkItems(t, "r1"); !slices.Equal(got, []string{start0129}) {
		t.Fatalf("stored start = %q, want %q", got, start0129)
	}
	it := e.fetch(t)
	started := duroxide.Event{EventID: 1, InstanceID: "r1", ExecutionID: 1, TimestampMS: 1760000000000, DuroxideVersion: "0.1.29",
		Kind: &duroxide.OrchestrationStartedEvent{Name: "O", Version: "1.0.0", Input: "{}"}}
	e.ack(t, it, duroxide.OrchestrationAck{HistoryDelta: []duroxide.Event{started, ev("r1", 1, 2, &duroxide.OrchestrationContinuedAsNewEvent{Input: "n"})},
		OrchestratorItems: []duroxide.WorkItem{&duroxide.ContinueAsNew{Instance: "r1", Orchestration: "O", Input: "n", Version: sp("1.0.0"),
			CarryForwardEvents: [][2]string{{"Evt", "payload"}}}},
		Metadata: duroxide.ExecutionMetadata{Status: sp(duroxide.StatusContinuedAsNew), Output: sp("n"), OrchestrationName: sp("O"), OrchestrationVersion: sp("1.0.0")}})
	const started0129 = `{"event_id":1,"source_event_id":null,"instance_id":"r1","execution_id":1,"timestamp_ms":1760000000000,"duroxide_version":"0.1.29",` +
		`"type":"OrchestrationStarted","name":"O","version":"1.0.0","input":"{}","parent_instance":null,"parent_id":null}`
	if got := e.storedEvents(t, "r1", 1); len(got) != 2 || got[0] != started0129 {
		t.Fatalf("stored started event = %q, want %q", got, started0129)
	}
	const can0129 = `{"ContinueAsNew":{"instance":"r1","orchestration":"O","input":"n","version":"1.0.0","carry_forward_events":[["Evt","payload"]]}}`
	if got := e.storedWorkItems(t, "r1"); !slices.Equal(got, []string{can0129}) {
		t.Fatalf("stored ContinueAsNew = %q, want %q", got, can0129)
	}
}

// newerRuntimeEvents returns one event of every kind for instance/exec as
// a newer runtime writes them: stamped with versions after 0.1.29,
// completions carrying their source event ids, every optional field set
// somewhere, text with escapes and non-ASCII.
func newerRuntimeEvents(instance string, exec uint64) []duroxide.Event {
	kinds := []duroxide.EventKind{
		&duroxide.OrchestrationStartedEvent{Name: "Orch", Version: "2.1.0", Input: `{"a":"é\n\"q\""}`, ParentInstance: sp("root"), ParentID: up(5),
			ParentExecutionID: up(3), CarryForwardEvents: [][2]string{{"q", "1"}, {"q", "2"}}, InitialCustomStatus: sp("warm")},
		&duroxide.ActivityScheduledEvent{Name: "act", Input: "in", SessionID: sp("s1"), Tag: sp("gpu")},
		&duroxide.ActivityCompletedEvent{Result: "✓"},
		&duroxide.ActivityScheduledEvent{Name: "act2", Input: ""},
		&duroxide.ActivityFailedEvent{Details: duroxide.ErrorDetails{Application: &duroxide.ApplicationError{
			Kind: duroxide.AppErrorKind{CancelledReason: sp("stop")}, Message: "m", Retryable: true}}},
		&duroxide.ActivityCancelRequestedEvent{Reason: "select loser"},
		&duroxide.TimerCreatedEvent{FireAtMS: 1893456000000},
		&duroxide.TimerFiredEvent{FireAtMS: 1893456000000},
		&duroxide.ExternalSubscribedEvent{Name: "ev"},
		&duroxide.ExternalEventEvent{Name: "ev", Data: "\u0000\u2028"},
		&duroxide.OrchestrationChainedEvent{Name: "n", Instance: "c", Input: "i"},
		&duroxide.SubOrchestrationScheduledEvent{Name: "Child", Instance: instance + "::sub::12", Input: "ci"},
		&duroxide.SubOrchestrationCompletedEvent{Result: "r"},
		&duroxide.SubOrchestrationFailedEvent{Details: duroxide.ErrorDetails{Configuration: &duroxide.ConfigurationError{Kind: "Nondeterminism", Resource: "act"}}},
		&duroxide.SubOrchestrationCancelRequestedEvent{Reason: "r"},
		&duroxide.OrchestrationCancelRequestedEvent{Reason: "bye"},
		&duroxide.ExternalSubscribedCancelledEvent{Reason: "r"},
		&duroxide.QueueSubscribedEvent{Name: "q"},
		&duroxide.QueueEventDeliveredEvent{Name: "q", Data: "d"},
		&duroxide.QueueSubscriptionCancelledEvent{Reason: "r"},
		&duroxide.CustomStatusUpdatedEvent{Status: sp("hot")},
		&duroxide.CustomStatusUpdatedEvent{},
		&duroxide.KeyValueSetEvent{Key: "k", Value: "v", LastUpdatedAtMS: 1760000000123},
		&duroxide.KeyValueClearedEvent{Key: "k"},
		&duroxide.KeyValuesClearedEvent{},
		&duroxide.OrchestrationFailedEvent{Details: duroxide.ErrorDetails{Poison: &duroxide.PoisonError{AttemptCount: 11, MaxAttempts: 10,
			MessageType: duroxide.PoisonMessageType{Activity: &duroxide.PoisonActivity{Instance: instance, ExecutionID: exec, ActivityName: "act", ActivityID: 2}},
			Message:     "poisoned"}}},
	}
	versions := []string{"0.1.30", "0.1.31", "0.2.0-rc.1+build.7"}
	sources := map[int]uint64{2: 2, 4: 4, 5: 2, 7: 7, 9: 9, 12: 12, 13: 12, 14: 12}
	out := make([]duroxide.Event, len(kinds))
	for i, k := range kinds {
		out[i] = duroxide.Event{EventID: uint64(i + 1), InstanceID: instance, ExecutionID: exec, TimestampMS: 1760000000000 + uint64(i)*7,
			DuroxideVersion: versions[i%len(versions)], Kind: k}
		if s, ok := sources[i]; ok {
			out[i].SourceEventID = up(s)
		}
	}
	return out
}

// testProviderHistoryExactlyAsAcked: events a newer runtime stamped (its
// duroxide_version, source event ids, every optional field) are stored as
// acked and returned equal by the next fetch, Read, ReadWithExecution and
// the admin reads; a fetch never rewrites them (fetching and abandoning
// leaves the stored text as it was), and AppendWithExecution stores its
// events the same way.
func testProviderHistoryExactlyAsAcked(t *testing.T, h *harness) {
	e := newPEnv(t, h)
	all := newerRuntimeEvents("i1", 1)
	e.enqueue(t, startItem("i1", nil))
	it := e.fetch(t)
	e.ack(t, it, duroxide.OrchestrationAck{HistoryDelta: all[:10], Metadata: duroxide.ExecutionMetadata{Status: sp(duroxide.StatusRunning),
		OrchestrationName: sp("Orch"), OrchestrationVersion: sp("2.1.0")}})
	e.enqueue(t, &duroxide.ExternalRaised{Instance: "i1", Name: "ev"})
	it = e.fetch(t)
	wantEvents(t, "history of the second fetch", it.History, all[:10])
	e.ack(t, it, duroxide.OrchestrationAck{HistoryDelta: all[10:20]})
	if err := e.p.AppendWithExecution(e.ctx, "i1", 1, all[20:]); err != nil {
		t.Fatal(err)
	}
	stored := e.storedEvents(t, "i1", 1)
	if len(stored) != len(all) {
		t.Fatalf("stored %d events, want %d", len(stored), len(all))
	}
	for i, s := range stored {
		if want := mustJSON(t, all[i]); s != want {
			t.Fatalf("stored event %d:\n got %s\nwant %s", i+1, s, want)
		}
	}
	e.readsOfExecution(t, "i1", 1, true, all)
	e.enqueue(t, &duroxide.ExternalRaised{Instance: "i1", Name: "again"})
	it = e.fetch(t)
	wantEvents(t, "history of the third fetch", it.History, all)
	if err := e.p.AbandonOrchestrationItem(e.ctx, it.LockToken, 0, true); err != nil {
		t.Fatal(err)
	}
	if again := e.storedEvents(t, "i1", 1); !slices.Equal(again, stored) {
		t.Fatal("a fetch rewrote the stored history")
	}
}

// testProviderContinueAsNewSuccessorDelayAndCountedAbandons: a
// ContinueAsNew successor enqueued with a delay stays invisible until it
// is due, even while inputs of the instance are fetched; the runtime
// defers those inputs with counted abandons (abandon with a delay and
// ignore_attempt false): each one counts an attempt and hides the batch
// for its delay, and at max attempts the ack of the poisoning turn
// succeeds with the lease of the last fetch. The execution that continued
// as new has completed_at; the successor's (Running) has none.
func testProviderContinueAsNewSuccessorDelayAndCountedAbandons(t *testing.T, h *harness) {
	e := newPEnv(t, h)
	e.startInstance(t, "i1", nil)
	e.enqueue(t, &duroxide.ExternalRaised{Instance: "i1", Name: "go"})
	it := e.fetch(t)
	e.clock.Advance(time.Second)
	canAt := e.clock.Now()
	e.ack(t, it, duroxide.OrchestrationAck{HistoryDelta: []duroxide.Event{ev("i1", 1, 2, &duroxide.OrchestrationContinuedAsNewEvent{Input: "n"})},
		Metadata: duroxide.ExecutionMetadata{Status: sp(duroxide.StatusContinuedAsNew), Output: sp("n")}})
	can := &duroxide.ContinueAsNew{Instance: "i1", Orchestration: "Orch", Input: "n", Version: sp("1.0.0"), CarryForwardEvents: [][2]string{}}
	if err := e.p.EnqueueForOrchestrator(e.ctx, can, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	e.enqueue(t, &duroxide.ExternalRaised{Instance: "i1", Name: "input", Data: "x"})
	const maxAttempts = 3
	for k := 1; ; k++ {
		it = e.fetch(t)
		if len(it.Messages) != 1 || it.ExecutionID != 1 || int(it.AttemptCount) != k {
			t.Fatalf("attempt %d: fetched exec %d attempt %d %s, want the input alone", k, it.ExecutionID, it.AttemptCount, mustJSON(t, it.Messages))
		}
		if _, ok := it.Messages[0].(*duroxide.ExternalRaised); !ok {
			t.Fatalf("attempt %d: fetched %s, want the input (the successor is not due)", k, mustJSON(t, it.Messages))
		}
		if k > maxAttempts {
			break
		}
		delay := time.Duration(k) * 100 * time.Millisecond
		if err := e.p.AbandonOrchestrationItem(e.ctx, it.LockToken, delay, false); err != nil {
			t.Fatalf("counted abandon %d: %v", k, err)
		}
		e.clock.Advance(delay - time.Millisecond)
		e.fetchNone(t)
		e.clock.Advance(time.Millisecond)
	}
	// the runtime poisons the deferred input: the ack with the last lease succeeds
	e.ack(t, it, duroxide.OrchestrationAck{ExecutionID: 1})
	if info, err := e.a.GetExecutionInfo(e.ctx, "i1", 1); err != nil || info.Status != duroxide.StatusContinuedAsNew || info.CompletedAt == nil ||
		!info.CompletedAt.Equal(canAt.Truncate(time.Millisecond)) {
		t.Fatalf("execution 1 = %+v, %v; want ContinuedAsNew completed at %v", info, err, canAt)
	}
	// the successor appears exactly when due
	due := canAt.Add(2 * time.Second)
	e.clock.Advance(due.Sub(e.clock.Now()) - time.Millisecond)
	e.fetchNone(t)
	e.clock.Advance(time.Millisecond)
	it = e.fetch(t)
	if len(it.Messages) != 1 || !reflect.DeepEqual(it.Messages[0], duroxide.WorkItem(can)) || it.AttemptCount != 1 {
		t.Fatalf("successor fetch: attempt %d %s", it.AttemptCount, mustJSON(t, it.Messages))
	}
	e.ack(t, it, duroxide.OrchestrationAck{ExecutionID: 2, HistoryDelta: []duroxide.Event{startedEv("i1", 2, 1, nil)}, Metadata: runningMeta(nil)})
	if info, err := e.a.GetExecutionInfo(e.ctx, "i1", 2); err != nil || info.Status != duroxide.StatusRunning || info.CompletedAt != nil {
		t.Fatalf("execution 2 = %+v, %v; want Running without completed_at", info, err)
	}
}

// testProviderContinueAsNewSuccessorVisibleWithInputsInOneAck: one ack
// may end an execution as ContinuedAsNew and enqueue the successor's
// ContinueAsNew (no delay) and further inputs of the instance: the next
// fetch returns them all, in order, on the old execution's history.
func testProviderContinueAsNewSuccessorVisibleWithInputsInOneAck(t *testing.T, h *harness) {
	e := newPEnv(t, h)
	e.startInstance(t, "i1", nil)
	e.enqueue(t, &duroxide.ExternalRaised{Instance: "i1", Name: "go"})
	it := e.fetch(t)
	items := []duroxide.WorkItem{
		&duroxide.ContinueAsNew{Instance: "i1", Orchestration: "Orch", Input: "n", Version: sp("1.0.0"), CarryForwardEvents: [][2]string{{"q", "1"}}},
		&duroxide.QueueMessage{Instance: "i1", Name: "q", Data: "2"},
		&duroxide.ExternalRaised{Instance: "i1", Name: "late", Data: "3"},
	}
	e.ack(t, it, duroxide.OrchestrationAck{HistoryDelta: []duroxide.Event{ev("i1", 1, 2, &duroxide.OrchestrationContinuedAsNewEvent{Input: "n"})},
		OrchestratorItems: items, Metadata: duroxide.ExecutionMetadata{Status: sp(duroxide.StatusContinuedAsNew), Output: sp("n")}})
	it = e.fetch(t)
	if it.ExecutionID != 1 || len(it.History) != 2 || !reflect.DeepEqual(it.Messages, items) {
		t.Fatalf("fetch after the ContinueAsNew ack: exec %d, %d events, %s", it.ExecutionID, len(it.History), mustJSON(t, it.Messages))
	}
}

// testProviderWorkerCountedAbandonsReachMaxAttempts: worker abandons with
// a delay and ignore_attempt false count an attempt each and hide the
// item for their delay; at max attempts the runtime's poison ack (an
// ActivityFailed with Poison details) succeeds with the last lease.
func testProviderWorkerCountedAbandonsReachMaxAttempts(t *testing.T, h *harness) {
	e := newPEnv(t, h)
	if err := e.p.EnqueueForWorker(e.ctx, activity("i1", 1, 2)); err != nil {
		t.Fatal(err)
	}
	const maxAttempts = 3
	var l *duroxide.WorkItemLease
	for k := 1; ; k++ {
		if l = e.wfetch(t, nil, testLock, nil, duroxide.TagFilter{}); l == nil || int(l.AttemptCount) != k {
			t.Fatalf("attempt %d: fetched %+v", k, l)
		}
		if k > maxAttempts {
			break
		}
		delay := time.Duration(k) * 100 * time.Millisecond
		if err := e.p.AbandonWorkItem(e.ctx, l.LockToken, delay, false); err != nil {
			t.Fatalf("counted abandon %d: %v", k, err)
		}
		e.clock.Advance(delay - time.Millisecond)
		if got := e.wfetch(t, nil, testLock, nil, duroxide.TagFilter{}); got != nil {
			t.Fatalf("attempt %d: fetched before the abandon's delay ended", k)
		}
		e.clock.Advance(time.Millisecond)
	}
	poison := &duroxide.ActivityFailed{Instance: "i1", ExecutionID: 1, ID: 2, Details: duroxide.ErrorDetails{Poison: &duroxide.PoisonError{
		AttemptCount: maxAttempts + 1, MaxAttempts: maxAttempts,
		MessageType: duroxide.PoisonMessageType{Activity: &duroxide.PoisonActivity{Instance: "i1", ExecutionID: 1, ActivityName: "act", ActivityID: 2}},
		Message:     "poisoned"}}}
	if err := e.p.AckWorkItem(e.ctx, l.LockToken, poison); err != nil {
		t.Fatalf("poison ack: %v", err)
	}
	if got := e.storedWorkItems(t, "i1"); !slices.Equal(got, []string{mustJSON(t, poison)}) {
		t.Fatalf("orchestrator queue = %q, want the poison completion", got)
	}
	if n := e.count(t, models.TableWorkerQueue); n != 0 {
		t.Fatalf("worker queue holds %d items after the poison ack", n)
	}
	wantErr(t, e.p.AbandonWorkItem(e.ctx, l.LockToken, time.Second, false), agentstore.ErrInvalidLockToken)
}
