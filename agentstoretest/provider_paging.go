package agentstoretest

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/repo"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// providerPagingTests are the Admin area's tests of this file.
func providerPagingTests() []test {
	return tests(
		test{"ProviderAdminPaging", testProviderAdminPaging},
	)
}

// testProviderAdminPaging: ListInstancesPage, ListInstancesByStatusPage
// and ListExecutionsPage walked at several page sizes (instances created
// in the same millisecond included) return exactly what ListInstances,
// ListInstancesByStatus and ListExecutions return, in the same order, each
// once; a bad limit, a malformed cursor or a cursor of another call is
// ErrInvalidInput; an unknown instance has an empty page of executions.
func testProviderAdminPaging(t *testing.T, h *harness) {
	e := newPEnv(t, h)
	for i := 0; i < 13; i++ {
		inst := fmt.Sprintf("inst-%02d", (i*7)%13) // ids not in creation order
		e.startInstance(t, inst, nil)
		if i%4 == 0 || i == 5 || i == 9 {
			e.finishInstance(t, inst, duroxide.StatusCompleted, 2)
		}
		if i%3 == 0 {
			e.clock.Advance(time.Millisecond)
		}
	}
	// Five executions of one instance via ContinueAsNew.
	e.startInstance(t, "multi", nil)
	for exec := uint64(1); exec <= 4; exec++ {
		e.enqueue(t, &duroxide.ExternalRaised{Instance: "multi", Name: "x"})
		it := e.fetch(t)
		e.ack(t, it, duroxide.OrchestrationAck{ExecutionID: exec, HistoryDelta: []duroxide.Event{ev("multi", exec, 2, &duroxide.OrchestrationContinuedAsNewEvent{Input: "n"})},
			Metadata: duroxide.ExecutionMetadata{Status: sp(duroxide.StatusContinuedAsNew), Output: sp("n")}})
		e.enqueue(t, &duroxide.ContinueAsNew{Instance: "multi", Orchestration: "Orch", Input: "n"})
		it = e.fetch(t)
		e.ack(t, it, duroxide.OrchestrationAck{ExecutionID: exec + 1, HistoryDelta: []duroxide.Event{startedEv("multi", exec+1, 1, nil)}, Metadata: runningMeta(nil)})
	}

	all, err := e.a.ListInstances(e.ctx)
	if err != nil || len(all) != 14 {
		t.Fatalf("ListInstances = %v, %v", all, err)
	}
	running, err := e.a.ListInstancesByStatus(e.ctx, duroxide.StatusRunning)
	if err != nil || len(running) != 8 {
		t.Fatalf("running = %v, %v", running, err)
	}
	completed, err := e.a.ListInstancesByStatus(e.ctx, duroxide.StatusCompleted)
	if err != nil || len(completed) != 6 {
		t.Fatalf("completed = %v, %v", completed, err)
	}
	execs, err := e.a.ListExecutions(e.ctx, "multi")
	if err != nil || len(execs) != 5 {
		t.Fatalf("executions = %v, %v", execs, err)
	}
	for _, limit := range []int{1, 2, 3, 5, 8, 14, 100} {
		got := walkPages(t, limit, func(p repo.PageParams) ([]string, string, error) { return e.a.ListInstancesPage(e.ctx, p) })
		if !slices.Equal(got, all) {
			t.Fatalf("limit %d: ListInstancesPage walk = %v, want %v", limit, got, all)
		}
		for status, want := range map[string][]string{duroxide.StatusRunning: running, duroxide.StatusCompleted: completed, "Nope": nil} {
			got := walkPages(t, limit, func(p repo.PageParams) ([]string, string, error) {
				return e.a.ListInstancesByStatusPage(e.ctx, status, p)
			})
			if !slices.Equal(got, want) {
				t.Fatalf("limit %d: ListInstancesByStatusPage(%s) walk = %v, want %v", limit, status, got, want)
			}
		}
		gx := walkPages(t, limit, func(p repo.PageParams) ([]uint64, string, error) { return e.a.ListExecutionsPage(e.ctx, "multi", p) })
		if !slices.Equal(gx, execs) {
			t.Fatalf("limit %d: ListExecutionsPage walk = %v, want %v", limit, gx, execs)
		}
	}
	if ids, next, err := e.a.ListExecutionsPage(e.ctx, "nope", repo.PageParams{}); err != nil || len(ids) != 0 || next != "" {
		t.Fatalf("executions of an unknown instance: %v %q %v", ids, next, err)
	}

	_, instNext, err := e.a.ListInstancesPage(e.ctx, repo.PageParams{Limit: 2})
	if err != nil || instNext == "" {
		t.Fatalf("first page: %q %v", instNext, err)
	}
	_, execNext, err := e.a.ListExecutionsPage(e.ctx, "multi", repo.PageParams{Limit: 2})
	if err != nil || execNext == "" {
		t.Fatalf("first executions page: %q %v", execNext, err)
	}
	bad := []repo.PageParams{{Limit: -1}, {Limit: repo.MaxPageLimit + 1}, {After: "%%%"}, {After: "bm90IGpzb24"}}
	for _, p := range append(bad, repo.PageParams{After: execNext}) {
		if _, _, err := e.a.ListInstancesPage(e.ctx, p); !errors.Is(err, agentstore.ErrInvalidInput) {
			t.Fatalf("ListInstancesPage(%+v) = %v, want ErrInvalidInput", p, err)
		}
	}
	for _, p := range append(bad, repo.PageParams{After: instNext}) {
		if _, _, err := e.a.ListInstancesByStatusPage(e.ctx, duroxide.StatusRunning, p); !errors.Is(err, agentstore.ErrInvalidInput) {
			t.Fatalf("ListInstancesByStatusPage(%+v) = %v, want ErrInvalidInput", p, err)
		}
		if _, _, err := e.a.ListExecutionsPage(e.ctx, "multi", p); !errors.Is(err, agentstore.ErrInvalidInput) {
			t.Fatalf("ListExecutionsPage(%+v) = %v, want ErrInvalidInput", p, err)
		}
	}
}
