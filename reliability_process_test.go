package agentstore_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/internal/testkit"
	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// The multi-process tests re-execute the test binary: the child runs
// TestReliabilityHelperProcess with relHelperEnv naming its role and
// relHelperArgsEnv carrying its parameters as JSON. It reports on stdout
// with lines starting with "HELPER ".
const (
	relHelperEnv     = "AGENTSTORE_RELIABILITY_HELPER"
	relHelperArgsEnv = "AGENTSTORE_RELIABILITY_HELPER_ARGS"
)

// helperArgs are the parameters of a child process.
type helperArgs struct {
	DSN     string    `json:"dsn"`
	Schema  string    `json:"schema"`
	Session uuid.UUID `json:"session"`
	Queue   uuid.UUID `json:"queue"`
	Worker  int       `json:"worker"`
	N       int       `json:"n"`
	LeaseMS int64     `json:"lease_ms"`
}

// heldWork is what a "hold" child reports it holds.
type heldWork struct {
	Leases    []repo.Lease `json:"leases"`
	WorkLocks []string     `json:"work_locks"`
	OrchLock  string       `json:"orch_lock"`
	OrchInst  string       `json:"orch_instance"`
}

// mpResult is what a "sqlite-writer" child reports.
type mpResult struct {
	Appends, Completes, Acks, Orchs int
}

