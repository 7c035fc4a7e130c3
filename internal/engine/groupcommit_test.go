//go:build cgo

package engine

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm/logger"

	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// gcProbe drives a committer[int, int] whose first single call blocks
// until released, recording what reached single and batch.
type gcProbe struct {
	c       committer[int, int]
	mu      sync.Mutex
	singles []int
	batches [][]int
	started chan struct{} // the blocking first call runs
	release chan struct{}
	failAll bool // batch fails as a whole
}

var errOdd = errors.New("odd item refused")

// outcome is what an item gets, alone or in a batch: odd values are refused.
func outcome(in int) error {
	if in%2 == 1 {
		return errOdd
	}
	return nil
}

func (p *gcProbe) single(_ context.Context, in int) error {
	p.mu.Lock()
	p.singles = append(p.singles, in)
	p.mu.Unlock()
	if in == 0 {
		close(p.started)
		<-p.release
	}
	return outcome(in)
}

func (p *gcProbe) batch(_ context.Context, reqs []*gcReq[int, int]) error {
	var ins []int
	for _, r := range reqs {
		ins = append(ins, r.in)
	}
	p.mu.Lock()
	p.batches = append(p.batches, ins)
	p.mu.Unlock()
	if p.failAll {
		return errors.New("flush failed")
	}
	for _, r := range reqs {
		r.err = outcome(r.in)
	}
	return nil
}

func (p *gcProbe) do(ctx context.Context, key, in int) error {
	return p.c.do(ctx, 1, key, in, p.single, p.batch)
}

