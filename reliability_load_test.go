package agentstore_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"golang.org/x/sync/errgroup"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/orchloop"
	"github.com/agentstore/agentstore/repo"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// relPool keeps the many handles of a load test inside PostgreSQL's
// connection limit (other tests run at the same time).
func relPool() agentstore.Option {
	p := agentstore.DefaultPool()
	p.MaxOpenConns = 3
	return agentstore.WithPool(p)
}

// exactlyOnce tracks which items were produced and how many times each was
// completed.
type exactlyOnce struct {
	mu        sync.Mutex
	produced  map[string]bool
	completed map[string]int
	dups      []string
	done      atomic.Int64
}

func newExactlyOnce(n int) *exactlyOnce {
	return &exactlyOnce{produced: make(map[string]bool, n), completed: make(map[string]int, n)}
}

func (x *exactlyOnce) produce(id string) {
	x.mu.Lock()
	x.produced[id] = true
	x.mu.Unlock()
}

func (x *exactlyOnce) complete(id string) {
	x.mu.Lock()
	x.completed[id]++
	if x.completed[id] == 2 {
		x.dups = append(x.dups, id)
	}
	x.mu.Unlock()
	x.done.Add(1)
}

// check fails t unless every produced item was completed exactly once and
// nothing unknown was completed; it returns (lost, duplicated).
func (x *exactlyOnce) check(t *testing.T, want int) (lost, dup int) {
	t.Helper()
	x.mu.Lock()
	defer x.mu.Unlock()
	if len(x.produced) != want {
		t.Errorf("produced %d distinct items, want %d", len(x.produced), want)
	}
	for id := range x.produced {
		if x.completed[id] == 0 {
			lost++
			if lost <= 5 {
				t.Errorf("item %s produced but never completed", id)
			}
		}
	}
	for id, n := range x.completed {
		if !x.produced[id] {
			t.Errorf("item %s completed but never produced", id)
		}
		if n > 1 {
			dup++
		}
	}
	if dup > 0 {
		t.Errorf("%d items completed more than once, e.g. %v", dup, x.dups[:min(5, len(x.dups))])
	}
	if lost > 0 {
		t.Errorf("%d items lost", lost)
	}
	return lost, dup
}

