package agentstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/orchloop"
	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo"
)

// handles returns n providers on separate Store handles (separate pools).
func (e *pEnv) handles(t *testing.T, n int) []repo.Provider {
	t.Helper()
	out := []repo.Provider{e.p}
	for len(out) < n {
		out = append(out, e.other(t))
	}
	return out
}

func TestProviderConcurrentFetchOneInstanceExactlyOneWins(t *testing.T) {
	forEachDialect(t, func(t *testing.T, h *harness) {
		e := newPEnv(t, h)
		ps := e.handles(t, 5)
		for round := range 3 {
			inst := fmt.Sprintf("i%d", round)
			e.enqueue(t, startItem(inst, nil))
			var mu sync.Mutex
			var won []*repo.OrchestrationItem
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
			e.ack(t, won[0], repo.OrchestrationAck{HistoryDelta: []repo.Event{startedEv(inst, 1, 1, nil)}, Metadata: runningMeta(nil)})
		}
	})
}

func TestProviderConcurrentFetchManyInstancesNoneTwice(t *testing.T) {
	forEachDialect(t, func(t *testing.T, h *harness) {
		e := newPEnv(t, h)
		ps := e.handles(t, 4)
		for i := range 20 {
			e.enqueue(t, startItem(fmt.Sprintf("i%02d", i), nil))
			e.enqueue(t, &repo.ExternalRaised{Instance: fmt.Sprintf("i%02d", i), Name: "x"})
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
	})
}

func TestProviderConcurrentAcksOneTokenExactlyOneSucceeds(t *testing.T) {
	forEachDialect(t, func(t *testing.T, h *harness) {
		e := newPEnv(t, h)
		ps := e.handles(t, 2)
		e.startInstance(t, "i1", nil)
		for round := range 5 {
			e.enqueue(t, &repo.ExternalRaised{Instance: "i1", Name: "x"})
			it := e.fetch(t)
			if it.Instance != "i1" {
				t.Fatalf("fetched %s", it.Instance)
			}
			ack := repo.OrchestrationAck{ExecutionID: 1, // empty delta: only the lock claim protects against a double enqueue
				// a far-future timer: stays invisible, so later fetches see only i1
				OrchestratorItems: []repo.WorkItem{&repo.TimerFired{Instance: fmt.Sprintf("t%d", round), ExecutionID: 1, ID: 1,
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
			if n := e.count(t, models.TableOrchestratorQueue); n != int64(round+1) {
				t.Fatalf("round %d: queue = %d rows, want %d (double enqueue?)", round, n, round+1)
			}
		}
	})
}

// TestProviderConcurrentSubOrchestrationFanOut runs 50 parents that each fan
// out to 5 sub-orchestrations (each running one activity) on three Store
// handles, each with its own orchestrator and worker loop. Every instance
// must complete and no loop may fail (deadlocks would surface as errors
// once the internal retries are exhausted).
func TestProviderConcurrentSubOrchestrationFanOut(t *testing.T) {
	forEachDialect(t, func(t *testing.T, h *harness) {
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
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
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
			if info.Status != repo.StatusCompleted {
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
		t.Logf("%s: 300 instances completed, %d loop-level retries", h.Dialect, retries)
	})
}

// TestProviderConcurrentAckAndForceDelete races an ack against a forced
// delete of the same instance on two handles: whichever wins, the instance
// is gone afterwards (no zombie re-creation by a late ack) and neither side
// reports anything but success or ErrInvalidLockToken.
func TestProviderConcurrentAckAndForceDelete(t *testing.T) {
	forEachDialect(t, func(t *testing.T, h *harness) {
		e := newPEnv(t, h)
		other := e.h.Open(t, agentstore.WithClock(e.clock.Now)).ProviderAdmin()
		for round := range 8 {
			inst := fmt.Sprintf("r%d", round)
			e.startInstance(t, inst, nil)
			e.enqueue(t, &repo.ExternalRaised{Instance: inst, Name: "x"})
			it := e.fetch(t)
			var ackErr, delErr error
			var wg sync.WaitGroup
			wg.Add(2)
			go func() {
				defer wg.Done()
				ackErr = e.p.AckOrchestrationItem(e.ctx, it.LockToken, repo.OrchestrationAck{ExecutionID: 1,
					HistoryDelta: []repo.Event{ev(inst, 1, 2, &repo.ExternalEventEvent{Name: "x"})}, Metadata: runningMeta(nil),
					WorkerItems: []repo.WorkItem{activity(inst, 1, 3)}})
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
				if n := e.count(t, models.TableWorkerQueue); n != 0 {
					t.Fatalf("round %d: %d worker rows left", round, n)
				}
			}
		}
	})
}
