package agentstore_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"golang.org/x/sync/errgroup"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/internal/testkit"
	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/orchloop"
	"github.com/agentstore/agentstore/repo"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// The PostgreSQL restart test stops and starts a server, so it only runs
// when AGENTSTORE_PG_RESTART_TEST=1, against the server named by
// AGENTSTORE_PG_RESTART_DSN, stopped and started by the shell commands in
// AGENTSTORE_PG_STOP_CMD and AGENTSTORE_PG_START_CMD. .ci/run sets these up
// with a throwaway cluster after the main test run, and runs it a second
// time as a failover (AGENTSTORE_PG_FAULT=failover): a primary with a
// synchronous hot standby behind a multi-host DSN
// (target_session_attrs=read-write), the primary stopped (immediate) and
// the standby promoted instead of a start.
const (
	pgRestartGateEnv = "AGENTSTORE_PG_RESTART_TEST"
	pgRestartDSNEnv  = "AGENTSTORE_PG_RESTART_DSN"
	pgStopCmdEnv     = "AGENTSTORE_PG_STOP_CMD"
	pgStartCmdEnv    = "AGENTSTORE_PG_START_CMD"
)

// restartStats counts what happened to the operations of the restart run.
type restartStats struct {
	mu                 sync.Mutex
	ok, retryable      int64
	permanent          []string
	maxLatency         time.Duration
	firstOKAfterStart  time.Time
	startedAt, downAt  time.Time
	okAfterStartWanted bool
}

// record classifies one operation's outcome.
func (s *restartStats) record(op string, d time.Duration, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.maxLatency = max(s.maxLatency, d)
	switch {
	case err == nil:
		s.ok++
		if s.okAfterStartWanted && !s.startedAt.IsZero() && s.firstOKAfterStart.IsZero() {
			s.firstOKAfterStart = time.Now()
		}
	case isRetryable(err):
		s.retryable++
	default:
		s.permanent = append(s.permanent, fmt.Sprintf("%s: %v", op, err))
	}
}