// TestReliabilityExactlyOnceSessionQueue: 4 producers keep enqueueing into
// 16 sessions while 16 consumers, each on its own Store handle, dequeue and
// complete. Every item must be completed exactly once: the consumers'
// successful Completes are counted per item, and the table must show every
// item completed after exactly one attempt (leases are long, so a second
// attempt would mean a double hand-out).
func TestReliabilityExactlyOnceSessionQueue(t *testing.T) {
	requireLongTests(t)
	forEachDialect(t, func(t *testing.T, h *harness) {
		const consumers, producers, sessions = 16, 4, 16
		n := scaled(t, 20000, 400)
		st := h.New(t, relPool())
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		sids := make([]uuid.UUID, sessions)
		for i := range sids {
			s := repo.NewSession()
			if err := st.Sessions().Save(ctx, s); err != nil {
				t.Fatal(err)
			}
			sids[i] = s.ID
		}
		x := newExactlyOnce(n)
		var retries, empty atomic.Int64
		start := time.Now()
		g, gctx := errgroup.WithContext(ctx)
		for p := range producers {
			q := h.Open(t, relPool()).SessionQueue()
			g.Go(func() error {
				var r retryCounter
				defer func() { retries.Add(r.n) }()
				for i := p; i < n; i += producers {
					var it *repo.QueueItem
					err := r.do(gctx, func() (e error) {
						it, e = q.Enqueue(gctx, sids[i%sessions], "item-"+strconv.Itoa(i), int32(i%3))
						return e
					})
					if err != nil {
						return fmt.Errorf("producer %d enqueue %d: %w", p, i, err)
					}
					x.produce(it.ID.String())
				}
				return nil
			})
		}
		for c := range consumers {
			q := h.Open(t, relPool()).SessionQueue()
			g.Go(func() error {
				var r retryCounter
				defer func() { retries.Add(r.n) }()
				owner := "consumer-" + strconv.Itoa(c)
				for k := c; x.done.Load() < int64(n); k++ {
					if gctx.Err() != nil {
						return gctx.Err()
					}
					sid := sids[k%sessions]
					var it *repo.QueueItem
					err := r.do(gctx, func() (e error) {
						it, e = q.Dequeue(gctx, sid, repo.DequeueParams{Owner: owner, Lease: 10 * time.Minute})
						return e
					})
					if err != nil {
						return fmt.Errorf("%s dequeue: %w", owner, err)
					}
					if it == nil {
						empty.Add(1)
						continue
					}
					if it.Attempts != 1 {
						return fmt.Errorf("%s: item %s handed out with attempts=%d, want 1", owner, it.ID, it.Attempts)
					}
					l := repo.Lease{ItemID: it.ID, Token: *it.LeaseToken, Until: *it.LeasedUntil}
					if err := r.do(gctx, func() error { return q.Complete(gctx, l) }); err != nil {
						return fmt.Errorf("%s complete %s: %w", owner, it.ID, err)
					}
					x.complete(it.ID.String())
					k-- // stay on a session that had work
				}
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			t.Fatal(err)
		}
		elapsed := time.Since(start)
		lost, dup := x.check(t, n)
		if got := tableCount(t, st, models.TableQueue, "status = ? AND attempts = 1", "completed"); got != int64(n) {
			t.Errorf("table: %d items completed after one attempt, want %d", got, n)
		}
		if got := tableCount(t, st, models.TableQueue, ""); got != int64(n) {
			t.Errorf("table: %d items, want %d", got, n)
		}
		relLogf(t, "session queue: %d producers, %d consumers on %d handles, %d sessions: enqueued %d, completed %d, lost %d, duplicated %d, empty polls %d, retries %d, %.1fs (%.0f items/s)",
			producers, consumers, consumers, sessions, n, x.done.Load(), lost, dup, empty.Load(), retries.Load(), elapsed.Seconds(), float64(n)/elapsed.Seconds())
	})
}

// TestReliabilityExactlyOnceWorkerQueue: 4 producers keep enqueueing
// activities while 16 workers, each on its own Store handle, peek-lock and
// ack them. Every item must be acked exactly once and the queue must be
// empty afterwards; every fetch must be the item's first attempt.
func TestReliabilityExactlyOnceWorkerQueue(t *testing.T) {
	requireLongTests(t)
	forEachDialect(t, func(t *testing.T, h *harness) {
		const consumers, producers = 16, 4
		n := scaled(t, 20000, 400)
		st := h.New(t, relPool())
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		x := newExactlyOnce(n)
		var retries, empty atomic.Int64
		start := time.Now()
		g, gctx := errgroup.WithContext(ctx)
		for p := range producers {
			pr := h.Open(t, relPool()).Provider()
			g.Go(func() error {
				var r retryCounter
				defer func() { retries.Add(r.n) }()
				for i := p; i < n; i += producers {
					x.produce(strconv.Itoa(i))
					item := &duroxide.ActivityExecute{Instance: "load-" + strconv.Itoa(i%50), ExecutionID: 1, ID: uint64(i), Name: "act", Input: strconv.Itoa(i)}
					if err := r.do(gctx, func() error { return pr.EnqueueForWorker(gctx, item) }); err != nil {
						return fmt.Errorf("producer %d enqueue %d: %w", p, i, err)
					}
				}
				return nil
			})
		}
		for c := range consumers {
			pr := h.Open(t, relPool()).Provider()
			g.Go(func() error {
				var r retryCounter
				defer func() { retries.Add(r.n) }()
				for x.done.Load() < int64(n) {
					var l *duroxide.WorkItemLease
					err := r.do(gctx, func() (e error) {
						l, e = pr.FetchWorkItem(gctx, 10*time.Minute, 20*time.Millisecond, nil, duroxide.TagFilter{})
						return e
					})
					if err != nil {
						if gctx.Err() != nil {
							return gctx.Err()
						}
						return fmt.Errorf("worker %d fetch: %w", c, err)
					}
					if l == nil {
						empty.Add(1)
						continue
					}
					ae, ok := l.Item.(*duroxide.ActivityExecute)
					if !ok {
						return fmt.Errorf("worker %d: fetched %T", c, l.Item)
					}
					if l.AttemptCount != 1 {
						return fmt.Errorf("worker %d: item %d handed out with attempt %d, want 1", c, ae.ID, l.AttemptCount)
					}
					if ae.Input != strconv.FormatUint(ae.ID, 10) {
						return fmt.Errorf("worker %d: item %d has input %q", c, ae.ID, ae.Input)
					}
					if err := r.do(gctx, func() error { return pr.AckWorkItem(gctx, l.LockToken, nil) }); err != nil {
						return fmt.Errorf("worker %d ack %d: %w", c, ae.ID, err)
					}
					x.complete(strconv.FormatUint(ae.ID, 10))
				}
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			t.Fatal(err)
		}
		elapsed := time.Since(start)
		lost, dup := x.check(t, n)
		if left := tableCount(t, st, models.TableWorkerQueue, ""); left != 0 {
			t.Errorf("worker queue holds %d rows after the drain, want 0", left)
		}
		relLogf(t, "worker queue: %d producers, %d workers on %d handles: enqueued %d, acked %d, lost %d, duplicated %d, empty polls %d, retries %d, %.1fs (%.0f items/s)",
			producers, consumers, consumers, n, x.done.Load(), lost, dup, empty.Load(), retries.Load(), elapsed.Seconds(), float64(n)/elapsed.Seconds())
	})
}

// TestReliabilityOrchestrations: 500 orchestrations, each fanning out to 5
// activities and one sub-orchestration (which runs one activity), driven by
// 4 orchestrator and 4 worker loops on separate Store handles (through
// internal/orchloop). Every instance must complete, and every history must
// be consistent: event ids 1..n without gaps, one OrchestrationStarted
// first and one terminal event last, every scheduled activity and
// sub-orchestration with exactly one completion pointing at it, and no
// completion without its scheduling event.
func TestReliabilityOrchestrations(t *testing.T) {
	requireLongTests(t)
	forEachDialect(t, func(t *testing.T, h *harness) {
		const loops, fanOut = 4, 5
		n := scaled(t, 500, 40)
		st := h.New(t, relPool())
		parent := func(c *orchloop.Ctx, input string) (string, bool, error) {
			done := true
			out := ""
			for i := range fanOut {
				r, ok, err := c.Activity("echo", fmt.Sprintf("%s/a%d", input, i))
				if err != nil {
					return "", false, err
				}
				done = done && ok
				out += r + ","
			}
			r, ok, err := c.SubOrchestration("child", input+"/sub")
			if err != nil {
				return "", false, err
			}
			return out + r, done && ok, nil
		}
		child := func(c *orchloop.Ctx, input string) (string, bool, error) { return c.Activity("echo", input) }
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		var activities atomic.Int64
		echo := func(_ context.Context, s string) (string, error) { activities.Add(1); return s, nil }
		var engines []*orchloop.Engine
		for range loops {
			engines = append(engines, &orchloop.Engine{P: h.Open(t, relPool()).Provider(), PollTimeout: 50 * time.Millisecond,
				Orchestrations: map[string]orchloop.Orchestration{"parent": parent, "child": child},
				Activities:     map[string]orchloop.Activity{"echo": echo}})
		}
		start := time.Now()
		loopCtx, stop := context.WithCancel(ctx)
		defer stop()
		g, gctx := errgroup.WithContext(loopCtx)
		for _, eng := range engines {
			g.Go(func() error { return eng.RunOrchestrator(gctx) })
			g.Go(func() error { return eng.RunWorker(gctx) })
		}
		ids := make([]string, n)
		for i := range ids {
			ids[i] = fmt.Sprintf("orch-%04d", i)
			if err := engines[i%loops].Start(ctx, ids[i], "parent", ids[i]); err != nil {
				t.Fatal(err)
			}
		}
		infos, werr := orchloop.Wait(ctx, st.ProviderAdmin(), ids, 50*time.Millisecond)
		elapsed := time.Since(start)
		stop()
		if err := g.Wait(); err != nil {
			t.Fatalf("a loop failed: %v", err)
		}
		if werr != nil {
			t.Fatal(werr)
		}
		completed := 0
		for i, info := range infos {
			want := ""
			for a := range fanOut {
				want += fmt.Sprintf("%s/a%d,", ids[i], a)
			}
			want += ids[i] + "/sub"
			if info.Status != duroxide.StatusCompleted || info.Output == nil || *info.Output != want {
				t.Errorf("%s: status %s output %v, want Completed %q", info.InstanceID, info.Status, info.Output, want)
				continue
			}
			completed++
		}
		all, err := st.ProviderAdmin().ListInstances(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(all) != 2*n {
			t.Errorf("%d instances, want %d (parents + children)", len(all), 2*n)
		}
		events := 0
		for _, inst := range all {
			hist, err := st.Provider().Read(ctx, inst)
			if err != nil {
				t.Fatalf("read %s: %v", inst, err)
			}
			events += len(hist)
			if msg := checkHistory(hist); msg != "" {
				t.Errorf("%s: %s", inst, msg)
			}
		}
		if d, err := st.ProviderAdmin().GetQueueDepths(ctx); err != nil || d.OrchestratorQueue != 0 || d.WorkerQueue != 0 {
			t.Errorf("queues after the run: %+v %v, want empty", d, err)
		}
		var turns, retries int64
		for _, eng := range engines {
			s := eng.Stats()
			turns += s.Turns
			retries += s.Retries
		}
		if want := int64(n * (fanOut + 1)); activities.Load() != want {
			t.Errorf("%d activity executions, want %d (one per scheduled activity)", activities.Load(), want)
		}
		relLogf(t, "orchestrations: %d parents x (%d activities + 1 sub-orchestration) on %d orchestrator + %d worker loops: %d/%d instances completed, %d history events checked, %d activities run, %d turns, %d loop retries, %.1fs",
			n, fanOut, loops, loops, completed+n, 2*n, events, activities.Load(), turns, retries, elapsed.Seconds())
	})
}

// checkHistory returns "" when hist is consistent, else what is wrong.
func checkHistory(hist []duroxide.Event) string {
	if len(hist) == 0 {
		return "empty history"
	}
	scheduled := map[uint64]string{}
	completions := map[uint64]int{}
	for i, ev := range hist {
		if ev.EventID != uint64(i+1) {
			return fmt.Sprintf("event %d has id %d: ids not contiguous", i, ev.EventID)
		}
		switch ev.Kind.(type) {
		case *duroxide.OrchestrationStartedEvent:
			if i != 0 {
				return fmt.Sprintf("OrchestrationStarted at position %d", i)
			}
		case *duroxide.OrchestrationCompletedEvent, *duroxide.OrchestrationFailedEvent:
			if i != len(hist)-1 {
				return fmt.Sprintf("terminal event at %d of %d", i, len(hist))
			}
		case *duroxide.ActivityScheduledEvent, *duroxide.SubOrchestrationScheduledEvent:
			scheduled[ev.EventID] = ev.Kind.EventType()
		case *duroxide.ActivityCompletedEvent, *duroxide.ActivityFailedEvent, *duroxide.SubOrchestrationCompletedEvent, *duroxide.SubOrchestrationFailedEvent:
			if ev.SourceEventID == nil {
				return fmt.Sprintf("completion %d without source", ev.EventID)
			}
			if _, ok := scheduled[*ev.SourceEventID]; !ok {
				return fmt.Sprintf("completion %d for unscheduled event %d", ev.EventID, *ev.SourceEventID)
			}
			completions[*ev.SourceEventID]++
		}
	}
	switch hist[len(hist)-1].Kind.(type) {
	case *duroxide.OrchestrationCompletedEvent, *duroxide.OrchestrationFailedEvent:
	default:
		return "last event is not terminal"
	}
	for id, kind := range scheduled {
		if completions[id] != 1 {
			return fmt.Sprintf("%s %d has %d completions, want 1", kind, id, completions[id])
		}
	}
	return ""
}

// TestReliabilityConcurrentAppendsOneSession: 16 writers on 4 Store handles
// append to the same session (batches of 1-3 messages). Afterwards every
// message is stored exactly once, sequence numbers are 1..n without gaps,
// each writer's messages keep their order, and the session row's counters
// match. The same with 4 sessions, each written by 4 writers on 4
// different handles, so one handle's coalesced flush holds appends to
// several sessions (on MariaDB one read locks all their rows).
func TestReliabilityConcurrentAppendsOneSession(t *testing.T) {
	requireLongTests(t)
	forEachDialect(t, func(t *testing.T, h *harness) {
		const writers, handles = 16, 4
		per := scaled(t, 100, 20)
		st := h.New(t, relPool())
		var ss []repo.Sessions
		for range handles {
			ss = append(ss, h.Open(t, relPool()).Sessions())
		}
		for _, nSessions := range []int{1, 4} {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			sessions := make([]uuid.UUID, nSessions)
			for i := range sessions {
				s := repo.NewSession()
				if err := st.Sessions().Save(ctx, s); err != nil {
					t.Fatal(err)
				}
				sessions[i] = s.ID
			}
			// writer w: handle w % handles, session (w / handles) % nSessions
			sessionOf := func(w int) uuid.UUID { return sessions[(w/handles)%nSessions] }
			var retries atomic.Int64
			start := time.Now()
			g, gctx := errgroup.WithContext(ctx)
			for w := range writers {
				store, sid := ss[w%handles], sessionOf(w)
				g.Go(func() error {
					var r retryCounter
					defer func() { retries.Add(r.n) }()
					for i := 0; i < per; {
						k := min(per-i, 1+(w+i)%3)
						var msgs []repo.Message
						for j := range k {
							msgs = append(msgs, repo.Message{ID: fmt.Sprintf("w%02d-m%04d", w, i+j), Role: repo.RoleUser,
								Content: []byte(fmt.Sprintf(`[{"writer":%d,"n":%d}]`, w, i+j))})
						}
						if err := r.do(gctx, func() error { _, e := store.AppendMessages(gctx, sid, msgs...); return e }); err != nil {
							return fmt.Errorf("writer %d append: %w", w, err)
						}
						i += k
					}
					return nil
				})
			}
			if err := g.Wait(); err != nil {
				t.Fatal(err)
			}
			elapsed := time.Since(start)
			stored, distinct, gaps := 0, 0, 0
			for si, sid := range sessions {
				got, err := st.Sessions().Load(ctx, sid)
				if err != nil {
					t.Fatal(err)
				}
				n := writers / nSessions * per
				if len(got.Messages) != n || got.MessageCount != int64(n) || got.LastSeq != int64(n) {
					t.Fatalf("%d sessions, session %d: %d messages, count %d, last seq %d; want %d each",
						nSessions, si, len(got.Messages), got.MessageCount, got.LastSeq, n)
				}
				seen := map[string]int64{}
				last := make([]int, writers)
				for i := range last {
					last[i] = -1
				}
				for i, m := range got.Messages {
					if m.Seq != int64(i+1) {
						gaps++
						t.Errorf("session %d: message %d has seq %d: gap or duplicate", si, i, m.Seq)
					}
					if prev, dup := seen[m.ID]; dup {
						t.Errorf("session %d: message %s stored twice (seq %d and %d)", si, m.ID, prev, m.Seq)
					}
					seen[m.ID] = m.Seq
					var w, k int
					if _, err := fmt.Sscanf(m.ID, "w%02d-m%04d", &w, &k); err != nil {
						t.Fatalf("unexpected message id %q", m.ID)
					}
					if sessionOf(w) != sid {
						t.Errorf("session %d holds writer %d's message %s", si, w, m.ID)
					}
					if k != last[w]+1 {
						t.Errorf("session %d: writer %d: message %d follows %d (order lost)", si, w, k, last[w])
					}
					last[w] = k
				}
				stored += len(got.Messages)
				distinct += len(seen)
			}
			relLogf(t, "appends: %d writers on %d handles x %d messages to %d session(s): stored %d, distinct %d, seq gaps %d, retries %d, %.1fs",
				writers, handles, per, nSessions, stored, distinct, gaps, retries.Load(), elapsed.Seconds())
		}
	})
}