// TestReliabilityHelperProcess is not a test: it is the child process of
// the SIGKILL and multi-process SQLite tests and skips when run normally.
func TestReliabilityHelperProcess(t *testing.T) {
	role := os.Getenv(relHelperEnv)
	if role == "" {
		t.Skip("child process of TestReliabilityKill* / TestReliabilitySQLiteMultiProcess")
	}
	var a helperArgs
	if err := json.Unmarshal([]byte(os.Getenv(relHelperArgsEnv)), &a); err != nil {
		fmt.Printf("HELPER ERR bad args: %v\n", err)
		os.Exit(3)
	}
	ctx := context.Background()
	var opts []agentstore.Option
	if a.Schema != "" {
		opts = append(opts, agentstore.WithSchema(a.Schema))
	}
	st, err := agentstore.Open(ctx, a.DSN, opts...)
	if err != nil {
		fmt.Printf("HELPER ERR open: %v\n", err)
		os.Exit(3)
	}
	fail := func(what string, err error) {
		fmt.Printf("HELPER ERR %s: %v (locked=%v)\n", what, err, isLockedErr(err))
		os.Exit(4)
	}
	switch role {
	case "hold":
		lease := time.Duration(a.LeaseMS) * time.Millisecond
		var held heldWork
		for range a.N {
			it, err := st.SessionQueue().Dequeue(ctx, a.Session, repo.DequeueParams{Owner: "doomed", Lease: lease})
			if err != nil || it == nil {
				fail("dequeue", fmt.Errorf("item %v: %w", it, err))
			}
			held.Leases = append(held.Leases, repo.Lease{ItemID: it.ID, Token: *it.LeaseToken, Until: *it.LeasedUntil})
			l, err := st.Provider().FetchWorkItem(ctx, lease, 0, nil, duroxide.TagFilter{})
			if err != nil || l == nil {
				fail("fetch work", fmt.Errorf("lease %v: %w", l, err))
			}
			held.WorkLocks = append(held.WorkLocks, l.LockToken)
		}
		it, err := st.Provider().FetchOrchestrationItem(ctx, lease, 0, nil)
		if err != nil || it == nil {
			fail("fetch orchestration", fmt.Errorf("item %v: %w", it, err))
		}
		held.OrchLock, held.OrchInst = it.LockToken, it.Instance
		b, _ := json.Marshal(held)
		fmt.Printf("HELPER HELD %s\n", b)
		select {} // wait for SIGKILL
	case "churn":
		// Write until killed: 3-message appends and work acks that enqueue a completion.
		p := st.Provider()
		for i := 0; ; i++ {
			var msgs []repo.Message
			for j := range 3 {
				msgs = append(msgs, repo.Message{ID: fmt.Sprintf("c%d-%05d-%d", os.Getpid(), i, j), Role: repo.RoleUser, Content: []byte(`"churn"`)})
			}
			if _, err := st.Sessions().AppendMessages(ctx, a.Session, msgs...); err != nil {
				fail("append", err)
			}
			l, err := p.FetchWorkItem(ctx, time.Minute, 0, nil, duroxide.TagFilter{})
			if err != nil {
				fail("fetch work", err)
			}
			if l != nil {
				ae := l.Item.(*duroxide.ActivityExecute)
				if err := p.AckWorkItem(ctx, l.LockToken, &duroxide.ActivityCompleted{Instance: ae.Instance, ExecutionID: 1, ID: ae.ID, Result: "r"}); err != nil {
					fail("ack work", err)
				}
			}
			if i == 2 {
				fmt.Println("HELPER RUNNING")
			}
		}
	case "sqlite-writer":
		var r mpResult
		p := st.Provider()
		for i := range a.N {
			tag := fmt.Sprintf("p%d-%04d", a.Worker, i)
			if _, err := st.Sessions().AppendMessages(ctx, a.Session, repo.Message{ID: tag, Role: repo.RoleUser, Content: []byte(`"` + tag + `"`)}); err != nil {
				fail("append", err)
			}
			r.Appends++
			if _, err := st.SessionQueue().Enqueue(ctx, a.Queue, tag, 0); err != nil {
				fail("enqueue", err)
			}
			it, err := st.SessionQueue().Dequeue(ctx, a.Queue, repo.DequeueParams{Owner: tag, Lease: time.Hour})
			if err != nil {
				fail("dequeue", err)
			}
			if it != nil {
				if err := st.SessionQueue().Complete(ctx, repo.Lease{ItemID: it.ID, Token: *it.LeaseToken}); err != nil {
					fail("complete", err)
				}
				r.Completes++
			}
			if err := p.EnqueueForWorker(ctx, &duroxide.ActivityExecute{Instance: "mp", ExecutionID: 1, ID: uint64(a.Worker*1_000_000 + i), Name: "a", Input: tag}); err != nil {
				fail("enqueue work", err)
			}
			l, err := p.FetchWorkItem(ctx, time.Hour, 0, nil, duroxide.TagFilter{})
			if err != nil {
				fail("fetch work", err)
			}
			if l != nil {
				if err := p.AckWorkItem(ctx, l.LockToken, nil); err != nil {
					fail("ack work", err)
				}
				r.Acks++
			}
			if err := p.EnqueueForOrchestrator(ctx, testkit.StartItem("mp-"+tag, nil), 0); err != nil {
				fail("start orchestration", err)
			}
			oi, err := p.FetchOrchestrationItem(ctx, time.Hour, 0, nil)
			if err != nil {
				fail("fetch orchestration", err)
			}
			if oi != nil {
				if err := p.AckOrchestrationItem(ctx, oi.LockToken, testkit.CompleteTurn(oi)); err != nil {
					fail("ack orchestration", err)
				}
				r.Orchs++
			}
		}
		b, _ := json.Marshal(r)
		fmt.Printf("HELPER DONE %s\n", b)
		os.Exit(0)
	}
	fmt.Printf("HELPER ERR unknown role %q\n", role)
	os.Exit(3)
}

// isLockedErr reports whether err is SQLite's "database is locked" / busy.
func isLockedErr(err error) bool {
	if err == nil {
		return false
	}
	s := strings.ToLower(err.Error())
	return strings.Contains(s, "database is locked") || strings.Contains(s, "sqlite_busy") || strings.Contains(s, "database table is locked")
}

// helperProc is a running child process.
type helperProc struct {
	cmd   *exec.Cmd
	lines chan string
	mu    sync.Mutex
	out   strings.Builder
}