// TestReliabilityPostgresRestart: producers and consumers of the session
// queue and the worker queue run on several Store handles while the
// PostgreSQL server is stopped for a few seconds and started again. While
// it is down every failing operation must fail with a retryable error
// (never a panic, never a permanent error, never longer than the per-call
// timeout plus the pool's connect timeout); the pools recover by
// themselves; afterwards every enqueue that returned success is stored and
// every item whose Complete/Ack returned success is done.
func TestReliabilityPostgresRestart(t *testing.T) {
	if os.Getenv(pgRestartGateEnv) != "1" {
		t.Skipf("restarts a PostgreSQL server: set %s=1 with %s, %s and %s (.ci/run does)", pgRestartGateEnv, pgRestartDSNEnv, pgStopCmdEnv, pgStartCmdEnv)
	}
	dsn, stopCmd, startCmd := os.Getenv(pgRestartDSNEnv), os.Getenv(pgStopCmdEnv), os.Getenv(pgStartCmdEnv)
	if dsn == "" || stopCmd == "" || startCmd == "" {
		t.Fatalf("%s=1 needs %s, %s and %s", pgRestartGateEnv, pgRestartDSNEnv, pgStopCmdEnv, pgStartCmdEnv)
	}
	const (
		producers, consumers, sessions = 3, 6, 6
		callTimeout                    = 5 * time.Second
		connectTimeout                 = 2 * time.Second
		downFor                        = 3 * time.Second
	)
	n := scaled(t, 8000, 1500)
	fault := os.Getenv("AGENTSTORE_PG_FAULT")
	if fault == "" {
		fault = "restart"
	}
	schema := "rel_" + fault + "_" + strings.ReplaceAll(uuid.NewString(), "-", "")[:12]
	pool := agentstore.DefaultPool()
	pool.MaxOpenConns, pool.ConnectTimeout = 3, connectTimeout
	open := func() *agentstore.Store {
		st, err := agentstore.Open(context.Background(), dsn, agentstore.WithSchema(schema), agentstore.WithPool(pool))
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return st
	}
	st := open()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.DB(context.Background()).Exec(`DROP SCHEMA IF EXISTS "` + schema + `" CASCADE`).Error })
	sids := make([]uuid.UUID, sessions)
	for i := range sids {
		s := repo.NewSession()
		if err := st.Sessions().Save(ctx, s); err != nil {
			t.Fatal(err)
		}
		sids[i] = s.ID
	}

	var stats restartStats
	// call runs one operation under the per-call timeout and records it.
	call := func(op string, fn func(ctx context.Context) error) error {
		cctx, ccancel := context.WithTimeout(ctx, callTimeout)
		defer ccancel()
		t0 := time.Now()
		err := fn(cctx)
		stats.record(op, time.Since(t0), err)
		return err
	}
	var mu sync.Mutex
	enqueued := map[uuid.UUID]bool{}  // session-queue enqueues that returned success
	completed := map[uuid.UUID]bool{} // Completes that returned success
	workSent := map[uint64]bool{}     // worker enqueues that returned success
	workAcked := map[uint64]bool{}    // worker acks that returned success
	var produced atomic.Int64
	// The queue load is tagged so it never mixes with the orchestrations' activities.
	loadTag := "load"
	loadOnly := duroxide.TagFilter{Mode: duroxide.TagTags, Tags: []string{loadTag}}
	prodDone := make(chan struct{})
	appended := map[string]bool{} // AppendMessages that returned success
	appendTo := repo.NewSession()
	if err := st.Sessions().Save(ctx, appendTo); err != nil {
		t.Fatal(err)
	}

	// Orchestrations run through the restart too (internal/orchloop, short
	// locks so an ack lost with the server is redone quickly). A loop that
	// stops on a permanent error is restarted and the error recorded.
	norch := scaled(t, 400, 60)
	fan := func(c *orchloop.Ctx, input string) (string, bool, error) {
		done, out := true, ""
		for i := range 3 {
			r, ok, err := c.Activity("echo", fmt.Sprintf("%s/%d", input, i))
			if err != nil {
				return "", false, err
			}
			done, out = done && ok, out+r+";"
		}
		return out, done, nil
	}
	var engineErrs []string
	var engines []*orchloop.Engine
	for range 2 {
		engines = append(engines, &orchloop.Engine{P: open().Provider(), LockTimeout: 3 * time.Second, PollTimeout: 50 * time.Millisecond,
			Orchestrations: map[string]orchloop.Orchestration{"fan": fan},
			Activities:     map[string]orchloop.Activity{"echo": func(_ context.Context, s string) (string, error) { return s, nil }}})
	}
	orchIDs := make([]string, norch)
	for i := range orchIDs {
		orchIDs[i] = fmt.Sprintf("r-%04d", i)
	}
	step := max(1, n/norch) // the producers start one orchestration every step items
	g, gctx := errgroup.WithContext(ctx)
	var prodWG sync.WaitGroup
	for p := range producers {
		st := open()
		prodWG.Add(1)
		g.Go(func() error {
			defer prodWG.Done()
			for i := p; i < n && gctx.Err() == nil; i += producers {
				if j := i / step; i%step == 0 && j < norch {
					for call("start_orchestration", func(c context.Context) error {
						return st.Provider().EnqueueForOrchestrator(c, &duroxide.StartOrchestration{Instance: orchIDs[j], Orchestration: "fan",
							Input: orchIDs[j], Version: testkit.Sp("1.0.0"), ExecutionID: 1}, 0)
					}) != nil {
						time.Sleep(20 * time.Millisecond)
					}
				}
				var it *repo.QueueItem
				for call("enqueue", func(c context.Context) (e error) {
					it, e = st.SessionQueue().Enqueue(c, sids[i%sessions], "job-"+strconv.Itoa(i), 0)
					return e
				}) != nil {
					time.Sleep(20 * time.Millisecond)
				}
				id := uint64(i)
				for call("enqueue_for_worker", func(c context.Context) error {
					return st.Provider().EnqueueForWorker(c, &duroxide.ActivityExecute{Instance: "r", ExecutionID: 1, ID: id, Name: "a", Input: "x", Tag: &loadTag})
				}) != nil {
					time.Sleep(20 * time.Millisecond)
				}
				mu.Lock()
				enqueued[it.ID], workSent[id] = true, true
				mu.Unlock()
				produced.Add(1)
			}
			return nil
		})
	}
	go func() { prodWG.Wait(); close(prodDone) }()

	var stopEngines atomic.Bool
	for _, eng := range engines {
		for _, run := range []func(context.Context) error{eng.RunOrchestrator, eng.RunWorker} {
			g.Go(func() error {
				for !stopEngines.Load() && gctx.Err() == nil {
					lctx, lcancel := context.WithCancel(gctx)
					go func() {
						for !stopEngines.Load() && lctx.Err() == nil {
							time.Sleep(20 * time.Millisecond)
						}
						lcancel()
					}()
					err := run(lctx)
					lcancel()
					if err != nil {
						mu.Lock()
						engineErrs = append(engineErrs, err.Error())
						mu.Unlock()
						time.Sleep(20 * time.Millisecond)
					}
				}
				return nil
			})
		}
	}
	{
		st := open()
		g.Go(func() error {
			for i := 0; gctx.Err() == nil; i++ {
				select {
				case <-prodDone:
					return nil
				default:
				}
				id := "msg-" + strconv.Itoa(i)
				if call("append_messages", func(c context.Context) error {
					_, e := st.Sessions().AppendMessages(c, appendTo.ID, repo.Message{ID: id, Role: repo.RoleUser, Content: []byte(`"x"`)})
					return e
				}) == nil {
					mu.Lock()
					appended[id] = true
					mu.Unlock()
				} else {
					time.Sleep(20 * time.Millisecond)
				}
			}
			return nil
		})
	}
	var stopConsumers atomic.Bool
	for c := range consumers {
		st := open()
		g.Go(func() error {
			for k := c; !stopConsumers.Load() && gctx.Err() == nil; k++ {
				sid := sids[k%sessions]
				var it *repo.QueueItem
				err := call("dequeue", func(cx context.Context) (e error) {
					it, e = st.SessionQueue().Dequeue(cx, sid, repo.DequeueParams{Lease: 2 * time.Second})
					return e
				})
				if err == nil && it != nil {
					l := repo.Lease{ItemID: it.ID, Token: *it.LeaseToken}
					if call("complete", func(cx context.Context) error { return st.SessionQueue().Complete(cx, l) }) == nil {
						mu.Lock()
						completed[it.ID] = true
						mu.Unlock()
					}
				}
				var wl *duroxide.WorkItemLease
				err = call("fetch_work_item", func(cx context.Context) (e error) {
					wl, e = st.Provider().FetchWorkItem(cx, 2*time.Second, 0, nil, loadOnly)
					return e
				})
				if err == nil && wl != nil {
					id := wl.Item.(*duroxide.ActivityExecute).ID
					if call("ack_work_item", func(cx context.Context) error { return st.Provider().AckWorkItem(cx, wl.LockToken, nil) }) == nil {
						mu.Lock()
						workAcked[id] = true
						mu.Unlock()
					}
				}
				if err != nil {
					time.Sleep(20 * time.Millisecond)
				}
			}
			return nil
		})
	}

	// Restart the server once a third of the items are produced.
	for produced.Load() < int64(n/3) {
		if gctx.Err() != nil {
			t.Fatal(gctx.Err())
		}
		time.Sleep(10 * time.Millisecond)
	}
	stats.mu.Lock()
	stats.downAt = time.Now()
	stats.mu.Unlock()
	if out, err := exec.Command("sh", "-c", stopCmd).CombinedOutput(); err != nil {
		t.Fatalf("stop server: %v\n%s", err, out)
	}
	time.Sleep(downFor) // real downtime is the point
	stats.mu.Lock()
	retryWhileDown := stats.retryable
	stats.mu.Unlock()
	if out, err := exec.Command("sh", "-c", startCmd).CombinedOutput(); err != nil {
		t.Fatalf("start server: %v\n%s", err, out)
	}
	stats.mu.Lock()
	stats.startedAt, stats.okAfterStartWanted = time.Now(), true
	stats.mu.Unlock()

	// Wait for the producers, then until nothing is left to do.
	select {
	case <-prodDone:
	case <-gctx.Done():
		t.Fatal(gctx.Err())
	}
	check := open()
	for {
		var left int64
		err := check.DB(ctx).Table(check.Table(models.TableQueue)).Where("status <> ?", "completed").Count(&left).Error
		var wleft int64
		if err == nil {
			err = check.DB(ctx).Table(check.Table(models.TableWorkerQueue)).Count(&wleft).Error
		}
		if err == nil && left == 0 && wleft == 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("not drained: %d queue items, %d worker items left (%v)", left, wleft, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	wctx, wcancel := context.WithTimeout(ctx, 3*time.Minute)
	infos, werr := orchloop.Wait(wctx, check.ProviderAdmin(), orchIDs, 50*time.Millisecond)
	wcancel()
	stopConsumers.Store(true)
	stopEngines.Store(true)
	if werr != nil {
		t.Fatalf("orchestrations did not finish after the restart: %v", werr)
	}
	orchDone, orchBad := 0, 0
	for _, info := range infos {
		if info.Status == duroxide.StatusCompleted {
			orchDone++
		}
		hist, err := check.Provider().Read(ctx, info.InstanceID)
		if err != nil {
			t.Fatal(err)
		}
		if msg := checkHistory(hist); msg != "" || info.Status != duroxide.StatusCompleted {
			orchBad++
			t.Errorf("%s after the restart: %s %s", info.InstanceID, info.Status, msg)
		}
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}

	// Everything acknowledged is there.
	type row struct {
		ID     uuid.UUID
		Status string
	}
	var rows []row
	if err := check.DB(ctx).Table(check.Table(models.TableQueue)).Select("id, status").Scan(&rows).Error; err != nil {
		t.Fatal(err)
	}
	status := map[uuid.UUID]string{}
	for _, r := range rows {
		status[r.ID] = r.Status
	}
	lostEnq, lostDone := 0, 0
	for id := range enqueued {
		if _, ok := status[id]; !ok {
			lostEnq++
		}
	}
	for id := range completed {
		if status[id] != "completed" {
			lostDone++
		}
	}
	got, err := check.Sessions().Load(ctx, appendTo.ID)
	if err != nil {
		t.Fatal(err)
	}
	lostMsgs, inSession := 0, map[string]bool{}
	for i, m := range got.Messages {
		inSession[m.ID] = true
		if m.Seq != int64(i+1) {
			t.Errorf("message %d has seq %d: gap after the restart", i, m.Seq)
		}
	}
	for id := range appended {
		if !inSession[id] {
			lostMsgs++
		}
	}
	if lostMsgs > 0 {
		t.Errorf("%d acknowledged appends lost", lostMsgs)
	}
	if lostEnq+lostDone > 0 {
		t.Errorf("acknowledged work lost: %d enqueued items missing, %d completed items not completed", lostEnq, lostDone)
	}
	if len(enqueued) != n || len(workSent) != n {
		t.Errorf("%d/%d enqueues acknowledged, want %d", len(enqueued), len(workSent), n)
	}
	stats.mu.Lock()
	defer stats.mu.Unlock()
	if len(stats.permanent) > 0 {
		t.Errorf("%d operations failed with a permanent (non-retryable) error, e.g. %s", len(stats.permanent), strings.Join(stats.permanent[:min(5, len(stats.permanent))], "; "))
	}
	if limit := callTimeout + connectTimeout + time.Second; stats.maxLatency > limit {
		t.Errorf("an operation took %s, longer than the per-call timeout %s + connect timeout %s (a hang)", stats.maxLatency, callTimeout, connectTimeout)
	}
	if stats.retryable == 0 {
		t.Errorf("no operation failed while the server was down: the restart did not hit the load")
	}
	if stats.firstOKAfterStart.IsZero() {
		t.Errorf("no operation succeeded after the restart")
	}
	if len(workAcked) == 0 || len(completed) == 0 {
		t.Errorf("nothing acknowledged (%d completes, %d acks)", len(completed), len(workAcked))
	}
	extra := int64(len(rows)) - int64(n)
	relLogf(t, "PostgreSQL %s (down %s at %d/%d produced): ops ok %d, retryable failures %d (while down: %d), permanent failures %d, max op latency %s, pool recovered %.2fs after start; enqueued %d+%d acknowledged, lost %d; completes acknowledged %d, not completed 0; duplicate enqueues (ambiguous commits) %d; unique work items acked %d; appends acknowledged %d, lost %d, seq gap-free; orchestrations %d/%d completed with consistent histories (%d bad), orchestration-loop retries %d, stops %d %v",
		fault, downFor, n/3, n, stats.ok, stats.retryable, retryWhileDown, len(stats.permanent), stats.maxLatency.Round(time.Millisecond),
		stats.firstOKAfterStart.Sub(stats.startedAt).Seconds(), len(enqueued), len(workSent), lostEnq+lostDone, len(completed), extra, len(workAcked), len(appended), lostMsgs, orchDone, norch, orchBad, engineRetries(engines), len(engineErrs), engineErrs[:min(3, len(engineErrs))])
}

func engineRetries(es []*orchloop.Engine) int64 {
	var n int64
	for _, e := range es {
		n += e.Stats().Retries
	}
	return n
}