// queued waits until n calls wait in the committer.
func (p *gcProbe) queued(n int) {
	for {
		p.c.mu.Lock()
		l := len(p.c.queue)
		p.c.mu.Unlock()
		if l == n {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// TestCommitterCoalesces: a call that finds the committer idle runs alone
// at once; the calls that arrive while it runs are flushed together in one
// batch when it ends, each with its own outcome; a second call of a row
// already in that batch waits for the next flush; a call whose context
// ends before it is taken returns the context's error and reaches neither
// single nor batch; when the batch fails as a whole, each of its calls is
// run alone and gets that outcome.
func TestCommitterCoalesces(t *testing.T) {
	for _, failAll := range []bool{false, true} {
		p := &gcProbe{started: make(chan struct{}), release: make(chan struct{}), failAll: failAll}
		ctx := context.Background()
		results := make(map[int]error)
		var rmu sync.Mutex
		var wg sync.WaitGroup
		call := func(ctx context.Context, key, in int) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := p.do(ctx, key, in)
				rmu.Lock()
				results[in] = err
				rmu.Unlock()
			}()
		}
		call(ctx, 0, 0)
		<-p.started
		for in := 1; in <= 6; in++ {
			call(ctx, in, in)
		}
		p.queued(6)
		call(ctx, 3, 33) // the same row as item 3
		p.queued(7)
		// one call gives up while queued, one comes with its context done
		gone, cancel := context.WithCancel(ctx)
		call(gone, 7, 7)
		p.queued(8)
		cancel()
		p.queued(7)
		done, cancel2 := context.WithCancel(ctx)
		cancel2()
		if err := p.do(done, 8, 8); !errors.Is(err, context.Canceled) {
			t.Fatalf("call with a done context = %v, want context.Canceled", err)
		}
		close(p.release)
		wg.Wait()

		for in, err := range results {
			switch {
			case in == 7:
				if !errors.Is(err, context.Canceled) {
					t.Errorf("failAll=%v: cancelled call = %v, want context.Canceled", failAll, err)
				}
			case !errors.Is(err, outcome(in)) || (err == nil) != (outcome(in) == nil):
				t.Errorf("failAll=%v: call %d = %v, want %v", failAll, in, err, outcome(in))
			}
		}
		if len(results) != 9 {
			t.Fatalf("failAll=%v: %d results, want 9", failAll, len(results))
		}
		if len(p.batches) != 1 {
			t.Fatalf("failAll=%v: batches %v, want one of items 1..6", failAll, p.batches)
		}
		got := slices.Sorted(slices.Values(p.batches[0]))
		if !slices.Equal(got, []int{1, 2, 3, 4, 5, 6}) {
			t.Errorf("failAll=%v: batch %v, want items 1..6", failAll, got)
		}
		singles := slices.Sorted(slices.Values(p.singles))
		want := []int{0, 33}
		if failAll {
			want = []int{0, 1, 2, 3, 4, 5, 6, 33}
		}
		if !slices.Equal(singles, want) {
			t.Errorf("failAll=%v: single calls %v, want %v", failAll, singles, want)
		}
		if p.c.busy != 0 || len(p.c.queue) != 0 {
			t.Errorf("failAll=%v: committer not idle after the calls: busy=%v queue=%d", failAll, p.c.busy, len(p.c.queue))
		}
	}
}

// gcStores opens a migrated store per dialect configuration: SQLite,
// PostgreSQL, and PostgreSQL without fast paths (the general batch path);
// the PostgreSQL ones only where the server is reachable (pgTestStore).
func gcStores(t *testing.T) map[string]*Store {
	t.Helper()
	ctx := context.Background()
	out := map[string]*Store{}
	lite, err := testOpen(ctx, "sqlite:"+filepath.Join(t.TempDir(), "gc.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lite.Close() })
	if err := lite.Migrate(ctx); err != nil {
		t.Fatalf("sqlite: migrate: %v", err)
	}
	out["sqlite"] = lite
	for name, opts := range map[string][]Option{"postgres": nil, "postgres-general": {WithoutCapabilities(CapFastPaths)}} {
		if st := pgTestStore(t, opts...); st != nil {
			out[name] = st
		}
	}
	return out
}

// pgTestStore opens a Store with opts on a new schema of the PostgreSQL
// server at AGENTSTORE_TEST_POSTGRES_DSN (default: the local test
// database), migrated, and drops the schema at the end of the test. When
// the server is unreachable it fails the test under
// AGENTSTORE_REQUIRE_POSTGRES=1 (CI) and otherwise returns nil.
func pgTestStore(t *testing.T, opts ...Option) *Store {
	t.Helper()
	ctx := context.Background()
	dsn := os.Getenv("AGENTSTORE_TEST_POSTGRES_DSN")
	if dsn == "" {
		dsn = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	schema := "t_gc_" + strings.ReplaceAll(uuid.NewString(), "-", "")
	st, err := testOpen(ctx, dsn, append([]Option{WithSchema(schema)}, opts...)...)
	if err == nil {
		err = st.db.WithContext(ctx).Exec("SELECT 1").Error
	}
	if err != nil {
		if os.Getenv("AGENTSTORE_REQUIRE_POSTGRES") == "1" {
			t.Fatalf("PostgreSQL required: %v", err)
		}
		t.Logf("NOTICE: PostgreSQL unreachable (%v); only SQLite runs", err)
		if st != nil {
			_ = st.Close()
		}
		return nil
	}
	t.Cleanup(func() {
		_ = st.db.Exec(`DROP SCHEMA IF EXISTS "` + schema + `" CASCADE`).Error
		_ = st.Close()
	})
	if err := st.Migrate(ctx); err != nil {
		t.Fatalf("postgres: migrate: %v", err)
	}
	return st
}

// TestGroupCommitStatements: the batch statements themselves (not the
// per-item fallback a failing one would fall back to) succeed on every
// dialect and path and report each item's own outcome: valid leases are
// ended, a forged token is ErrLockLost / ErrInvalidLockToken, an unknown
// item or one of another tenant ErrNotFound, an expired lock
// ErrInvalidLockToken; only the valid acks' completions are enqueued.
func TestGroupCommitStatements(t *testing.T) {
	ctx := context.Background()
	for name, st := range gcStores(t) {
		t.Run(name, func(t *testing.T) {
			// session queue
			all := &sessionQueue{sessionStore{s: st}}
			acme, other := "acme", "other"
			inAcme := &sessionQueue{sessionStore{s: st, tenant: &acme}}
			inOther := &sessionQueue{sessionStore{s: st, tenant: &other}}
			s, sa := repo.NewSession(), repo.NewSession()
			if err := st.Sessions().Save(ctx, s); err != nil {
				t.Fatal(err)
			}
			if err := st.ForTenant(acme).Sessions().Save(ctx, sa); err != nil {
				t.Fatal(err)
			}
			lease := func(q *sessionQueue, sid uuid.UUID) repo.Lease {
				t.Helper()
				if _, err := q.Enqueue(ctx, sid, "x", 0); err != nil {
					t.Fatal(err)
				}
				it, err := q.Dequeue(ctx, sid, repo.DequeueParams{Lease: time.Hour})
				if err != nil || it == nil {
					t.Fatalf("dequeue: %v %v", it, err)
				}
				return it.Lease()
			}
			forged := lease(all, s.ID)
			forged.Token = uuid.New()
			cases := []struct {
				q    *sessionQueue
				l    repo.Lease
				want error
			}{
				{all, lease(all, s.ID), nil},
				{all, forged, ErrLockLost},
				{all, repo.Lease{ItemID: uuid.New(), Token: uuid.New()}, ErrNotFound},
				{inOther, lease(inAcme, sa.ID), ErrNotFound},
				{inAcme, lease(inAcme, sa.ID), nil},
				{all, lease(all, s.ID), nil},
			}
			var reqs []*gcReq[uuid.UUID, completeReq]
			for _, c := range cases {
				reqs = append(reqs, &gcReq[uuid.UUID, completeReq]{ctx: ctx, key: c.l.ItemID,
					in: completeReq{sq: c.q, l: c.l, now: st.now(), nowMS: st.nowMS()}})
			}
			if err := st.completeBatch(ctx, reqs); err != nil {
				t.Fatalf("complete batch: %v", err)
			}
			for i, c := range cases {
				if got := reqs[i].err; (c.want == nil) != (got == nil) || (c.want != nil && !errors.Is(got, c.want)) {
					t.Errorf("complete %d: %v, want %v", i, got, c.want)
				}
				if c.want != nil {
					continue
				}
				it, err := all.Item(ctx, c.l.ItemID)
				if err != nil || it.Status != repo.QueueCompleted || it.ProcessedAt == nil || it.LeaseToken != nil {
					t.Errorf("completed item %d = %+v, %v", i, it, err)
				}
			}
			if it, err := all.Item(ctx, cases[3].l.ItemID); err != nil || it.Status != repo.QueueProcessing {
				t.Errorf("the other tenant's item = %+v, %v; want processing", it, err)
			}

			// worker queue
			p := st.provider()
			for id := uint64(1); id <= 6; id++ {
				if err := p.EnqueueForWorker(ctx, &duroxide.ActivityExecute{Instance: "gc", ExecutionID: 1, ID: id, Name: "a", Input: "i"}); err != nil {
					t.Fatal(err)
				}
			}
			var toks []string
			for range 5 {
				l, err := p.FetchWorkItem(ctx, time.Hour, 0, nil, duroxide.TagFilter{})
				if err != nil || l == nil {
					t.Fatalf("fetch: %v %v", l, err)
				}
				toks = append(toks, l.LockToken)
			}
			row := func(result string) *models.OrchestratorQueueItem {
				return &models.OrchestratorQueueItem{InstanceID: "gc", WorkItem: `{"result":"` + result + `"}`}
			}
			now := st.nowMS()
			var wreqs []*gcReq[int64, ackWorkReq]
			add := func(tok string, r *models.OrchestratorQueueItem, nowMS int64) {
				wl, ok := parseWorkToken(tok)
				if !ok {
					t.Fatalf("token %q", tok)
				}
				wreqs = append(wreqs, &gcReq[int64, ackWorkReq]{ctx: ctx, key: wl.id, in: ackWorkReq{stored: wl.stored, id: wl.id,
					instance: wl.instance, routed: wl.routed, row: r, nowMS: nowMS}})
			}
			add(toks[0], row("ok0"), now)
			add(toks[1], nil, now)
			wl2, _ := parseWorkToken(toks[2])
			add(workToken("lock_forged", wl2.instance, wl2.id), row("forged"), now)
			add(toks[3], row("expired"), now+2*time.Hour.Milliseconds())
			add(workToken("lock_x", "", 1<<40), row("unknown"), now)
			add(toks[4], row("ok4"), now)
			if err := p.ackWorkBatch(ctx, wreqs); err != nil {
				t.Fatalf("ack batch: %v", err)
			}
			for i, r := range wreqs {
				valid := i == 0 || i == 1 || i == 5
				if valid != (r.err == nil) || (!valid && !errors.Is(r.err, ErrInvalidLockToken)) {
					t.Errorf("ack %d: %v (valid %v)", i, r.err, valid)
				}
			}
			var got []string
			if err := st.db.WithContext(ctx).Raw("SELECT work_item FROM " + st.quoted(models.TableOrchestratorQueue) + " ORDER BY id").Scan(&got).Error; err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, []string{`{"result":"ok0"}`, `{"result":"ok4"}`}) {
				t.Errorf("enqueued completions %q, want ok0 and ok4", got)
			}
			var left int64
			if err := st.db.WithContext(ctx).Raw("SELECT COUNT(*) FROM " + st.quoted(models.TableWorkerQueue)).Scan(&left).Error; err != nil || left != 3 {
				t.Errorf("%d worker items left (%v), want 3 (forged, expired, never fetched)", left, err)
			}
		})
	}
}

// TestCommitterStress: 16 goroutines × 150 calls over 12 rows, with up to
// 1, 2 or 3 flushes at once, some calls cancelled before or while they
// wait, some batches failing as a whole: every call returns; a call that
// reports success was applied exactly once, a call that reports its
// context's error not at all; no batch holds two calls of one row; the
// committer ends idle.
func TestCommitterStress(t *testing.T) {
	for _, flushes := range []int{1, 2, 3} {
		var c committer[int, int]
		var mu sync.Mutex
		applied := map[int]int{}
		nbatch := 0
		// single and batch take a while (a statement's round trip), so
		// that calls pile up behind running flushes
		single := func(_ context.Context, in int) error {
			time.Sleep(100 * time.Microsecond)
			mu.Lock()
			applied[in]++
			mu.Unlock()
			return nil
		}
		batch := func(_ context.Context, reqs []*gcReq[int, int]) error {
			time.Sleep(100 * time.Microsecond)
			mu.Lock()
			defer mu.Unlock()
			nbatch++
			if nbatch%5 == 0 {
				return errors.New("flush failed")
			}
			keys := map[int]bool{}
			for _, r := range reqs {
				if keys[r.key] {
					t.Errorf("flushes=%d: two calls of row %d in one batch", flushes, r.key)
				}
				keys[r.key] = true
				applied[r.in]++
				r.err = nil
			}
			return nil
		}
		const workers, calls = 16, 150
		results := make([]error, workers*calls)
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range calls {
					in := w*calls + i
					ctx, cancel := context.WithCancel(context.Background())
					switch in % 7 {
					case 0:
						cancel()
					case 1:
						go cancel()
					}
					results[in] = c.do(ctx, flushes, in%12, in, single, batch)
					cancel()
				}
			}()
		}
		wg.Wait()
		for in, err := range results {
			switch {
			case err == nil && applied[in] != 1:
				t.Errorf("flushes=%d: call %d succeeded but was applied %d times", flushes, in, applied[in])
			case err != nil && (!errors.Is(err, context.Canceled) || applied[in] != 0):
				t.Errorf("flushes=%d: call %d = %v, applied %d times", flushes, in, err, applied[in])
			}
		}
		if c.busy != 0 || len(c.queue) != 0 {
			t.Errorf("flushes=%d: committer not idle: busy=%d queue=%d", flushes, c.busy, len(c.queue))
		}
	}
}

// TestAppendGroupCommit: appends that queue while a flush runs are
// committed in one write transaction (one batch), each with its own
// outcome: two appends to one session land one after the other (seqs 1, 2,
// the second under the first), an append to a missing session or to
// another tenant's session is ErrNotFound, one at a stale expected version
// a *StaleVersionError, and they leave the others alone. When one append
// of the flush fails after writing (a message id stored with other
// content), the transaction is rolled back and every call runs again
// alone: that one gets ErrDuplicate, the others succeed.
//
// On every dialect whose appends take the transaction path (SQLite,
// PostgreSQL without CapFastPaths, MariaDB). On MariaDB (no one-statement
// append in the dialect) the flush reads and locks the rows of its
// sessions in one statement (appendFlush.lockHeads); a PostgreSQL Store
// with the fast paths switched off does not (one session per statement).
func TestAppendGroupCommit(t *testing.T) {
	gc := gcStores(t)
	stores := map[string]*Store{"sqlite": gc["sqlite"]}
	if st := gc["postgres-general"]; st != nil {
		stores["postgres-general"] = st
	}
	lockLog := &sqlLog{}
	if st := gcMariaDB(t, WithLogger(lockLog)); st != nil {
		stores["mariadb"] = st
	}
	for name, st := range stores {
		t.Run(name, func(t *testing.T) {
			if !st.groupCommit() {
				t.Fatalf("%s does not claim CapGroupCommit", name)
			}
			lockLog.reset()
			appendGroupCommit(t, st)
			locks := lockLog.matching("SELECT id, tenant_id, last_seq")
			if want := name == "mariadb"; (locks == 2) != want || (!want && locks != 0) {
				t.Fatalf("%s: %d flush-wide session reads, want %d", name, locks, map[bool]int{true: 2}[want])
			}
		})
	}
}

func appendGroupCommit(t *testing.T, st *Store) {
	ctx := context.Background()
	r := st.Sessions()
	text := func(id, body string) repo.Message {
		return repo.Message{ID: id, Role: repo.RoleUser, Content: json.RawMessage(`[{"type":"text","text":"` + body + `"}]`)}
	}
	for _, withDup := range []bool{false, true} {
		s1, s2, sa := repo.NewSession(), repo.NewSession(), repo.NewSession()
		for _, s := range []*repo.Session{s1, s2} {
			if err := r.Save(ctx, s); err != nil {
				t.Fatal(err)
			}
		}
		if err := st.ForTenant("acme").Sessions().Save(ctx, sa); err != nil {
			t.Fatal(err)
		}
		if _, err := r.AppendMessages(ctx, s2.ID, text(uuid.NewString(), "before")); err != nil {
			t.Fatal(err)
		}
		dupID := uuid.NewString()
		if _, err := r.AppendMessages(ctx, s2.ID, text(dupID, "stored")); err != nil {
			t.Fatal(err)
		}
		type call struct {
			name string
			run  func() ([]repo.Message, error)
			want func(error) bool
		}
		calls := []call{
			{"s1 first", func() ([]repo.Message, error) { return r.AppendMessages(ctx, s1.ID, text("a1", "one")) }, isNil},
			{"s1 second", func() ([]repo.Message, error) { return r.AppendMessages(ctx, s1.ID, text("a2", "two")) }, isNil},
			{"missing", func() ([]repo.Message, error) { return r.AppendMessages(ctx, uuid.New(), text(uuid.NewString(), "x")) },
				func(err error) bool { return errors.Is(err, ErrNotFound) }},
			{"stale", func() ([]repo.Message, error) {
				return r.AppendMessagesWith(ctx, s2.ID, repo.AppendOptions{ExpectedVersion: 1}, text(uuid.NewString(), "x"))
			}, func(err error) bool { var sv *repo.StaleVersionError; return errors.As(err, &sv) }},
			{"other tenant", func() ([]repo.Message, error) {
				return st.ForTenant("other").Sessions().AppendMessages(ctx, sa.ID, text(uuid.NewString(), "x"))
			}, func(err error) bool { return errors.Is(err, ErrNotFound) }},
			{"s2", func() ([]repo.Message, error) { return r.AppendMessages(ctx, s2.ID, text("b1", "three")) }, isNil},
		}
		if withDup {
			calls = append(calls, call{"dup", func() ([]repo.Message, error) { return r.AppendMessages(ctx, s2.ID, text(dupID, "other")) },
				func(err error) bool { return errors.Is(err, ErrDuplicate) }})
		}
		c := &st.gc.appends
		// pretend a flush is running, so that every call queues
		c.mu.Lock()
		c.busy++
		c.mu.Unlock()
		before := c.batches.Load()
		errs := make([]error, len(calls))
		var wg sync.WaitGroup
		for i, cl := range calls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = cl.run()
			}()
			// queue them in order (the flush applies them in queue order)
			for {
				c.mu.Lock()
				n := len(c.queue)
				c.mu.Unlock()
				if n == i+1 || errs[i] != nil {
					break
				}
				time.Sleep(time.Millisecond)
			}
		}
		// end the pretended flush: its lead goes to the first call, which
		// takes them all
		c.mu.Lock()
		c.handOff()
		c.mu.Unlock()
		wg.Wait()
		if got := c.batches.Load() - before; got != 1 {
			t.Fatalf("dup=%v: %d batches, want the %d calls in one", withDup, got, len(calls))
		}
		for i, cl := range calls {
			if !cl.want(errs[i]) {
				t.Errorf("dup=%v: %s: error %v", withDup, cl.name, errs[i])
			}
		}
		got, err := r.Load(ctx, s1.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Messages) != 2 || got.Messages[0].ID != "a1" || got.Messages[1].ID != "a2" || got.Messages[1].Seq != 2 ||
			got.Messages[1].ParentID == nil || *got.Messages[1].ParentID != "a1" || got.LastSeq != 2 || got.MessageCount != 2 {
			t.Fatalf("dup=%v: s1 after the flush: %+v", withDup, got.Messages)
		}
		got2, err := r.Load(ctx, s2.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(got2.Messages) != 3 || got2.Messages[2].ID != "b1" || got2.LastSeq != 3 || string(got2.Messages[1].Content) != `[{"type":"text","text":"stored"}]` {
			t.Fatalf("dup=%v: s2 after the flush: %d messages, last seq %d", withDup, len(got2.Messages), got2.LastSeq)
		}
		c.mu.Lock()
		idle := c.busy == 0 && len(c.queue) == 0
		c.mu.Unlock()
		if !idle {
			t.Fatal("committer not idle after the flush")
		}
	}
}

