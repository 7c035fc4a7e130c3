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

// serverFault is how one server-fault run breaks the server under load.
type serverFault struct {
	name string // "restart", "failover", "autofailover": the schema prefix and the figure line
	dsn  string // the DSN every Store of the run opens (a multi-host one for the failovers)
	// fail is the shell command that stops or crashes the server (the
	// primary); it runs once a third of the items are produced and returns
	// once the server is down.
	fail string
	// recover is the shell command run downFor after fail (start the
	// server, promote the standby); "" when a failover manager recovers on
	// its own.
	recover string
	downFor time.Duration
	// newPrimary: after the fault the DSN must reach another server than
	// before (a failover happened).
	newPrimary bool
}

// faultStats counts what happened to the operations of a server-fault run.
type faultStats struct {
	mu            sync.Mutex
	ok, retryable int64
	permanent     []string
	maxLatency    time.Duration
	// lastOK and longestStall: the longest time between two successful
	// calls (any operation, any Store).
	lastOK       time.Time
	longestStall time.Duration
	// faultAt: when the fault command started; faultDone, recoverDone: when
	// the fault and recover commands returned (recoverDone = faultDone when
	// a manager recovers on its own).
	faultAt, faultDone, recoverDone time.Time
	// firstOKAfterFault, firstOKAfterRecover: the first success of a call
	// that started after faultDone, after recoverDone.
	firstOKAfterFault, firstOKAfterRecover time.Time
}

// record classifies one operation's outcome (started at t0).
func (s *faultStats) record(op string, t0 time.Time, err error) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.maxLatency = max(s.maxLatency, now.Sub(t0))
	switch {
	case err == nil:
		s.ok++
		if !s.lastOK.IsZero() {
			s.longestStall = max(s.longestStall, now.Sub(s.lastOK))
		}
		s.lastOK = now
		if !s.faultDone.IsZero() && !t0.Before(s.faultDone) && s.firstOKAfterFault.IsZero() {
			s.firstOKAfterFault = now
		}
		if !s.recoverDone.IsZero() && !t0.Before(s.recoverDone) && s.firstOKAfterRecover.IsZero() {
			s.firstOKAfterRecover = now
		}
	case isRetryable(err):
		s.retryable++
	default:
		s.permanent = append(s.permanent, fmt.Sprintf("%s: %v", op, err))
	}
}

// serverAt names the server a Store's connection reaches: its port and
// whether it is a primary or a standby.
func serverAt(ctx context.Context, st *agentstore.Store) string {
	var port int
	var standby bool
	if err := st.DB(ctx).Raw(`SELECT inet_server_port(), pg_is_in_recovery()`).Row().Scan(&port, &standby); err != nil {
		return "unknown (" + err.Error() + ")"
	}
	if standby {
		return fmt.Sprintf("port %d (standby)", port)
	}
	return fmt.Sprintf("port %d (primary)", port)
}

// TestReliabilityPostgresRestart: producers and consumers of the session
// queue and the worker queue run on several Store handles while the
// PostgreSQL server is stopped for a few seconds and started again (or,
// with AGENTSTORE_PG_FAULT=failover, the primary crashed and its standby
// promoted); see runServerFaultLoad for what is checked.
func TestReliabilityPostgresRestart(t *testing.T) {
	if os.Getenv(pgRestartGateEnv) != "1" {
		t.Skipf("restarts a PostgreSQL server: set %s=1 with %s, %s and %s (.ci/run does)", pgRestartGateEnv, pgRestartDSNEnv, pgStopCmdEnv, pgStartCmdEnv)
	}
	dsn, stopCmd, startCmd := os.Getenv(pgRestartDSNEnv), os.Getenv(pgStopCmdEnv), os.Getenv(pgStartCmdEnv)
	if dsn == "" || stopCmd == "" || startCmd == "" {
		t.Fatalf("%s=1 needs %s, %s and %s", pgRestartGateEnv, pgRestartDSNEnv, pgStopCmdEnv, pgStartCmdEnv)
	}
	fault := os.Getenv("AGENTSTORE_PG_FAULT")
	if fault == "" {
		fault = "restart"
	}
	runServerFaultLoad(t, serverFault{name: fault, dsn: dsn, fail: stopCmd, recover: startCmd, downFor: 3 * time.Second, newPrimary: fault == "failover"})
}

