package agentstoretest

import (
	"slices"
	"testing"
	"time"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// adminTests are the Admin area's tests of this file.
func adminTests() []test {
	return tests(
		test{"ProviderAdminQueries", testProviderAdminQueries},
		test{"ProviderAdminDelete", testProviderAdminDelete},
		test{"ProviderAdminDeleteBulk", testProviderAdminDeleteBulk},
		test{"ProviderAdminPrune", testProviderAdminPrune},
	)
}

// testProviderAdminQueries checks the admin read API over a small tree of instances: ListInstances (empty list, newest first), ListInstancesByStatus, GetInstanceInfo (status, output, name, version, execution, parent, timestamps), ErrNotFound for unknown instances and executions, GetSystemMetrics, GetQueueDepths (a locked message is not counted), ListChildren, GetParentID and GetInstanceTree.
func testProviderAdminQueries(t *testing.T, h *harness) {
	e := newPEnv(t, h)
	if ids, err := e.a.ListInstances(e.ctx); err != nil || ids == nil || len(ids) != 0 {
		t.Fatalf("empty list = %v, %v", ids, err)
	}
	e.startInstance(t, "root", nil)
	e.clock.Advance(time.Second)
	e.startInstance(t, "kid1", sp("root"))
	e.clock.Advance(time.Second)
	e.startInstance(t, "kid2", sp("root"))
	e.clock.Advance(time.Second)
	e.startInstance(t, "grandkid", sp("kid1"))
	e.clock.Advance(time.Second)
	e.finishInstance(t, "kid2", duroxide.StatusCompleted, 2)
	e.finishInstance(t, "grandkid", duroxide.StatusFailed, 2)

	ids, err := e.a.ListInstances(e.ctx)
	if err != nil || !slices.Equal(ids, []string{"grandkid", "kid2", "kid1", "root"}) {
		t.Fatalf("list = %v, %v", ids, err)
	}
	if ids, _ := e.a.ListInstancesByStatus(e.ctx, duroxide.StatusRunning); !slices.Equal(ids, []string{"kid1", "root"}) {
		t.Fatalf("running = %v", ids)
	}
	if ids, _ := e.a.ListInstancesByStatus(e.ctx, duroxide.StatusCompleted); !slices.Equal(ids, []string{"kid2"}) {
		t.Fatalf("completed = %v", ids)
	}
	info, err := e.a.GetInstanceInfo(e.ctx, "kid2")
	if err != nil || info.Status != duroxide.StatusCompleted || info.Output == nil || *info.Output != "done" || info.OrchestrationName != "Orch" ||
		info.OrchestrationVersion != "1.0.0" || info.CurrentExecutionID != 1 || info.ParentInstanceID == nil || *info.ParentInstanceID != "root" ||
		!info.UpdatedAt.After(info.CreatedAt) {
		t.Fatalf("info = %+v, %v", info, err)
	}
	_, err = e.a.GetInstanceInfo(e.ctx, "nope")
	wantErr(t, err, agentstore.ErrNotFound)
	_, err = e.a.GetExecutionInfo(e.ctx, "root", 7)
	wantErr(t, err, agentstore.ErrNotFound)
	_, err = e.a.LatestExecutionID(e.ctx, "nope")
	wantErr(t, err, agentstore.ErrNotFound)
	if ids, err := e.a.ListExecutions(e.ctx, "nope"); err != nil || len(ids) != 0 {
		t.Fatalf("executions of unknown = %v %v", ids, err)
	}

	m, err := e.a.GetSystemMetrics(e.ctx)
	want := duroxide.SystemMetrics{TotalInstances: 4, TotalExecutions: 4, RunningInstances: 2, CompletedInstances: 1, FailedInstances: 1, TotalEvents: 6}
	if err != nil || *m != want {
		t.Fatalf("metrics = %+v, %v", m, err)
	}
	e.enqueue(t, &duroxide.ExternalRaised{Instance: "root", Name: "x"})
	e.enqueue(t, &duroxide.ExternalRaised{Instance: "kid1", Name: "x"})
	if err := e.p.EnqueueForWorker(e.ctx, activity("root", 1, 5)); err != nil {
		t.Fatal(err)
	}
	it := e.fetch(t) // locks root's message
	d, err := e.a.GetQueueDepths(e.ctx)
	if err != nil || *d != (duroxide.QueueDepths{OrchestratorQueue: 1, WorkerQueue: 1}) {
		t.Fatalf("depths = %+v, %v", d, err)
	}
	_ = it

	if kids, _ := e.a.ListChildren(e.ctx, "root"); !slices.Equal(kids, []string{"kid1", "kid2"}) {
		t.Fatalf("children = %v", kids)
	}
	if p, err := e.a.GetParentID(e.ctx, "grandkid"); err != nil || p != "kid1" {
		t.Fatalf("parent = %q %v", p, err)
	}
	if p, err := e.a.GetParentID(e.ctx, "root"); err != nil || p != "" {
		t.Fatalf("root parent = %q %v", p, err)
	}
	_, err = e.a.GetParentID(e.ctx, "nope")
	wantErr(t, err, agentstore.ErrNotFound)
	tree, err := e.a.GetInstanceTree(e.ctx, "root")
	if err != nil || tree.RootID != "root" || tree.Size() != 4 || tree.AllIDs[0] != "root" || tree.IsRootOnly() {
		t.Fatalf("tree = %+v %v", tree, err)
	}
	if tree, _ := e.a.GetInstanceTree(e.ctx, "kid2"); !tree.IsRootOnly() {
		t.Fatalf("leaf tree = %+v", tree)
	}
}

// testProviderAdminDelete checks DeleteInstance and DeleteInstancesAtomic: unknown ids, sub-orchestrations, running instances and orphaning deletes are refused (ErrNotFound, ErrSubOrchestration, ErrInstanceRunning, ErrOrphan) without removing anything; a force delete removes the tree with its executions, events and queue messages, counts them, and makes the in-flight turn's ack fail with ErrInvalidLockToken (no zombie re-creation); unknown ids in an atomic set are ignored.
func testProviderAdminDelete(t *testing.T, h *harness) {
	e := newPEnv(t, h)
	e.startInstance(t, "root", nil)
	e.startInstance(t, "kid", sp("root"))
	e.finishInstance(t, "kid", duroxide.StatusCompleted, 2)
	e.startInstance(t, "other", nil)

	_, err := e.a.DeleteInstance(e.ctx, "nope", false)
	wantErr(t, err, agentstore.ErrNotFound)
	_, err = e.a.DeleteInstance(e.ctx, "kid", true)
	wantErr(t, err, agentstore.ErrSubOrchestration)
	_, err = e.a.DeleteInstance(e.ctx, "root", false)
	wantErr(t, err, agentstore.ErrInstanceRunning)
	_, err = e.a.DeleteInstancesAtomic(e.ctx, []string{"root"}, true)
	wantErr(t, err, agentstore.ErrOrphan)
	if ids, _ := e.a.ListInstances(e.ctx); len(ids) != 3 {
		t.Fatalf("failed deletes removed instances: %v", ids)
	}
	if r, err := e.a.DeleteInstancesAtomic(e.ctx, nil, false); err != nil || r != (duroxide.DeleteInstanceResult{}) {
		t.Fatalf("empty delete = %+v %v", r, err)
	}

	// an in-flight turn of root, a queued worker item: force delete wins, the ack then fails
	e.enqueue(t, &duroxide.ExternalRaised{Instance: "root", Name: "x"})
	it := e.fetch(t)
	if err := e.p.EnqueueForWorker(e.ctx, activity("root", 1, 2)); err != nil {
		t.Fatal(err)
	}
	r, err := e.a.DeleteInstance(e.ctx, "root", true)
	if err != nil {
		t.Fatal(err)
	}
	want := duroxide.DeleteInstanceResult{InstancesDeleted: 2, ExecutionsDeleted: 2, EventsDeleted: 3, QueueMessagesDeleted: 2}
	if r != want {
		t.Fatalf("delete = %+v, want %+v", r, want)
	}
	wantErr(t, e.p.AckOrchestrationItem(e.ctx, it.LockToken, duroxide.OrchestrationAck{ExecutionID: 1,
		HistoryDelta: []duroxide.Event{ev("root", 1, 2, &duroxide.ExternalEventEvent{Name: "x"})}, Metadata: runningMeta(nil)}), agentstore.ErrInvalidLockToken)
	if ids, _ := e.a.ListInstances(e.ctx); !slices.Equal(ids, []string{"other"}) {
		t.Fatalf("left = %v (zombie re-creation?)", ids)
	}
	// atomic delete of a whole set with unknown ids ignored
	r, err = e.a.DeleteInstancesAtomic(e.ctx, []string{"other", "ghost"}, true)
	if err != nil || r.InstancesDeleted != 1 {
		t.Fatalf("atomic = %+v %v", r, err)
	}
}

// testProviderAdminDeleteBulk checks DeleteInstanceBulk: an empty id list deletes nothing, CompletedBefore and InstanceIDs select terminal instances only, and running instances or terminal ones with a running child survive.
func testProviderAdminDeleteBulk(t *testing.T, h *harness) {
	e := newPEnv(t, h)
	e.startInstance(t, "done1", nil)
	e.finishInstance(t, "done1", duroxide.StatusCompleted, 2)
	cut := e.clock.Now().Add(time.Second)
	e.clock.Advance(5 * time.Second)
	e.startInstance(t, "done2", nil)
	e.startInstance(t, "done2kid", sp("done2"))
	e.finishInstance(t, "done2kid", duroxide.StatusCompleted, 2)
	e.finishInstance(t, "done2", duroxide.StatusFailed, 2)
	e.startInstance(t, "busy", nil)
	e.startInstance(t, "term", nil)
	e.startInstance(t, "termkid", sp("term"))
	e.finishInstance(t, "term", duroxide.StatusCompleted, 2) // Running child

	if r, err := e.a.DeleteInstanceBulk(e.ctx, duroxide.InstanceFilter{InstanceIDs: []string{}}); err != nil || r.InstancesDeleted != 0 {
		t.Fatalf("empty id list = %+v %v", r, err)
	}
	r, err := e.a.DeleteInstanceBulk(e.ctx, duroxide.InstanceFilter{CompletedBefore: &cut})
	if err != nil || r.InstancesDeleted != 1 {
		t.Fatalf("completed_before = %+v %v", r, err)
	}
	r, err = e.a.DeleteInstanceBulk(e.ctx, duroxide.InstanceFilter{InstanceIDs: []string{"busy", "done2", "done2kid"}})
	if err != nil || r.InstancesDeleted != 2 || r.ExecutionsDeleted != 2 {
		t.Fatalf("by ids = %+v %v", r, err)
	}
	// busy (Running) and term (Running child) survive, limit respected
	r, err = e.a.DeleteInstanceBulk(e.ctx, duroxide.InstanceFilter{Limit: 10})
	if err != nil || r.InstancesDeleted != 0 {
		t.Fatalf("rest = %+v %v", r, err)
	}
	if ids, _ := e.a.ListInstances(e.ctx); len(ids) != 3 {
		t.Fatalf("left = %v", ids)
	}
}

// testProviderAdminPrune checks PruneExecutions and PruneExecutionsBulk over five ContinueAsNew executions: ErrNotFound for an unknown instance, CompletedBefore and KeepLast select the old executions (with their events), the current execution is never pruned, and bulk pruning processes instances of any status.
func testProviderAdminPrune(t *testing.T, h *harness) {
	e := newPEnv(t, h)
	// five executions via ContinueAsNew, one second apart
	e.startInstance(t, "i1", nil)
	var cut time.Time
	for exec := uint64(1); exec <= 4; exec++ {
		e.clock.Advance(time.Second)
		if exec == 3 {
			cut = e.clock.Now()
		}
		e.enqueue(t, &duroxide.ExternalRaised{Instance: "i1", Name: "x"})
		it := e.fetch(t)
		e.ack(t, it, duroxide.OrchestrationAck{ExecutionID: exec, HistoryDelta: []duroxide.Event{ev("i1", exec, 2, &duroxide.OrchestrationContinuedAsNewEvent{Input: "n"})},
			Metadata: duroxide.ExecutionMetadata{Status: sp(duroxide.StatusContinuedAsNew), Output: sp("n")}})
		e.enqueue(t, &duroxide.ContinueAsNew{Instance: "i1", Orchestration: "Orch", Input: "n"})
		it = e.fetch(t)
		e.ack(t, it, duroxide.OrchestrationAck{ExecutionID: exec + 1, HistoryDelta: []duroxide.Event{startedEv("i1", exec+1, 1, nil)}, Metadata: runningMeta(nil)})
	}
	if ids, _ := e.a.ListExecutions(e.ctx, "i1"); len(ids) != 5 {
		t.Fatalf("executions = %v", ids)
	}
	_, err := e.a.PruneExecutions(e.ctx, "nope", duroxide.PruneOptions{})
	wantErr(t, err, agentstore.ErrNotFound)
	// completed_before: executions 1 and 2 completed before the cut (execution 3 completed at it)
	r, err := e.a.PruneExecutions(e.ctx, "i1", duroxide.PruneOptions{CompletedBefore: &cut})
	if err != nil || r != (duroxide.PruneResult{InstancesProcessed: 1, ExecutionsDeleted: 2, EventsDeleted: 4}) {
		t.Fatalf("prune before = %+v %v", r, err)
	}
	r, err = e.a.PruneExecutions(e.ctx, "i1", duroxide.PruneOptions{KeepLast: 2})
	if err != nil || r.ExecutionsDeleted != 1 {
		t.Fatalf("keep_last 2 = %+v %v", r, err)
	}
	if ids, _ := e.a.ListExecutions(e.ctx, "i1"); !slices.Equal(ids, []uint64{4, 5}) {
		t.Fatalf("after keep_last = %v", ids)
	}
	// keep_last 0 still keeps the current (Running) execution
	r, err = e.a.PruneExecutions(e.ctx, "i1", duroxide.PruneOptions{})
	if err != nil || r.ExecutionsDeleted != 1 {
		t.Fatalf("prune all = %+v %v", r, err)
	}
	if ids, _ := e.a.ListExecutions(e.ctx, "i1"); !slices.Equal(ids, []uint64{5}) {
		t.Fatalf("current pruned: %v", ids)
	}
	if hist, err := e.p.Read(e.ctx, "i1"); err != nil || len(hist) != 1 {
		t.Fatalf("current history = %d %v", len(hist), err)
	}
	// bulk over instances of any status
	e.startInstance(t, "j1", nil)
	e.finishInstance(t, "j1", duroxide.StatusCompleted, 2)
	// nothing left to prune: no instance is processed
	r, err = e.a.PruneExecutionsBulk(e.ctx, duroxide.InstanceFilter{}, duroxide.PruneOptions{KeepLast: 1})
	if err != nil || r.InstancesProcessed != 0 || r.ExecutionsDeleted != 0 {
		t.Fatalf("bulk = %+v %v", r, err)
	}
	if ids, _ := e.a.ListExecutions(e.ctx, "i1"); !slices.Equal(ids, []uint64{5}) {
		t.Fatalf("i1 executions after bulk = %v", ids)
	}
	if ids, _ := e.a.ListExecutions(e.ctx, "j1"); !slices.Equal(ids, []uint64{1}) {
		t.Fatalf("j1 executions after bulk = %v", ids)
	}
	if m, err := e.a.GetSystemMetrics(e.ctx); err != nil || m.TotalExecutions != 2 {
		t.Fatalf("metrics after bulk = %+v, %v; want 2 executions", m, err)
	}
}
