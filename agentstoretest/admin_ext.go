package agentstoretest

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// adminExtTests are the Admin area's tests of this file.
func adminExtTests() []test {
	return tests(
		test{"ProviderAdminEstimates", testProviderAdminEstimates},
		test{"ProviderAdminTreeStatements", testProviderAdminTreeStatements},
		test{"ProviderAdminChildrenAndHistoryPaging", testProviderAdminChildrenAndHistoryPaging},
	)
}

// ext returns e's admin with agentstore's extensions, or skips t.
func (e *pEnv) ext(t *testing.T) duroxide.ProviderAdminExt {
	t.Helper()
	x, ok := e.a.(duroxide.ProviderAdminExt)
	if !ok {
		t.Skipf("agentstoretest: ProviderAdmin %T does not implement duroxide.ProviderAdminExt", e.a)
	}
	return x
}

// testProviderAdminEstimates: GetSystemMetricsEstimate and
// GetQueueDepthsEstimate with the default cap equal GetSystemMetrics and
// GetQueueDepths, every figure exact; with a cap of 2 the figures below 2
// stay exact and the others are an estimate or exactly "at least 2", never
// below the cap; once the database has statistics of the tables
// (DatabaseOps.RefreshStatistics) the table totals are estimated from them;
// a negative cap is ErrInvalidInput. Store.ProviderAdminExt, where the
// handle has it, is the same admin.
func testProviderAdminEstimates(t *testing.T, h *harness) {
	e := newPEnv(t, h)
	x := e.ext(t)
	if xs, ok := e.st.(interface {
		ProviderAdminExt() duroxide.ProviderAdminExt
	}); ok && xs.ProviderAdminExt() == nil {
		t.Fatal("Store.ProviderAdminExt is nil")
	}
	empty, err := x.GetSystemMetricsEstimate(e.ctx, duroxide.EstimateOptions{})
	if err != nil || !empty.Exact() || empty.Values() != (duroxide.SystemMetrics{}) {
		t.Fatalf("estimate of an empty store = %+v, %v", empty, err)
	}
	e.startInstance(t, "root", nil)
	e.startInstance(t, "kid1", sp("root"))
	e.startInstance(t, "kid2", sp("root"))
	e.startInstance(t, "grandkid", sp("kid1"))
	e.finishInstance(t, "kid2", duroxide.StatusCompleted, 2)
	e.finishInstance(t, "grandkid", duroxide.StatusFailed, 2)
	exact, err := e.a.GetSystemMetrics(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	est, err := x.GetSystemMetricsEstimate(e.ctx, duroxide.EstimateOptions{})
	if err != nil || !est.Exact() || est.Values() != *exact {
		t.Fatalf("default-cap estimate = %+v, %v; exact %+v", est, err, exact)
	}
	checkCapped := func(when string, m *duroxide.SystemMetricsEstimate) {
		t.Helper()
		for _, f := range []struct {
			name  string
			c     duroxide.Count
			exact int64
		}{{"instances", m.TotalInstances, exact.TotalInstances}, {"executions", m.TotalExecutions, exact.TotalExecutions},
			{"running", m.RunningInstances, exact.RunningInstances}, {"completed", m.CompletedInstances, exact.CompletedInstances},
			{"failed", m.FailedInstances, exact.FailedInstances}, {"events", m.TotalEvents, exact.TotalEvents}} {
			switch {
			case f.exact < 2 && (f.c.Kind != duroxide.CountExact || f.c.Value != f.exact):
				t.Fatalf("%s: %s = %v, want exactly %d (below the cap)", when, f.name, f.c, f.exact)
			case f.exact >= 2 && f.c.Kind == duroxide.CountExact:
				t.Fatalf("%s: %s = %v exact, want an estimate or a bound (the count reached the cap)", when, f.name, f.c)
			case f.c.Kind == duroxide.CountAtLeast && f.c.Value != 2:
				t.Fatalf("%s: %s = %v, want at least the cap 2", when, f.name, f.c)
			case f.c.Value < 2 && f.exact >= 2:
				t.Fatalf("%s: %s = %v below the cap", when, f.name, f.c)
			}
		}
	}
	capped, err := x.GetSystemMetricsEstimate(e.ctx, duroxide.EstimateOptions{Cap: 2})
	if err != nil || capped.Exact() {
		t.Fatalf("cap-2 estimate = %+v, %v", capped, err)
	}
	checkCapped("before RefreshStatistics", capped)
	if err := h.ops(t).RefreshStatistics(e.ctx, e.st, models.TableInstances, models.TableExecutions, models.TableHistory); err != nil {
		t.Fatal(err)
	}
	capped, err = x.GetSystemMetricsEstimate(e.ctx, duroxide.EstimateOptions{Cap: 2})
	if err != nil {
		t.Fatal(err)
	}
	checkCapped("after RefreshStatistics", capped)
	for name, c := range map[string]duroxide.Count{"instances": capped.TotalInstances, "executions": capped.TotalExecutions, "events": capped.TotalEvents} {
		if c.Kind != duroxide.CountEstimated {
			t.Fatalf("after RefreshStatistics: %s = %v (%s), want estimated from the statistics", name, c, c.Kind)
		}
	}
	if _, err := x.GetSystemMetricsEstimate(e.ctx, duroxide.EstimateOptions{Cap: -1}); !errors.Is(err, agentstore.ErrInvalidInput) {
		t.Fatalf("negative cap: %v, want ErrInvalidInput", err)
	}

	e.enqueue(t, &duroxide.ExternalRaised{Instance: "root", Name: "x"})
	e.enqueue(t, &duroxide.ExternalRaised{Instance: "kid1", Name: "x"})
	e.enqueue(t, &duroxide.ExternalRaised{Instance: "kid1", Name: "y"})
	if err := e.p.EnqueueForWorker(e.ctx, activity("root", 1, 5)); err != nil {
		t.Fatal(err)
	}
	_ = e.fetch(t) // locks one instance's messages
	d, err := e.a.GetQueueDepths(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	de, err := x.GetQueueDepthsEstimate(e.ctx, duroxide.EstimateOptions{})
	if err != nil || de.OrchestratorQueue != (duroxide.Count{Value: d.OrchestratorQueue}) || de.WorkerQueue != (duroxide.Count{Value: d.WorkerQueue}) {
		t.Fatalf("depths estimate = %+v, %v; exact %+v", de, err, d)
	}
	de, err = x.GetQueueDepthsEstimate(e.ctx, duroxide.EstimateOptions{Cap: 1})
	want := duroxide.QueueDepthsEstimate{OrchestratorQueue: duroxide.Count{Value: 1, Kind: duroxide.CountAtLeast}, WorkerQueue: duroxide.Count{Value: 1, Kind: duroxide.CountAtLeast}}
	if err != nil || d.OrchestratorQueue < 1 || *de != want {
		t.Fatalf("cap-1 depths estimate = %+v, %v; exact %+v", de, err, d)
	}
	if _, err := x.GetQueueDepthsEstimate(e.ctx, duroxide.EstimateOptions{Cap: -5}); !errors.Is(err, agentstore.ErrInvalidInput) {
		t.Fatalf("negative cap: %v, want ErrInvalidInput", err)
	}
}

// testProviderAdminTreeStatements: GetInstanceTree returns the root, then
// the tree breadth first with each instance's children oldest first
// (the same list as walking ListChildren level by level), and runs the
// same number of statements (at most 2) for a chain of depth 4 and for a
// tree of depth 4 and fan-out 2 (31 instances); a leaf and an unknown
// instance give the instance alone; a parent cycle (white-box) ends, each
// instance listed once. DeleteInstance removes the whole tree.
func testProviderAdminTreeStatements(t *testing.T, h *harness) {
	e := newPEnv(t, h)
	rec := &stmtRecorder{}
	counted := h.Open(t, withClock(e.clock.Now), withStatements(rec)).ProviderAdmin()
	// a chain root0 -> c1 -> c2 -> c3 -> c4
	parent := "chain"
	e.startInstance(t, parent, nil)
	chain := []string{parent}
	for d := 1; d <= 4; d++ {
		id := fmt.Sprintf("chain-%d", d)
		e.startInstance(t, id, sp(parent))
		chain, parent = append(chain, id), id
	}
	// a binary tree of depth 4, children created in reverse name order
	e.startInstance(t, "t", nil)
	level := []string{"t"}
	for d := 1; d <= 4; d++ {
		var next []string
		for _, p := range level {
			for _, c := range []string{p + ".b", p + ".a"} {
				e.clock.Advance(time.Millisecond)
				e.startInstance(t, c, sp(p))
				next = append(next, c)
			}
		}
		level = next
	}
	walk := func(root string) []string { // breadth first through ListChildren
		out := []string{root}
		for i := 0; i < len(out); i++ {
			kids, err := e.a.ListChildren(e.ctx, out[i])
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, kids...)
		}
		return out
	}
	counts := map[string]int{}
	for _, root := range []string{"chain", "t", "t.b.a", "chain-4", "nope"} {
		rec.record()
		tree, err := counted.GetInstanceTree(e.ctx, root)
		stmts := rec.stop()
		if err != nil {
			t.Fatalf("tree of %s: %v", root, err)
		}
		want := walk(root)
		if tree.RootID != root || !slices.Equal(tree.AllIDs, want) {
			t.Fatalf("tree of %s = %v, want %v", root, tree.AllIDs, want)
		}
		counts[root] = len(stmts)
		if len(stmts) == 0 || len(stmts) > 2 {
			var sqls []string
			for _, s := range stmts {
				sqls = append(sqls, s.Text)
			}
			t.Fatalf("tree of %s (%d instances) ran %d statements, want 1 or 2:\n%s", root, len(want), len(stmts), strings.Join(sqls, "\n"))
		}
	}
	if n := len(walk("t")); n != 31 || !slices.Equal(walk("chain"), chain) {
		t.Fatalf("fixture: tree of %d instances, chain %v", n, walk("chain"))
	}
	if counts["t"] != counts["chain"] || counts["t"] != counts["chain-4"] {
		t.Fatalf("statements grow with the tree: %v", counts)
	}
	// white-box: a parent cycle (chain's parent set to its own
	// descendant) cannot come from acks, but the walk still ends, listing
	// each instance once
	e.update(t, models.TableInstances, Row{"instance_id": "chain"}, Row{"parent_instance_id": "chain-4"})
	if tree, err := e.a.GetInstanceTree(e.ctx, "chain"); err != nil || !slices.Equal(tree.AllIDs, chain) {
		t.Fatalf("tree of a cycle = %v, %v; want %v", tree, err, chain)
	}
	if tree, err := e.a.GetInstanceTree(e.ctx, "chain-2"); err != nil || !slices.Equal(tree.AllIDs, []string{"chain-2", "chain-3", "chain-4", "chain", "chain-1"}) {
		t.Fatalf("tree of a cycle from chain-2 = %v, %v", tree, err)
	}
	res, err := e.a.DeleteInstance(e.ctx, "t", true)
	if err != nil || res.InstancesDeleted != 31 {
		t.Fatalf("delete tree: %+v %v", res, err)
	}
	if tree, err := e.a.GetInstanceTree(e.ctx, "t"); err != nil || !slices.Equal(tree.AllIDs, []string{"t"}) {
		t.Fatalf("tree after delete = %v, %v", tree, err)
	}
}

// testProviderAdminChildrenAndHistoryPaging: ListChildrenPage walked at
// several page sizes (children created in the same millisecond, ids not
// in creation order) returns exactly ListChildren; ReadHistoryPage walked
// the same way returns exactly ReadHistoryWithExecutionID, page by page in
// event id order, also for an older execution; unknown instances and
// executions give empty pages; bad limits, malformed cursors and cursors
// of the other call are ErrInvalidInput; an undecodable event in a page is
// a CorruptRowError naming the row, on every read of that page, while the
// pages before it still read.
func testProviderAdminChildrenAndHistoryPaging(t *testing.T, h *harness) {
	e := newPEnv(t, h)
	x := e.ext(t)
	e.startInstance(t, "parent", nil)
	for i := 0; i < 11; i++ {
		e.startInstance(t, fmt.Sprintf("kid-%02d", (i*5)%11), sp("parent"))
		if i%3 == 0 {
			e.clock.Advance(time.Millisecond)
		}
	}
	kids, err := e.a.ListChildren(e.ctx, "parent")
	if err != nil || len(kids) != 11 {
		t.Fatalf("ListChildren = %v, %v", kids, err)
	}
	// 40 events in execution 1 of "parent" and a second execution.
	var evs []duroxide.Event
	for id := uint64(2); id <= 40; id++ {
		evs = append(evs, ev("parent", 1, id, &duroxide.ActivityScheduledEvent{Name: "a", Input: fmt.Sprint(id)}))
	}
	if err := e.p.AppendWithExecution(e.ctx, "parent", 1, evs); err != nil {
		t.Fatal(err)
	}
	if err := e.p.AppendWithExecution(e.ctx, "parent", 2, []duroxide.Event{startedEv("parent", 2, 1, nil), ev("parent", 2, 2, &duroxide.TimerCreatedEvent{FireAtMS: 9})}); err != nil {
		t.Fatal(err)
	}
	hist1, err := e.a.ReadHistoryWithExecutionID(e.ctx, "parent", 1)
	if err != nil || len(hist1) != 40 {
		t.Fatalf("history = %d events, %v", len(hist1), err)
	}
	hist2, err := e.a.ReadHistoryWithExecutionID(e.ctx, "parent", 2)
	if err != nil || len(hist2) != 2 {
		t.Fatalf("history 2 = %d events, %v", len(hist2), err)
	}
	ids := func(evs []duroxide.Event) []uint64 {
		out := make([]uint64, len(evs))
		for i, ev := range evs {
			out[i] = ev.EventID
		}
		return out
	}
	for _, limit := range []int{1, 2, 3, 7, 11, 40, 100} {
		got := walkPages(t, limit, func(p repo.PageParams) ([]string, string, error) { return x.ListChildrenPage(e.ctx, "parent", p) })
		if !slices.Equal(got, kids) {
			t.Fatalf("limit %d: ListChildrenPage walk = %v, want %v", limit, got, kids)
		}
		for exec, want := range map[uint64][]duroxide.Event{1: hist1, 2: hist2} {
			gh := walkPages(t, limit, func(p repo.PageParams) ([]duroxide.Event, string, error) {
				return x.ReadHistoryPage(e.ctx, "parent", exec, p)
			})
			if !slices.Equal(ids(gh), ids(want)) || !reflect.DeepEqual(gh, want) {
				t.Fatalf("limit %d: ReadHistoryPage(exec %d) walk = %v, want %v", limit, exec, ids(gh), ids(want))
			}
		}
	}
	for _, call := range []func() (int, string, error){
		func() (int, string, error) {
			k, n, err := x.ListChildrenPage(e.ctx, "nope", repo.PageParams{})
			return len(k), n, err
		},
		func() (int, string, error) {
			k, n, err := x.ListChildrenPage(e.ctx, "kid-03", repo.PageParams{})
			return len(k), n, err
		},
		func() (int, string, error) {
			h, n, err := x.ReadHistoryPage(e.ctx, "nope", 1, repo.PageParams{})
			return len(h), n, err
		},
		func() (int, string, error) {
			h, n, err := x.ReadHistoryPage(e.ctx, "parent", 9, repo.PageParams{})
			return len(h), n, err
		},
	} {
		if n, next, err := call(); err != nil || n != 0 || next != "" {
			t.Fatalf("empty page: %d items, next %q, %v", n, next, err)
		}
	}
	_, kidNext, err := x.ListChildrenPage(e.ctx, "parent", repo.PageParams{Limit: 2})
	if err != nil || kidNext == "" {
		t.Fatalf("first children page: %q %v", kidNext, err)
	}
	_, histNext, err := x.ReadHistoryPage(e.ctx, "parent", 1, repo.PageParams{Limit: 2})
	if err != nil || histNext == "" {
		t.Fatalf("first history page: %q %v", histNext, err)
	}
	bad := []repo.PageParams{{Limit: -1}, {Limit: repo.MaxPageLimit + 1}, {After: "%%%"}, {After: "bm90IGpzb24"}}
	for _, p := range append(bad, repo.PageParams{After: histNext}) {
		if _, _, err := x.ListChildrenPage(e.ctx, "parent", p); !errors.Is(err, agentstore.ErrInvalidInput) {
			t.Fatalf("ListChildrenPage(%+v) = %v, want ErrInvalidInput", p, err)
		}
	}
	for _, p := range append(bad, repo.PageParams{After: kidNext}) {
		if _, _, err := x.ReadHistoryPage(e.ctx, "parent", 1, p); !errors.Is(err, agentstore.ErrInvalidInput) {
			t.Fatalf("ReadHistoryPage(%+v) = %v, want ErrInvalidInput", p, err)
		}
	}
	// event 25 undecodable: the page holding it fails, the ones before read
	e.update(t, models.TableHistory, Row{"instance_id": "parent", "execution_id": 1, "event_id": 25},
		Row{"event_data": `{"event_id":25,"type":"NoSuchKind"}`})
	first, next, err := x.ReadHistoryPage(e.ctx, "parent", 1, repo.PageParams{Limit: 20})
	if err != nil || len(first) != 20 || next == "" {
		t.Fatalf("page before the corrupt row: %d events, %q, %v", len(first), next, err)
	}
	for range 2 {
		_, _, err := x.ReadHistoryPage(e.ctx, "parent", 1, repo.PageParams{Limit: 20, After: next})
		wantCorrupt(t, "ReadHistoryPage", err, models.TableHistory, "parent/1/25", "event_data")
	}
}