// runServerFaultLoad runs the server-fault load against f.dsn and breaks
// the server with f once a third of the items are produced: 3 producers
// (session queue + tagged worker items, and a new orchestration every 20
// items), 6 consumers, 1 appender and 2 orchloop engines, each on its own
// Store handle (3 connections, 2 s connect timeout, 5 s per call), never
// reopened. While the server is down every failing operation must fail
// with a retryable error (never a panic, never a permanent error, never
// longer than the per-call timeout plus the pool's connect timeout); the
// pools recover by themselves; afterwards every enqueue that returned
// success is stored, every item whose Complete/Ack returned success is done
// and no item's Complete/Ack succeeded twice, every acknowledged append is
// there, and every orchestration completes with a consistent history. It
// prints the figures on one RELIABILITY line.
func runServerFaultLoad(t *testing.T, f serverFault) {
	t.Helper()
	const (
		producers, consumers, sessions = 3, 6, 6
		callTimeout                    = 5 * time.Second
		connectTimeout                 = 2 * time.Second
		// recoverWithin: how long after the fault some call must succeed
		// again (a failover manager takes a few seconds to decide).
		recoverWithin = 2 * time.Minute
	)
	n := scaled(t, 8000, 1500)
	schema := "rel_" + f.name + "_" + strings.ReplaceAll(uuid.NewString(), "-", "")[:12]
	pool := agentstore.DefaultPool()
	pool.MaxOpenConns, pool.ConnectTimeout = 3, connectTimeout
	open := func() *agentstore.Store {
		st, err := agentstore.Open(context.Background(), f.dsn, agentstore.WithSchema(schema), agentstore.WithPool(pool))
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
	serverBefore := serverAt(ctx, st)
	sids := make([]uuid.UUID, sessions)
	for i := range sids {
		s := repo.NewSession()
		if err := st.Sessions().Save(ctx, s); err != nil {
			t.Fatal(err)
		}
		sids[i] = s.ID
	}

	var stats faultStats
	// call runs one operation under the per-call timeout and records it.
	call := func(op string, fn func(ctx context.Context) error) error {
		cctx, ccancel := context.WithTimeout(ctx, callTimeout)
		defer ccancel()
		t0 := time.Now()
		err := fn(cctx)
		stats.record(op, t0, err)
		return err
	}
	var mu sync.Mutex
	enqueued := map[uuid.UUID]bool{} // session-queue enqueues that returned success
	completed := map[uuid.UUID]int{} // Completes that returned success, per item
	workSent := map[uint64]bool{}    // worker enqueues that returned success
	workAcked := map[uint64]int{}    // worker acks that returned success, per item
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

	// Orchestrations run through the fault too (internal/orchloop, short
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
				// Each attempt has its own activity id (item << 8 | attempt):
				// an attempt that failed but committed (its reply lost
				// with the server) is then another item, not a second
				// ack of this one.
				var id uint64
				for attempt := 0; ; attempt++ {
					id = uint64(i)<<8 | uint64(min(attempt, 255))
					if call("enqueue_for_worker", func(c context.Context) error {
						return st.Provider().EnqueueForWorker(c, &duroxide.ActivityExecute{Instance: "r", ExecutionID: 1, ID: id, Name: "a", Input: "x", Tag: &loadTag})
					}) == nil {
						break
					}
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
						completed[it.ID]++
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
						workAcked[id]++
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

	// Break the server once a third of the items are produced.
	for produced.Load() < int64(n/3) {
		if gctx.Err() != nil {
			t.Fatal(gctx.Err())
		}
		time.Sleep(10 * time.Millisecond)
	}
	stats.mu.Lock()
	stats.faultAt = time.Now()
	stats.mu.Unlock()
	faultOut, err := exec.Command("sh", "-c", f.fail).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: fault command: %v\n%s", f.name, err, faultOut)
	}
	stats.mu.Lock()
	stats.faultDone = time.Now()
	stats.mu.Unlock()
	var retryWhileDown int64
	if f.recover != "" {
		time.Sleep(f.downFor) // real downtime is the point
		stats.mu.Lock()
		retryWhileDown = stats.retryable
		stats.mu.Unlock()
		if out, err := exec.Command("sh", "-c", f.recover).CombinedOutput(); err != nil {
			t.Fatalf("%s: recover command: %v\n%s", f.name, err, out)
		}
	}
	stats.mu.Lock()
	stats.recoverDone = time.Now()
	stats.mu.Unlock()
	// Some call must succeed again within recoverWithin (else the server,
	// or the failover manager, never came back: say so instead of waiting
	// for the test's timeout).
	for deadline := time.Now().Add(recoverWithin); ; time.Sleep(50 * time.Millisecond) {
		stats.mu.Lock()
		back := !stats.firstOKAfterFault.IsZero()
		if back && f.recover == "" {
			retryWhileDown = stats.retryable
		}
		stats.mu.Unlock()
		if back {
			break
		}
		if time.Now().After(deadline) || gctx.Err() != nil {
			t.Fatalf("%s: no call succeeded within %s after the fault (%s)", f.name, recoverWithin, strings.TrimSpace(string(faultOut)))
		}
	}

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
		t.Fatalf("orchestrations did not finish after the %s: %v", f.name, werr)
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
			t.Errorf("%s after the %s: %s %s", info.InstanceID, f.name, info.Status, msg)
		}
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	serverAfter := serverAt(ctx, check)
	if f.newPrimary && (serverAfter == serverBefore || !strings.HasSuffix(serverAfter, "(primary)")) {
		t.Errorf("%s: the DSN reached %s before and %s after: no new primary", f.name, serverBefore, serverAfter)
	}

	// Everything acknowledged is there, and acknowledged once.
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
	lostEnq, lostDone, dupDone, dupAcks := 0, 0, 0, 0
	for id := range enqueued {
		if _, ok := status[id]; !ok {
			lostEnq++
		}
	}
	for id, k := range completed {
		if status[id] != "completed" {
			lostDone++
		}
		dupDone += k - 1
	}
	extraWork := 0 // worker items from attempts that failed but committed
	for id, k := range workAcked {
		dupAcks += k - 1
		if !workSent[id] {
			extraWork++
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
			t.Errorf("message %d has seq %d: gap after the %s", i, m.Seq, f.name)
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
	if dupDone+dupAcks > 0 {
		t.Errorf("acknowledged twice: %d session-queue items completed twice, %d worker items acked twice", dupDone, dupAcks)
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
		t.Errorf("no operation failed while the server was down: the %s did not hit the load", f.name)
	}
	if stats.firstOKAfterRecover.IsZero() {
		t.Errorf("no operation succeeded after the %s", f.name)
	}
	if len(workAcked) == 0 || len(completed) == 0 {
		t.Errorf("nothing acknowledged (%d completes, %d acks)", len(completed), len(workAcked))
	}
	// The first success after the fault is counted from when the fault
	// command returned (the server is down then: the command itself may
	// take a while on a busy machine).
	recovery := fmt.Sprintf("first success %.2fs after the fault command returned (it took %.2fs)",
		stats.firstOKAfterFault.Sub(stats.faultDone).Seconds(), stats.faultDone.Sub(stats.faultAt).Seconds())
	down := "recovered by its manager"
	if f.recover != "" {
		down = "down " + f.downFor.String()
		if !stats.firstOKAfterRecover.IsZero() {
			recovery += fmt.Sprintf(", %.2fs after the recovery command returned", stats.firstOKAfterRecover.Sub(stats.recoverDone).Seconds())
		}
	}
	extra := int64(len(rows)) - int64(n)
	relLogf(t, "PostgreSQL %s (%s; fault at %d/%d produced: %s): Stores never reopened; server before %s, after %s; ops ok %d, retryable failures %d (while down: %d), permanent failures %d, max op latency %s, longest stall (no call succeeding) %s, %s; enqueued %d+%d acknowledged, lost %d; completes acknowledged %d, not completed 0, completed or acked twice %d; duplicate enqueues (ambiguous commits) %d session queue, %d worker queue; unique work items acked %d; appends acknowledged %d, lost %d, seq gap-free; orchestrations %d/%d completed with consistent histories (%d bad), orchestration-loop retries %d, stops %d %v",
		f.name, down, n/3, n, strings.Join(strings.Fields(string(faultOut)), " "), serverBefore, serverAfter, stats.ok, stats.retryable, retryWhileDown, len(stats.permanent), stats.maxLatency.Round(time.Millisecond),
		stats.longestStall.Round(100*time.Millisecond), recovery,
		len(enqueued), len(workSent), lostEnq+lostDone, len(completed), dupDone+dupAcks, extra, extraWork, len(workAcked), len(appended), lostMsgs, orchDone, norch, orchBad, engineRetries(engines), len(engineErrs), engineErrs[:min(3, len(engineErrs))])
}

func engineRetries(es []*orchloop.Engine) int64 {
	var n int64
	for _, e := range es {
		n += e.Stats().Retries
	}
	return n
}