// startHelper starts the test binary as a child in role with args.
func startHelper(t *testing.T, role string, a helperArgs) *helperProc {
	t.Helper()
	b, _ := json.Marshal(a)
	cmd := exec.Command(os.Args[0], "-test.run=^TestReliabilityHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), relHelperEnv+"="+role, relHelperArgsEnv+"="+string(b))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatalf("start helper: %v", err)
	}
	hp := &helperProc{cmd: cmd, lines: make(chan string, 16)}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	go func() {
		defer close(hp.lines)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			hp.mu.Lock()
			hp.out.WriteString(line + "\n")
			hp.mu.Unlock()
			if strings.HasPrefix(line, "HELPER ") {
				hp.lines <- strings.TrimPrefix(line, "HELPER ")
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	return hp
}

// next waits for the child's next report line.
func (hp *helperProc) next(t *testing.T, timeout time.Duration) string {
	t.Helper()
	select {
	case l, ok := <-hp.lines:
		if !ok {
			t.Fatalf("helper exited without a report; output:\n%s", hp.output())
		}
		return l
	case <-time.After(timeout):
		t.Fatalf("helper silent for %s; output:\n%s", timeout, hp.output())
	}
	return ""
}

func (hp *helperProc) output() string {
	hp.mu.Lock()
	defer hp.mu.Unlock()
	return hp.out.String()
}

// TestReliabilityKillConsumerProcess: a child process dequeues session-queue
// items, peek-locks worker items and locks an orchestration instance, then
// is killed with SIGKILL. While its leases live nobody else gets the work;
// once they expired (a later clock on another Store handle) the work is
// handed out again with attempt counts raised to 2, the dead process's
// tokens are refused, and after completing everything nothing is missing.
func TestReliabilityKillConsumerProcess(t *testing.T) {
	requireLongTests(t)
	forEachDialect(t, func(t *testing.T, h *harness) {
		const n = 3
		const lease = 30 * time.Second // long: the takeover uses a later clock, not real waiting
		ctx := context.Background()
		st := h.New(t)
		sess := repo.NewSession()
		if err := st.Sessions().Save(ctx, sess); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if _, err := st.SessionQueue().Enqueue(ctx, sess.ID, "job-"+strconv.Itoa(i), 0); err != nil {
				t.Fatal(err)
			}
			if err := st.Provider().EnqueueForWorker(ctx, &duroxide.ActivityExecute{Instance: "victim", ExecutionID: 1, ID: uint64(i + 1), Name: "a", Input: "in"}); err != nil {
				t.Fatal(err)
			}
		}
		if err := st.Provider().EnqueueForOrchestrator(ctx, testkit.StartItem("victim", nil), 0); err != nil {
			t.Fatal(err)
		}

		child := startHelper(t, "hold", helperArgs{DSN: h.DSN, Schema: h.Schema, Session: sess.ID, N: n, LeaseMS: lease.Milliseconds()})
		line := child.next(t, 2*time.Minute)
		held, ok := strings.CutPrefix(line, "HELD ")
		if !ok {
			t.Fatalf("helper: %s\noutput:\n%s", line, child.output())
		}
		var hw heldWork
		if err := json.Unmarshal([]byte(held), &hw); err != nil {
			t.Fatal(err)
		}
		if err := child.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		werr := child.cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(werr, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("child did not die of SIGKILL: %v", werr)
		}
		killedAt := time.Now()

		// While the dead process's leases live, nobody gets the work.
		if it, err := st.SessionQueue().Dequeue(ctx, sess.ID, repo.DequeueParams{}); err != nil || it != nil {
			t.Fatalf("dequeue during the dead lease: %v %v, want nothing", it, err)
		}
		if l, err := st.Provider().FetchWorkItem(ctx, time.Minute, 0, nil, duroxide.TagFilter{}); err != nil || l != nil {
			t.Fatalf("worker fetch during the dead lock: %v %v, want nothing", l, err)
		}
		if it, err := st.Provider().FetchOrchestrationItem(ctx, time.Minute, 0, nil); err != nil || it != nil {
			t.Fatalf("orchestration fetch during the dead lock: %v %v, want nothing", it, err)
		}
		if time.Since(killedAt) > lease {
			t.Fatalf("checks took longer than the lease (%s); the machine is too slow for this test", lease)
		}

		// Another Store handle whose clock is past the lease timeout takes over.
		later := h.Open(t, agentstore.WithClock(func() time.Time { return time.Now().Add(lease + time.Second) }))
		q, p := later.SessionQueue(), later.Provider()
		for _, l := range hw.Leases {
			if err := q.Complete(ctx, l); !errors.Is(err, agentstore.ErrLockLost) {
				t.Fatalf("complete with the dead process's expired lease: %v, want ErrLockLost", err)
			}
		}
		redone := 0
		for {
			it, err := q.Dequeue(ctx, sess.ID, repo.DequeueParams{Owner: "survivor", Lease: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			if it == nil {
				break
			}
			if it.Attempts != 2 {
				t.Errorf("queue item %s: attempts %d after the takeover, want 2", it.ID, it.Attempts)
			}
			if err := q.Complete(ctx, repo.Lease{ItemID: it.ID, Token: *it.LeaseToken}); err != nil {
				t.Fatal(err)
			}
			redone++
		}
		for _, tok := range hw.WorkLocks {
			if err := p.AckWorkItem(ctx, tok, nil); !errors.Is(err, agentstore.ErrInvalidLockToken) {
				t.Fatalf("ack with the dead process's expired work lock: %v, want ErrInvalidLockToken", err)
			}
		}
		reworked := 0
		for {
			l, err := p.FetchWorkItem(ctx, time.Minute, 0, nil, duroxide.TagFilter{})
			if err != nil {
				t.Fatal(err)
			}
			if l == nil {
				break
			}
			if l.AttemptCount != 2 {
				t.Errorf("work item: attempt %d after the takeover, want 2", l.AttemptCount)
			}
			if err := p.AckWorkItem(ctx, l.LockToken, nil); err != nil {
				t.Fatal(err)
			}
			reworked++
		}
		if err := p.AckOrchestrationItem(ctx, hw.OrchLock, testkit.CompleteTurn(&duroxide.OrchestrationItem{Instance: hw.OrchInst})); !errors.Is(err, agentstore.ErrInvalidLockToken) {
			t.Fatalf("ack with the dead process's expired instance lock: %v, want ErrInvalidLockToken", err)
		}
		oi, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		if err != nil || oi == nil || oi.Instance != "victim" {
			t.Fatalf("orchestration takeover: %v %v, want instance victim", oi, err)
		}
		if oi.AttemptCount != 2 {
			t.Errorf("orchestration item: attempt %d after the takeover, want 2", oi.AttemptCount)
		}
		if err := p.AckOrchestrationItem(ctx, oi.LockToken, testkit.CompleteTurn(oi)); err != nil {
			t.Fatal(err)
		}
		if redone != n || reworked != n {
			t.Fatalf("taken over %d queue items and %d work items, want %d each", redone, reworked, n)
		}
		if got := tableCount(t, st, models.TableQueue, "status = ?", "completed"); got != n {
			t.Fatalf("%d queue items completed, want %d", got, n)
		}
		if got := tableCount(t, st, models.TableWorkerQueue, ""); got != 0 {
			t.Fatalf("%d worker items left, want 0", got)
		}
		info, err := st.ProviderAdmin().GetInstanceInfo(ctx, "victim")
		if err != nil || info.Status != duroxide.StatusCompleted {
			t.Fatalf("victim: %+v %v, want Completed", info, err)
		}
		relLogf(t, "SIGKILL: child held %d queue leases, %d work locks, 1 instance lock; after expiry %d+%d+1 taken over with attempt 2, dead tokens refused %d/%d, lost 0",
			n, n, redone, reworked, 2*n+1, 2*n+1)
	})
}

// TestReliabilitySQLiteMultiProcess: several OS processes write the same
// SQLite file at once — appends to one session, session-queue
// enqueue/dequeue/complete, worker enqueue/fetch/ack and one-turn
// orchestrations. No error (in particular no "database is locked") may
// reach a caller, and the totals must add up.
func TestReliabilitySQLiteMultiProcess(t *testing.T) {
	requireLongTests(t)
	const procs = 4
	n := scaled(t, 200, 30)
	h := newHarness(t, agentstore.SQLite)
	st := h.New(t)
	ctx := context.Background()
	sess, queue := repo.NewSession(), repo.NewSession()
	for _, s := range []*repo.Session{sess, queue} {
		if err := st.Sessions().Save(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	var children []*helperProc
	for w := range procs {
		children = append(children, startHelper(t, "sqlite-writer", helperArgs{DSN: h.DSN, Session: sess.ID, Queue: queue.ID, Worker: w, N: n}))
	}
	var total mpResult
	for w, c := range children {
		line := c.next(t, 5*time.Minute)
		res, ok := strings.CutPrefix(line, "DONE ")
		if !ok {
			t.Fatalf("process %d: %s", w, line)
		}
		var r mpResult
		if err := json.Unmarshal([]byte(res), &r); err != nil {
			t.Fatal(err)
		}
		if err := c.cmd.Wait(); err != nil {
			t.Fatalf("process %d: %v\n%s", w, err, c.output())
		}
		total.Appends += r.Appends
		total.Completes += r.Completes
		total.Acks += r.Acks
		total.Orchs += r.Orchs
	}
	elapsed := time.Since(start)
	// Drain what the processes left for each other.
	for {
		it, err := st.SessionQueue().Dequeue(ctx, queue.ID, repo.DequeueParams{})
		if err != nil {
			t.Fatal(err)
		}
		if it == nil {
			break
		}
		if err := st.SessionQueue().Complete(ctx, repo.Lease{ItemID: it.ID, Token: *it.LeaseToken}); err != nil {
			t.Fatal(err)
		}
		total.Completes++
	}
	for {
		l, err := st.Provider().FetchWorkItem(ctx, time.Minute, 0, nil, duroxide.TagFilter{})
		if err != nil {
			t.Fatal(err)
		}
		if l == nil {
			break
		}
		if err := st.Provider().AckWorkItem(ctx, l.LockToken, nil); err != nil {
			t.Fatal(err)
		}
		total.Acks++
	}
	for {
		oi, err := st.Provider().FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		if oi == nil {
			break
		}
		if err := st.Provider().AckOrchestrationItem(ctx, oi.LockToken, testkit.CompleteTurn(oi)); err != nil {
			t.Fatal(err)
		}
		total.Orchs++
	}
	want := procs * n
	got, err := st.Sessions().Load(ctx, sess.ID)
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range got.Messages {
		if m.Seq != int64(i+1) {
			t.Fatalf("message %d has seq %d", i, m.Seq)
		}
	}
	if len(got.Messages) != want || total.Appends != want {
		t.Errorf("%d messages stored, %d appends reported, want %d", len(got.Messages), total.Appends, want)
	}
	if c := tableCount(t, st, models.TableQueue, "status = ?", "completed"); c != int64(want) || total.Completes != want {
		t.Errorf("%d queue items completed (%d reported), want %d", c, total.Completes, want)
	}
	if c := tableCount(t, st, models.TableWorkerQueue, ""); c != 0 || total.Acks != want {
		t.Errorf("%d worker items left, %d acked, want 0 and %d", c, total.Acks, want)
	}
	done, err := st.ProviderAdmin().ListInstancesByStatus(ctx, duroxide.StatusCompleted)
	if err != nil || len(done) != want || total.Orchs != want {
		t.Errorf("%d instances completed (%v), %d turns acked, want %d", len(done), err, total.Orchs, want)
	}
	relLogf(t, "SQLite multi-process: %d processes x %d rounds on one file: %d appends (seq gap-free), %d queue completes, %d work acks, %d orchestrations; caller-visible errors 0 (database is locked 0), %.1fs",
		procs, n, len(got.Messages), total.Completes, total.Acks, len(done), elapsed.Seconds())
}

// TestReliabilityKillMidWrite: a child process appends 3-message batches to
// a session and acks worker items (each ack deletes the item and enqueues
// its completion in one transaction) in a tight loop, and is SIGKILLed at a
// random moment, five times over. Every write must be all-or-nothing:
// messages come in whole batches with gap-free sequence numbers and
// matching session counters, and every activity is either still in the
// worker queue or completed in the orchestrator queue — never both, never
// neither.
func TestReliabilityKillMidWrite(t *testing.T) {
	requireLongTests(t)
	forEachDialect(t, func(t *testing.T, h *harness) {
		const kills, work = 5, 1500
		ctx := context.Background()
		st := h.New(t)
		sess := repo.NewSession()
		if err := st.Sessions().Save(ctx, sess); err != nil {
			t.Fatal(err)
		}
		p := st.Provider()
		if err := p.EnqueueForOrchestrator(ctx, testkit.StartItem("churn", nil), 0); err != nil {
			t.Fatal(err)
		}
		it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		if err != nil || it == nil {
			t.Fatalf("fetch: %v %v", it, err)
		}
		if err := p.AckOrchestrationItem(ctx, it.LockToken, duroxide.OrchestrationAck{ExecutionID: 1,
			HistoryDelta: []duroxide.Event{testkit.StartedEv("churn", 1, 1, nil)}, Metadata: testkit.RunningMeta(nil)}); err != nil {
			t.Fatal(err)
		}
		for i := range work {
			if err := p.EnqueueForWorker(ctx, &duroxide.ActivityExecute{Instance: "churn", ExecutionID: 1, ID: uint64(i + 1), Name: "a", Input: "i"}); err != nil {
				t.Fatal(err)
			}
		}
		for k := range kills {
			child := startHelper(t, "churn", helperArgs{DSN: h.DSN, Schema: h.Schema, Session: sess.ID})
			if line := child.next(t, 2*time.Minute); line != "RUNNING" {
				t.Fatalf("helper: %s\n%s", line, child.output())
			}
			time.Sleep(time.Duration(50+k*60) * time.Millisecond) // real work in flight is the point
			if err := child.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_ = child.cmd.Wait()
		}
		got, err := st.Sessions().Load(ctx, sess.ID)
		if err != nil {
			t.Fatal(err)
		}
		n := len(got.Messages)
		if n == 0 || n%3 != 0 {
			t.Fatalf("%d messages stored: a 3-message append was split by the kill", n)
		}
		for i, m := range got.Messages {
			if m.Seq != int64(i+1) {
				t.Fatalf("message %d has seq %d", i, m.Seq)
			}
		}
		if got.MessageCount != int64(n) || got.LastSeq != int64(n) || got.CurrentLeafID == nil || *got.CurrentLeafID != got.Messages[n-1].ID {
			t.Fatalf("session row out of step with its messages: count %d, last seq %d, leaf %v; %d messages", got.MessageCount, got.LastSeq, got.CurrentLeafID, n)
		}
		var pending []int64
		if err := st.DB(ctx).Table(st.Table(models.TableWorkerQueue)).Pluck("activity_id", &pending).Error; err != nil {
			t.Fatal(err)
		}
		var completions []string
		if err := st.DB(ctx).Table(st.Table(models.TableOrchestratorQueue)).Pluck("work_item", &completions).Error; err != nil {
			t.Fatal(err)
		}
		where := map[uint64]string{}
		for _, id := range pending {
			where[uint64(id)] += "W"
		}
		for _, raw := range completions {
			w, err := duroxide.UnmarshalWorkItem([]byte(raw))
			if err != nil {
				t.Fatal(err)
			}
			c, ok := w.(*duroxide.ActivityCompleted)
			if !ok {
				t.Fatalf("unexpected orchestrator message %s", raw)
			}
			where[c.ID] += "C"
		}
		for i := uint64(1); i <= work; i++ {
			if where[i] != "W" && where[i] != "C" {
				t.Errorf("activity %d: %q (want exactly one of W = still queued, C = completed)", i, where[i])
			}
		}
		relLogf(t, "kill mid-write: %d SIGKILLs during appends and work acks: %d messages in whole batches, seq gap-free, session counters consistent; activities %d completed + %d still queued = %d, torn 0",
			kills, n, len(completions), len(pending), work)
	})
}