func isNil(err error) bool { return err == nil }

// sqlLog is a gorm logger that keeps every statement it traces.
type sqlLog struct {
	mu    sync.Mutex
	stmts []string
}

func (l *sqlLog) LogMode(logger.LogLevel) logger.Interface { return l }
func (l *sqlLog) Info(context.Context, string, ...any)     {}
func (l *sqlLog) Warn(context.Context, string, ...any)     {}
func (l *sqlLog) Error(context.Context, string, ...any)    {}
func (l *sqlLog) Trace(_ context.Context, _ time.Time, fc func() (string, int64), _ error) {
	q, _ := fc()
	l.mu.Lock()
	l.stmts = append(l.stmts, q)
	l.mu.Unlock()
}

func (l *sqlLog) reset() {
	l.mu.Lock()
	l.stmts = nil
	l.mu.Unlock()
}

// matching counts the statements that start with prefix.
func (l *sqlLog) matching(prefix string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, q := range l.stmts {
		if strings.HasPrefix(q, prefix) {
			n++
		}
	}
	return n
}

// gcMariaDB opens and migrates a Store in a fresh database of the MariaDB
// server of AGENTSTORE_TEST_MARIADB_DSN (the README's default when unset),
// dropped at the end of the test; nil (logged) when the server is
// unreachable, a failure under AGENTSTORE_REQUIRE_MARIADB=1.
func gcMariaDB(t *testing.T, opts ...Option) *Store {
	t.Helper()
	ctx := context.Background()
	dsn := os.Getenv("AGENTSTORE_TEST_MARIADB_DSN")
	if dsn == "" {
		dsn = "mysql://root@127.0.0.1:3306/test"
	}
	unreachable := func(err error) *Store {
		if os.Getenv("AGENTSTORE_REQUIRE_MARIADB") == "1" {
			t.Fatalf("MariaDB required: %v", err)
		}
		t.Logf("NOTICE: MariaDB unreachable (%v); its half does not run", err)
		return nil
	}
	admin, err := testOpen(ctx, dsn)
	if err == nil {
		err = admin.db.WithContext(ctx).Exec("SELECT 1").Error
	}
	if err != nil {
		if admin != nil {
			_ = admin.Close()
		}
		return unreachable(err)
	}
	name := "t_gc_" + strings.ReplaceAll(uuid.NewString(), "-", "")[:20]
	if err := admin.db.WithContext(ctx).Exec("CREATE DATABASE `" + name + "` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin").Error; err != nil {
		_ = admin.Close()
		t.Fatalf("create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		_ = admin.db.Exec("DROP DATABASE IF EXISTS `" + name + "`").Error
		_ = admin.Close()
	})
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	st, err := testOpen(ctx, u.String(), opts...)
	if err != nil {
		t.Fatalf("open %s: %v", name, err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if err := st.Migrate(ctx); err != nil {
		t.Fatalf("mariadb: migrate: %v", err)
	}
	return st
}

// TestDequeueBatchStatement runs the coalesced Dequeue (dequeueBatch)
// directly on every dialect with calls of several sessions and views: the
// calls of one session get its claimable items in dequeue order (priority
// first, then FIFO; an item leased to someone else is stepped over), each
// with its own token, owner and lease end, as stored; a call left without
// an item gets nil; a call through another tenant's view, or for a session
// that does not exist, gets ErrNotFound; nothing else is claimed.
func TestDequeueBatchStatement(t *testing.T) {
	ctx := context.Background()
	for name, st := range gcStores(t) {
		t.Run(name, func(t *testing.T) {
			all := &sessionQueue{sessionStore{s: st}}
			acme, other := "acme", "other"
			inAcme := &sessionQueue{sessionStore{s: st, tenant: &acme}}
			inOther := &sessionQueue{sessionStore{s: st, tenant: &other}}
			s, sa := repo.NewSession(), repo.NewSession()
			if err := st.Sessions().Save(ctx, s); err != nil {
				t.Fatal(err)
			}
			if err := st.ForTenant(acme).Sessions().Save(ctx, sa); err != nil {
				t.Fatal(err)
			}
			enqueue := func(q *sessionQueue, sid uuid.UUID, content string, prio int32) *repo.QueueItem {
				t.Helper()
				it, err := q.Enqueue(ctx, sid, content, prio)
				if err != nil {
					t.Fatal(err)
				}
				return it
			}
			p0, p5a := enqueue(all, s.ID, "p0", 0), enqueue(all, s.ID, "p5a", 5)
			enqueue(all, s.ID, "held", 9)
			held, err := all.Dequeue(ctx, s.ID, repo.DequeueParams{Owner: "other", Lease: time.Hour})
			if err != nil || held == nil || held.Content != "held" {
				t.Fatalf("dequeue held: %+v, %v", held, err)
			}
			p1, p5b := enqueue(all, s.ID, "p1", 1), enqueue(all, s.ID, "p5b", 5)
			a0 := enqueue(inAcme, sa.ID, "a0", 0)
			calls := []struct {
				q       *sessionQueue
				session uuid.UUID
				owner   string
				lease   time.Duration
				want    *repo.QueueItem // nil: no item
				err     error
			}{
				{all, s.ID, "w0", time.Minute, p5a, nil},
				{inAcme, sa.ID, "", 2 * time.Minute, a0, nil},
				{all, s.ID, "w2", 3 * time.Minute, p5b, nil},
				{inOther, sa.ID, "w3", time.Minute, nil, ErrNotFound},
				{all, s.ID, "", 5 * time.Minute, p1, nil},
				{all, uuid.New(), "w5", time.Minute, nil, ErrNotFound},
				{all, s.ID, "w6", 7 * time.Minute, p0, nil},
				{inAcme, sa.ID, "w7", time.Minute, nil, nil},
				{all, s.ID, "w8", time.Minute, nil, nil},
			}
			reqs := make([]*gcReq[uint64, dequeueReq], len(calls))
			outs := make([]*repo.QueueItem, len(calls))
			for i, c := range calls {
				reqs[i] = &gcReq[uint64, dequeueReq]{ctx: ctx, key: uint64(i), in: dequeueReq{sq: c.q, session: c.session, owner: c.owner,
					lease: c.lease, token: uuid.New(), nowMS: st.nowMS(), out: &outs[i]}}
			}
			if err := st.dequeueBatch(ctx, reqs); err != nil {
				t.Fatalf("dequeue batch: %v", err)
			}
			for i, c := range calls {
				r, it := reqs[i], outs[i]
				if (c.err == nil) != (r.err == nil) || (c.err != nil && !errors.Is(r.err, c.err)) {
					t.Errorf("call %d: error %v, want %v", i, r.err, c.err)
					continue
				}
				if c.want == nil {
					if it != nil {
						t.Errorf("call %d: got %s, want no item", i, it.Content)
					}
					continue
				}
				if it == nil || it.ID != c.want.ID {
					t.Errorf("call %d: got %+v, want %s", i, it, c.want.Content)
					continue
				}
				until := time.UnixMilli(r.in.nowMS + c.lease.Milliseconds()).UTC()
				if it.Status != repo.QueueProcessing || it.Attempts != 1 || *it.LeaseToken != r.in.token || !it.LeasedUntil.Equal(until) ||
					(c.owner == "") != (it.LeaseOwner == nil) || (c.owner != "" && *it.LeaseOwner != c.owner) || it.SessionID != c.session ||
					it.Content != c.want.Content || it.Priority != c.want.Priority || it.Seq != c.want.Seq || !it.CreatedAt.Equal(c.want.CreatedAt) {
					t.Errorf("call %d: item %+v", i, it)
				}
				stored, err := all.Item(ctx, it.ID)
				if err != nil || stored.LeaseToken == nil || *stored.LeaseToken != r.in.token || !stored.LeasedUntil.Equal(until) ||
					stored.Status != repo.QueueProcessing || stored.Attempts != 1 {
					t.Errorf("call %d: stored %+v, %v", i, stored, err)
				}
			}
			if it, err := all.Item(ctx, held.ID); err != nil || *it.LeaseToken != *held.LeaseToken || it.Attempts != 1 {
				t.Errorf("the item leased before = %+v, %v; want its lease unchanged", it, err)
			}
		})
	}
}

// TestFetchWorkBatchStatement runs the coalesced worker fetch
// (fetchWorkBatch) directly on every dialect with attempts of two tag
// filters: the attempts of one filter get its visible, unlocked items
// outside activity sessions in id order (an item locked before, a session
// item and an item of the other filter are stepped over), each with its
// own token and lock end; an attempt left without an item gets nil; an
// item that does not decode is its attempt's CorruptRowError; every lease
// handed out acks.
func TestFetchWorkBatchStatement(t *testing.T) {
	ctx := context.Background()
	for name, st := range gcStores(t) {
		t.Run(name, func(t *testing.T) {
			p := st.provider()
			gpu, sess := "gpu", "sess-1"
			enqueue := func(input string, tag, session *string) {
				t.Helper()
				if err := p.EnqueueForWorker(ctx, &duroxide.ActivityExecute{Instance: "wb", ExecutionID: 1, ID: 1, Name: "a", Input: input,
					Tag: tag, SessionID: session}); err != nil {
					t.Fatal(err)
				}
			}
			enqueue("u1", nil, nil)
			enqueue("g1", &gpu, nil)
			enqueue("s1", nil, &sess)
			enqueue("u2", nil, nil)
			enqueue("g2", &gpu, nil)
			enqueue("u3", nil, nil)
			enqueue("u4", nil, nil)
			enqueue("bad", nil, nil)
			tagA := "a"
			enqueue("ta", &tagA, nil)
			wq := st.quoted(models.TableWorkerQueue)
			// plant: a stored work item that does not decode
			if err := st.db.WithContext(ctx).Exec("UPDATE "+wq+" SET work_item = ? WHERE work_item LIKE ?", "{", `%"bad"%`).Error; err != nil {
				t.Fatal(err)
			}
			var lockedBefore []*duroxide.WorkItemLease
			for _, want := range []string{"u1", "u2", "u3"} {
				l, err := p.fetchWorkPlain(ctx, time.Hour, duroxide.TagFilter{})
				if err != nil || l == nil || l.Item.(*duroxide.ActivityExecute).Input != want {
					t.Fatalf("fetch before: %+v, %v; want %s", l, err, want)
				}
				lockedBefore = append(lockedBefore, l)
			}
			// u1 and u2 are released again, so they are visible after u4
			// and bad (an untagged claim takes items in visibility order);
			// u3 stays locked
			time.Sleep(5 * time.Millisecond)
			for _, l := range lockedBefore[:2] {
				if err := p.AbandonWorkItem(ctx, l.LockToken, 0, true); err != nil {
					t.Fatalf("abandon: %v", err)
				}
			}
			def, tagged := duroxide.TagFilter{}, duroxide.TagFilter{Mode: duroxide.TagTags, Tags: []string{gpu}}
			calls := []struct {
				tags    duroxide.TagFilter
				lock    time.Duration
				want    string // "" no item
				corrupt bool
			}{
				{def, time.Minute, "u4", false},
				{tagged, 2 * time.Minute, "g1", false},
				{def, 3 * time.Minute, "", true},
				{tagged, 4 * time.Minute, "g2", false},
				{def, 5 * time.Minute, "u1", false},
				{tagged, time.Minute, "", false},
				{def, time.Minute, "u2", false},
				{def, time.Minute, "", false},
				// two filters whose tags print alike are not one group
				{duroxide.TagFilter{Mode: duroxide.TagTags, Tags: []string{"a b"}}, time.Minute, "", false},
				{duroxide.TagFilter{Mode: duroxide.TagTags, Tags: []string{"a", "b"}}, time.Minute, "ta", false},
				{duroxide.TagFilter{Mode: duroxide.TagTags, Tags: []string{"a b"}}, time.Minute, "", false},
			}
			reqs := make([]*gcReq[uint64, workFetchReq], len(calls))
			outs := make([]*duroxide.WorkItemLease, len(calls))
			for i, c := range calls {
				reqs[i] = &gcReq[uint64, workFetchReq]{ctx: ctx, key: uint64(i), in: workFetchReq{lockTimeout: c.lock, tags: c.tags, out: &outs[i]}}
			}
			before := st.nowMS()
			if err := p.fetchWorkBatch(ctx, reqs); err != nil {
				t.Fatalf("fetch batch: %v", err)
			}
			after := st.nowMS()
			for i, c := range calls {
				r, l := reqs[i], outs[i]
				var corrupt *CorruptRowError
				if c.corrupt {
					if !errors.As(r.err, &corrupt) || l != nil {
						t.Errorf("call %d: %+v, %v; want a CorruptRowError", i, l, r.err)
					}
					continue
				}
				if r.err != nil {
					t.Errorf("call %d: %v", i, r.err)
					continue
				}
				if c.want == "" {
					if l != nil {
						t.Errorf("call %d: got %+v, want no item", i, l.Item)
					}
					continue
				}
				if l == nil || l.Item.(*duroxide.ActivityExecute).Input != c.want || l.AttemptCount < 1 {
					t.Errorf("call %d: got %+v, want %s", i, l, c.want)
					continue
				}
				wl, ok := parseWorkToken(l.LockToken)
				if !ok {
					t.Fatalf("call %d: token %q", i, l.LockToken)
				}
				stored, id := wl.stored, wl.id
				var row struct {
					LockToken   string
					LockedUntil int64
				}
				if err := st.db.WithContext(ctx).Raw("SELECT lock_token, locked_until FROM "+wq+" WHERE id = ?", id).Scan(&row).Error; err != nil {
					t.Fatal(err)
				}
				if row.LockToken != stored || row.LockedUntil < before+c.lock.Milliseconds() || row.LockedUntil > after+c.lock.Milliseconds() {
					t.Errorf("call %d: stored lock %+v, want token %s until now + %v", i, row, stored, c.lock)
				}
			}
			for i, l := range outs {
				if l != nil {
					if err := p.AckWorkItem(ctx, l.LockToken, nil); err != nil {
						t.Errorf("ack %d: %v", i, err)
					}
				}
			}
			if err := p.AckWorkItem(ctx, lockedBefore[2].LockToken, nil); err != nil {
				t.Errorf("ack of the item locked before the batch: %v", err)
			}
		})
	}
}
