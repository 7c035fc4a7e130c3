package main

// The -scale mode (issue 15, item 6): operations whose work should not
// depend on how many rows the tables hold, measured through the public API
// at N = 1e3, 1e4, 1e5 (1e6 with -scale-max 1e6) on each dialect, with the
// growth per decade (ratio of medians per 10× N; > 1.3 is "grows").
//
// Each N gets its own store (a SQLite file, a PostgreSQL schema, a MariaDB
// database): the rows
// are planted with multi-row INSERTs on the store's own DB handle (the
// seeding is not what is measured), cloned from rows the public API wrote
// (a template instance, a queued message, a queued work item), then
// ANALYZEd; every measured call goes through the public API. The stores
// are measured interleaved (each repetition visits every N in turn), so
// noise hits every N alike. Operations that delete rows put the same
// number back (untimed) before the next repetition, so every repetition
// sees N.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// scaleOp describes one measured row of the -scale table.
type scaleOp struct {
	key      string // stable id (JSON subject prefix)
	label    string // table text
	inherent bool   // its work grows with N by design (shown, not flagged)
}

// scaleOps is the table's row order: the rows first, then the flat
// hot paths as controls.
var scaleOps = []scaleOp{
	{key: "list_halfway_tenant", label: "List (one tenant), page of 100 after a cursor half-way"},
	{key: "list_halfway", label: "List (no filter), page of 100 after a cursor half-way"},
	{key: "delete_empty_session", label: "Delete of an empty session, queue table of N"},
	{key: "cleanup_expired_20", label: "CleanupExpired of 20 expired sessions, queue table of N"},
	{key: "fetch_ack_locked_backlog", label: "Fetch+Ack while one locked instance has N queued messages"},
	{key: "list_running_page", label: `ListInstancesByStatusPage("Running", Limit 10): 10 Running of N`},
	{key: "list_completed_page", label: `ListInstancesByStatusPage("Completed", Limit 10): first 10 of N`},
	{key: "list_running_all", label: `ListInstancesByStatus("Running"): 13 Running of N`},
	{key: "delete_bulk_none", label: "DeleteInstanceBulk, nothing eligible (CompletedBefore)"},
	{key: "delete_bulk_limit100", label: "DeleteInstanceBulk Limit 100 (N terminal roots)"},
	{key: "poll_work_nothing_eligible", label: "FetchWorkItem (untagged, no session) finding nothing: N future + N tagged + N session-bound items"},
	{key: "poll_orch_nothing_eligible", label: "FetchOrchestrationItem finding nothing: N messages visible tomorrow"},
	{key: "system_metrics", label: "GetSystemMetrics (exact), N instances"},
	{key: "system_metrics_estimate", label: "GetSystemMetricsEstimate (Cap 1000), N instances"},
	{key: "read_history", label: "Read of an instance with N/10 events", inherent: true},
	{key: "fetch_ack_history", label: "Fetch+Ack of an instance with N/10 events", inherent: true},
	{key: "search_selective", label: `Search of a rare word (10 hits among N messages), page of 20`},
	{key: "search_common", label: `Search of a word all N messages hold, first page of 20`, inherent: true},
	{key: "control_load_lastn", label: "control: Load LastN 20, session of N messages"},
	{key: "control_append", label: "control: AppendMessages (1), session of N messages"},
	{key: "control_enqueue", label: "control: SessionQueue Enqueue, queue table of N"},
	{key: "control_dequeue_complete", label: "control: Dequeue+Complete, queue table of N"},
	{key: "control_fetch_ack_work", label: "control: FetchWorkItem+AckWorkItem, worker queue of N"},
	{key: "control_instance_info", label: "control: GetInstanceInfo, N instances"},
}

// scaleGrowsAt is the per-decade growth above which a row is flagged.
const scaleGrowsAt = 1.3

// scaleEnv is the store of one dialect at one N.
type scaleEnv struct {
	b   *bench
	d   string
	ctx context.Context
	st  *agentstore.Store

	tenant  string
	owner   uuid.UUID // holds the N finished session-queue items
	msgSess uuid.UUID // holds the N messages
	qSess   uuid.UUID // the control queue's session

	sessions, queued, messages, instances, oqueue, wqueue, history int
	serial                                                         int  // planted instance ids
	rare                                                           bool // the 10 messages Search finds (search_selective)

	tplInst []any    // template instance row values (instanceCols order, id replaced)
	tplExec []any    // template execution row values
	tplHist [][]any  // template history rows
	tplEvt  []string // template history event_data (instance id replaced)
	oqRow   []any    // a queued ExternalRaised for "busy"
	wqRow   []any    // a queued ActivityExecute
	clock   int64    // completed_at of planted instances (epoch ms)

	cleanups []func() // stores opened beside st (scale_polls.go)
}

var (
	instanceCols = []string{"instance_id", "orchestration_name", "orchestration_version", "current_execution_id", "created_at", "updated_at", "custom_status_version"}
	execCols     = []string{"instance_id", "execution_id", "status", "output", "started_at", "completed_at"}
	histCols     = []string{"instance_id", "execution_id", "event_id", "event_type", "event_data", "created_at"}
	oqCols       = []string{"instance_id", "work_item", "visible_at", "created_at", "attempt_count"}
	wqCols       = []string{"work_item", "visible_at", "created_at", "attempt_count", "instance_id", "execution_id", "activity_id"}
)

const scaleLock = time.Hour // the busy instance stays locked for the whole run

// runScale is the -scale mode: every dialect, every N, then the table.
func (b *bench) runScale(ctx context.Context, maxN float64, out io.Writer) error {
	var ns []int
	for n := 1000; float64(n) <= maxN*1.0001; n *= 10 {
		ns = append(ns, n)
	}
	if len(ns) == 0 {
		return fmt.Errorf("-scale-max %g is below 1e3", maxN)
	}
	start := time.Now()
	b.logf("agentstore bench -scale: N = %v, %s, %d CPUs, PostgreSQL %s", ns, runtime.Version(), runtime.NumCPU(), redact(b.pgDSN))
	// results[dialect][op][i] = median ms at ns[i] (NaN: not measured)
	results := map[string]map[string][]float64{}
	for _, d := range b.dialects {
		t0 := time.Now()
		b.logf("== scale / %s", d)
		res, err := b.scaleDialect(ctx, d, ns)
		if err != nil {
			b.skipf("scale", d, "all", "%v", err)
		}
		results[d] = res
		b.logf("   scale / %s took %v", d, time.Since(t0).Round(time.Millisecond))
	}
	// Growth ratios as results too (JSON).
	for _, d := range b.dialects {
		for _, op := range scaleOps {
			v := results[d][op.key]
			for i := 1; i < len(v); i++ {
				if v[i-1] > 0 && v[i] > 0 {
					b.results = append(b.results, Result{Scenario: "scale", Dialect: d,
						Subject: fmt.Sprintf("scale_growth/%s/%d-%d", op.key, ns[i-1], ns[i]), Value: round(v[i] / v[i-1]), Unit: "ratio"})
				}
			}
		}
	}
	b.printScale(out, ns, results, time.Since(start))
	return nil
}

// scaleDialect seeds one store per N and measures every op on all of
// them, interleaved: each repetition runs the op once on every store in
// turn, so the machine's noise (other processes, WAL flush latency) hits
// every N alike and the growth ratios compare like with like.
func (b *bench) scaleDialect(ctx context.Context, d string, ns []int) (map[string][]float64, error) {
	res := map[string][]float64{}
	for _, op := range scaleOps {
		res[op.key] = make([]float64, len(ns))
		for i := range ns {
			res[op.key][i] = math.NaN()
		}
	}
	runs := make([]map[string]*scaleRun, len(ns))
	for i, n := range ns {
		st, cleanup, err := b.openStore(ctx, d, fmt.Sprintf("scale_%d", n), "")
		if err != nil {
			return res, fmt.Errorf("open store: %w", err)
		}
		defer cleanup()
		e := &scaleEnv{b: b, d: d, ctx: ctx, st: st, tenant: "scale-tenant", clock: time.Now().UnixMilli()}
		t0 := time.Now()
		if err := e.setup(); err != nil {
			return res, fmt.Errorf("setup N=%d: %w", n, err)
		}
		if err := e.grow(n); err != nil {
			return res, fmt.Errorf("seed N=%d: %w", n, err)
		}
		b.logf("   seeded N=%d in %v", n, time.Since(t0).Round(time.Millisecond))
		runs[i] = e.runs(n)
		defer func() {
			for _, c := range e.cleanups {
				c()
			}
		}()
	}
	for _, op := range scaleOps {
		var at []*scaleRun
		for i := range ns {
			at = append(at, runs[i][op.key])
		}
		meds, err := timeInterleaved(at)
		for i, n := range ns {
			switch {
			case at[i] == nil:
			case err != nil:
				b.skipf("scale", d, fmt.Sprintf("%s @N=%d", op.key, n), "%v", err)
			default:
				res[op.key][i] = ms(meds[i])
				b.add("scale", d, fmt.Sprintf("%s @N=%d", op.label, n), ms(meds[i]), "ms/op")
			}
		}
	}
	return res, nil
}

// exec runs one statement on the store's DB handle.
func (e *scaleEnv) exec(q string, args ...any) error {
	return e.st.DB(e.ctx).Exec(q, args...).Error
}

// insertRows plants n rows into base's table with multi-row INSERTs.
func (e *scaleEnv) insertRows(base string, cols []string, n int, row func(i int) []any) error {
	if n <= 0 {
		return nil
	}
	per := min(1000, 30000/len(cols))
	tuple := "(" + strings.TrimSuffix(strings.Repeat("?, ", len(cols)), ", ") + ")"
	head := "INSERT INTO " + e.st.Table(base) + " (" + strings.Join(cols, ", ") + ") VALUES "
	for done := 0; done < n; done += per {
		k := min(per, n-done)
		args := make([]any, 0, k*len(cols))
		var sb strings.Builder
		sb.WriteString(head)
		for j := range k {
			if j > 0 {
				sb.WriteString(", ")
			}
			sb.WriteString(tuple)
			args = append(args, row(done+j)...)
		}
		if err := e.exec(sb.String(), args...); err != nil {
			return fmt.Errorf("plant %s: %w", base, err)
		}
	}
	return nil
}

func sp(s string) *string { return &s }

// deref returns *p, or nil for a nil pointer (a NULL parameter).
func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

func runningMeta() duroxide.ExecutionMetadata {
	return duroxide.ExecutionMetadata{Status: sp(duroxide.StatusRunning), OrchestrationName: sp("Orch"), OrchestrationVersion: sp("1.0.0")}
}

func scaleEvent(inst string, id uint64, k duroxide.EventKind) duroxide.Event {
	return duroxide.Event{EventID: id, InstanceID: inst, ExecutionID: 1, TimestampMS: uint64(time.Now().UnixMilli()), DuroxideVersion: "0.1.29", Kind: k}
}

// fetchAck fetches the next orchestration item (it must be inst's) and
// acks it with no new history.
func (e *scaleEnv) fetchAck(inst string, meta duroxide.ExecutionMetadata, delta ...duroxide.Event) error {
	p := e.st.Provider()
	it, err := p.FetchOrchestrationItem(e.ctx, time.Minute, 0, nil)
	if err != nil {
		return err
	}
	if it == nil || it.Instance != inst {
		return fmt.Errorf("fetch: got %v, want instance %s", it, inst)
	}
	return p.AckOrchestrationItem(e.ctx, it.LockToken, duroxide.OrchestrationAck{ExecutionID: it.ExecutionID, HistoryDelta: delta, Metadata: meta})
}

// startInstance starts inst through the API (first turn acked, Running).
func (e *scaleEnv) startInstance(inst string) error {
	p := e.st.Provider()
	if err := p.EnqueueForOrchestrator(e.ctx, &duroxide.StartOrchestration{Instance: inst, Orchestration: "Orch", Input: "{}",
		Version: sp("1.0.0"), ExecutionID: 1}, 0); err != nil {
		return err
	}
	return e.fetchAck(inst, runningMeta(), scaleEvent(inst, 1, &duroxide.OrchestrationStartedEvent{Name: "Orch", Version: "1.0.0", Input: "{}"}))
}

func (e *scaleEnv) raise(inst string) error {
	return e.st.Provider().EnqueueForOrchestrator(e.ctx, &duroxide.ExternalRaised{Instance: inst, Name: "x", Data: "d"}, 0)
}

// setup writes, through the public API, the sessions and instances the
// measurements use and the template rows the planting clones.
func (e *scaleEnv) setup() error {
	ss := e.st.Sessions()
	for _, id := range []*uuid.UUID{&e.owner, &e.msgSess, &e.qSess} {
		s := repo.NewSession()
		if err := ss.Save(e.ctx, s); err != nil {
			return err
		}
		*id = s.ID
	}
	p := e.st.Provider()
	// template: a completed root instance (2 history events).
	if err := e.startInstance("tpl"); err != nil {
		return fmt.Errorf("template instance: %w", err)
	}
	if err := e.raise("tpl"); err != nil {
		return err
	}
	if err := e.fetchAck("tpl", duroxide.ExecutionMetadata{Status: sp(duroxide.StatusCompleted), Output: sp("done")},
		scaleEvent("tpl", 2, &duroxide.OrchestrationCompletedEvent{Output: "done"})); err != nil {
		return fmt.Errorf("complete template: %w", err)
	}
	db := e.st.DB(e.ctx)
	var inst models.Instance
	if err := db.Where("instance_id = ?", "tpl").Take(&inst).Error; err != nil {
		return err
	}
	var ex models.Execution
	if err := db.Where("instance_id = ?", "tpl").Take(&ex).Error; err != nil {
		return err
	}
	var hist []models.HistoryEvent
	if err := db.Where("instance_id = ?", "tpl").Order("event_id").Find(&hist).Error; err != nil {
		return err
	}
	e.tplInst = []any{"", inst.OrchestrationName, deref(inst.OrchestrationVersion), inst.CurrentExecutionID, inst.CreatedAt, inst.UpdatedAt, inst.CustomStatusVersion}
	e.tplExec = []any{"", ex.ExecutionID, ex.Status, deref(ex.Output), ex.StartedAt, deref(ex.CompletedAt)}
	for _, h := range hist {
		e.tplHist = append(e.tplHist, []any{"", h.ExecutionID, h.EventID, h.EventType, "", h.CreatedAt})
		e.tplEvt = append(e.tplEvt, h.EventData)
	}
	// the instances measured: busy (locked for the run), other (fetched
	// and acked while busy's backlog grows), hist (N/10 events).
	for _, inst := range []string{"busy", "other", "hist"} {
		if err := e.startInstance(inst); err != nil {
			return fmt.Errorf("start %s: %w", inst, err)
		}
	}
	e.history = 1
	if err := e.raise("busy"); err != nil {
		return err
	}
	held, err := p.FetchOrchestrationItem(e.ctx, scaleLock, 0, nil)
	if err != nil || held == nil || held.Instance != "busy" {
		return fmt.Errorf("lock busy: %v %v", held, err)
	}
	if err := e.raise("busy"); err != nil { // one unlocked message: the clone template
		return err
	}
	var oq models.OrchestratorQueueItem
	if err := db.Where("instance_id = ? AND lock_token IS NULL", "busy").Take(&oq).Error; err != nil {
		return err
	}
	e.oqRow = []any{oq.InstanceID, oq.WorkItem, oq.VisibleAt, oq.CreatedAt, 0}
	e.oqueue = 1
	if err := p.EnqueueForWorker(e.ctx, &duroxide.ActivityExecute{Instance: "wq", ExecutionID: 1, ID: 2, Name: "noop", Input: "{}"}); err != nil {
		return err
	}
	var wq models.WorkerQueueItem
	if err := db.Take(&wq).Error; err != nil {
		return err
	}
	e.wqRow = []any{wq.WorkItem, wq.VisibleAt, wq.CreatedAt, 0, deref(wq.InstanceID), deref(wq.ExecutionID), deref(wq.ActivityID)}
	e.wqueue = 1
	// 10 Running instances among the N.
	if err := e.plantInstances(10, duroxide.StatusRunning); err != nil {
		return err
	}
	e.instances = 14
	return nil
}

// plantInstances clones n root instances from the template (2 history
// events each), with status Completed (completed at e.clock) or Running.
func (e *scaleEnv) plantInstances(n int, status string) error {
	ids := make([]string, n)
	for i := range ids {
		e.serial++
		ids[i] = fmt.Sprintf("c-%08d", e.serial)
	}
	now := time.Now().UnixMilli()
	if err := e.insertRows(models.TableInstances, instanceCols, n, func(i int) []any {
		r := slices.Clone(e.tplInst)
		r[0], r[4], r[5] = ids[i], now, now
		return r
	}); err != nil {
		return err
	}
	if err := e.insertRows(models.TableExecutions, execCols, n, func(i int) []any {
		r := slices.Clone(e.tplExec)
		r[0], r[2], r[4] = ids[i], status, now
		if status == duroxide.StatusRunning {
			r[3], r[5] = nil, nil
		} else {
			r[5] = e.clock
		}
		return r
	}); err != nil {
		return err
	}
	hn := len(e.tplHist)
	if status == duroxide.StatusRunning {
		hn = 1 // started only
	}
	return e.insertRows(models.TableHistory, histCols, n*hn, func(i int) []any {
		k := i % hn
		r := slices.Clone(e.tplHist[k])
		r[0] = ids[i/hn]
		r[4] = strings.ReplaceAll(e.tplEvt[k], `"tpl"`, `"`+ids[i/hn]+`"`)
		return r
	})
}

// grow plants rows until every table holds N of its kind.
func (e *scaleEnv) grow(n int) error {
	now := time.Now().UTC().Truncate(time.Microsecond)
	// sessions of one tenant, distinct updated_at (1 ms apart, in the past)
	add := n - e.sessions
	base := e.sessions
	if err := e.insertRows(models.TableSessions, []string{"id", "tenant_id", "created_at", "updated_at"}, add, func(i int) []any {
		t := now.Add(-time.Duration(n-base-i) * time.Millisecond).Add(-time.Hour)
		return []any{uuid.New(), e.tenant, t, t}
	}); err != nil {
		return err
	}
	e.sessions = n
	// finished session-queue items of owner
	if err := e.insertRows(models.TableQueue, []string{"id", "session_id", "content", "status", "attempts", "created_at", "processed_at"},
		n-e.queued, func(i int) []any {
			t := now.Add(-24 * time.Hour)
			return []any{uuid.New(), e.owner, `{"job":1}`, "completed", 1, t, t}
		}); err != nil {
		return err
	}
	e.queued = n
	// messages of msgSess, through the API in batches of 1000
	ss := e.st.Sessions()
	for e.messages < n {
		k := min(1000, n-e.messages)
		msgs := make([]repo.Message, k)
		for i := range msgs {
			msgs[i] = textMsg(fmt.Sprintf("s-%d", e.messages+i), repo.RoleUser, msgText)
			msgs[i].Usage = &repo.TokenUsage{InputTokens: 100, OutputTokens: 20}
		}
		if _, err := ss.AppendMessages(e.ctx, e.msgSess, msgs...); err != nil {
			return err
		}
		e.messages += k
	}
	if !e.rare { // the selective term of search_selective
		msgs := make([]repo.Message, 10)
		for i := range msgs {
			msgs[i] = textMsg(fmt.Sprintf("rare-%d", i), repo.RoleUser, fmt.Sprintf("a zanzibar note %d", i))
		}
		if _, err := ss.AppendMessages(e.ctx, e.msgSess, msgs...); err != nil {
			return err
		}
		e.rare = true
	}
	// instances: N in all (10 Running planted and 4 made through the API in setup)
	if k := n - e.instances; k > 0 {
		if err := e.plantInstances(k, duroxide.StatusCompleted); err != nil {
			return err
		}
	}
	e.instances = n
	// busy's backlog of unlocked messages
	if err := e.insertRows(models.TableOrchestratorQueue, oqCols, n-e.oqueue, func(int) []any { return e.oqRow }); err != nil {
		return err
	}
	e.oqueue = n
	// pending work items
	if err := e.insertRows(models.TableWorkerQueue, wqCols, n-e.wqueue, func(int) []any { return e.wqRow }); err != nil {
		return err
	}
	e.wqueue = n
	// hist: N/10 events, through the API
	p := e.st.Provider()
	for e.history < n/10 {
		k := min(1000, n/10-e.history)
		evs := make([]duroxide.Event, k)
		for i := range evs {
			evs[i] = scaleEvent("hist", uint64(e.history+i+1), &duroxide.ExternalEventEvent{Name: "x", Data: msgText})
		}
		if err := p.AppendWithExecution(e.ctx, "hist", 1, evs); err != nil {
			return err
		}
		e.history += k
	}
	return e.analyze() // what autovacuum (PG), PRAGMA optimize (SQLite) or InnoDB's automatic statistics (MariaDB) would have done
}

// analyze refreshes the optimizer statistics of the store's tables:
// ANALYZE on PostgreSQL and SQLite, ANALYZE TABLE of every table of the
// store's database on MariaDB (persistent InnoDB statistics; InnoDB
// recalculates them by itself only after 10 % of a table changed).
func (e *scaleEnv) analyze() error {
	if e.d != "mariadb" {
		return e.exec("ANALYZE")
	}
	var tables []string
	if err := e.st.DB(e.ctx).Raw("SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE() AND table_type = 'BASE TABLE'").
		Scan(&tables).Error; err != nil {
		return err
	}
	for i, t := range tables {
		tables[i] = quoteIdent(t)
	}
	if len(tables) == 0 {
		return nil
	}
	return e.exec("ANALYZE TABLE " + strings.Join(tables, ", "))
}

// scaleRun is one op on one store: setup (untimed, may be nil) runs
// before each timed call of op.
type scaleRun struct {
	reps      int
	setup, op func() error
}

// timeInterleaved runs one warm-up round and then up to reps rounds; each
// round calls every run's setup and op once, in N order. It returns each
// run's median (nil runs are skipped) and stops after 3 rounds once the op
// has taken more than 8 s in all.
func timeInterleaved(runs []*scaleRun) ([]time.Duration, error) {
	reps := 0
	for _, r := range runs {
		if r != nil {
			reps = max(reps, r.reps)
		}
	}
	ts := make([][]time.Duration, len(runs))
	var spent time.Duration
	for round := range reps + 1 {
		for i, r := range runs {
			if r == nil {
				continue
			}
			if r.setup != nil {
				if err := r.setup(); err != nil {
					return nil, fmt.Errorf("setup: %w", err)
				}
			}
			t0 := time.Now()
			if err := r.op(); err != nil {
				return nil, err
			}
			d := time.Since(t0)
			spent += d
			if round > 0 {
				ts[i] = append(ts[i], d)
			}
		}
		if round >= 3 && spent > 8*time.Second {
			break
		}
	}
	out := make([]time.Duration, len(runs))
	for i := range ts {
		out[i] = median(ts[i])
	}
	return out, nil
}

// runs returns every op at this store's N, by op key.
func (e *scaleEnv) runs(n int) map[string]*scaleRun {
	out := map[string]*scaleRun{}
	add := func(key string, reps int, setup, op func() error) {
		out[key] = &scaleRun{reps: reps, setup: setup, op: op}
	}
	ctx := e.ctx
	ss, q := e.st.Sessions(), e.st.SessionQueue()
	p, a := e.st.Provider(), e.st.ProviderAdmin()
	const reps = 25

	// List: walk with the biggest pages to the position half-way, then
	// time the page after it.
	for _, c := range []struct {
		key    string
		tenant *string
	}{{"list_halfway_tenant", &e.tenant}, {"list_halfway", nil}} {
		var after *repo.Cursor
		for seen := 0; seen < n/2; {
			pg, err := ss.List(ctx, repo.ListParams{TenantID: c.tenant, After: after, Limit: min(repo.MaxListLimit, n/2-seen)})
			if err != nil || pg.Next == nil {
				e.b.skipf("scale", e.d, c.key, "walk to half-way: %v", err)
				after = nil
				break
			}
			seen += len(pg.Sessions)
			after = pg.Next
		}
		if after == nil {
			continue
		}
		add(c.key, reps, nil, func() error {
			pg, err := ss.List(ctx, repo.ListParams{TenantID: c.tenant, After: after, Limit: 100})
			if err == nil && len(pg.Sessions) != 100 {
				err = fmt.Errorf("page of %d sessions, want 100", len(pg.Sessions))
			}
			return err
		})
	}

	var victim uuid.UUID
	add("delete_empty_session", 35, func() error {
		s := repo.NewSession()
		err := ss.Save(ctx, s)
		victim = s.ID // Save assigns it
		return err
	}, func() error {
		ok, err := ss.Delete(ctx, victim)
		if err == nil && !ok {
			err = errors.New("nothing deleted")
		}
		return err
	})

	add("cleanup_expired_20", 11, func() error {
		exp := time.Now().Add(-time.Minute)
		for range 20 {
			s := repo.NewSession()
			s.ExpiresAt = &exp
			if err := ss.Save(ctx, s); err != nil {
				return err
			}
		}
		return nil
	}, func() error {
		k, err := ss.CleanupExpired(ctx, 100)
		if err == nil && k != 20 {
			err = fmt.Errorf("cleaned %d sessions, want 20", k)
		}
		return err
	})

	add("fetch_ack_locked_backlog", reps, func() error { return e.raise("other") },
		func() error { return e.fetchAck("other", runningMeta()) })

	add("list_running_page", reps, nil, func() error {
		ids, _, err := a.ListInstancesByStatusPage(ctx, duroxide.StatusRunning, repo.PageParams{Limit: 10})
		if err == nil && len(ids) != 10 {
			err = fmt.Errorf("%d ids, want 10", len(ids))
		}
		return err
	})
	add("list_completed_page", reps, nil, func() error {
		ids, _, err := a.ListInstancesByStatusPage(ctx, duroxide.StatusCompleted, repo.PageParams{Limit: 10})
		if err == nil && len(ids) != 10 {
			err = fmt.Errorf("%d ids, want 10", len(ids))
		}
		return err
	})

	cutoff := time.UnixMilli(e.clock - 3600_000)
	add("delete_bulk_none", reps, nil, func() error {
		r, err := a.DeleteInstanceBulk(ctx, duroxide.InstanceFilter{CompletedBefore: &cutoff, Limit: 100})
		if err == nil && r.InstancesDeleted != 0 {
			err = fmt.Errorf("deleted %d instances, want 0", r.InstancesDeleted)
		}
		return err
	})
	add("delete_bulk_limit100", 7, func() error {
		return e.plantInstances(100, duroxide.StatusCompleted) // keeps N
	}, func() error {
		r, err := a.DeleteInstanceBulk(ctx, duroxide.InstanceFilter{Limit: 100})
		if err == nil && r.InstancesDeleted != 100 {
			err = fmt.Errorf("deleted %d instances, want 100", r.InstancesDeleted)
		}
		return err
	})

	add("system_metrics", reps, nil, func() error {
		m, err := a.GetSystemMetrics(ctx)
		if err == nil && m.TotalInstances < int64(n) {
			err = fmt.Errorf("TotalInstances %d, want >= %d", m.TotalInstances, n)
		}
		return err
	})
	ext := e.st.ProviderAdminExt()
	add("system_metrics_estimate", reps, nil, func() error {
		_, err := ext.GetSystemMetricsEstimate(ctx, duroxide.EstimateOptions{})
		return err
	})

	want := max(n/10, 1)
	add("read_history", 7, nil, func() error {
		evs, err := p.Read(ctx, "hist")
		if err == nil && len(evs) != want {
			err = fmt.Errorf("read %d events, want %d", len(evs), want)
		}
		return err
	})
	add("fetch_ack_history", 7, func() error { return e.raise("hist") },
		func() error { return e.fetchAck("hist", runningMeta()) })

	if e.d == "mariadb" { // no Searcher on MariaDB yet (docs/mariadb.md)
		if n == 1000 {
			e.b.skipf("scale", e.d, "search_selective, search_common", "Search is not implemented on MariaDB (ErrInvalidConfig)")
		}
	} else {
		e.addSearch(add)
	}

	// controls
	add("control_load_lastn", reps, nil, func() error {
		s, err := ss.Load(ctx, e.msgSess, repo.LoadOptions{LastN: 20})
		if err == nil && len(s.Messages) != 20 {
			err = fmt.Errorf("loaded %d messages, want 20", len(s.Messages))
		}
		return err
	})
	add("control_append", 51, nil, func() error {
		_, err := ss.AppendMessages(ctx, e.msgSess, textMsg("", repo.RoleAssistant, "reply"))
		return err
	})
	add("control_enqueue", 51, nil, func() error {
		_, err := q.Enqueue(ctx, e.qSess, `{"job":2}`, 0)
		return err
	})
	add("control_dequeue_complete", 51, nil, func() error {
		it, err := q.Dequeue(ctx, e.qSess, repo.DequeueParams{Owner: "w", Lease: time.Minute})
		if err != nil {
			return err
		}
		if it == nil {
			return errors.New("queue empty")
		}
		return q.Complete(ctx, it.Lease())
	})
	add("control_fetch_ack_work", 51, nil, func() error {
		l, err := p.FetchWorkItem(ctx, time.Minute, 0, nil, duroxide.TagFilter{})
		if err != nil {
			return err
		}
		if l == nil {
			return errors.New("worker queue empty")
		}
		return p.AckWorkItem(ctx, l.LockToken, nil)
	})
	add("control_instance_info", 51, nil, func() error {
		_, err := a.GetInstanceInfo(ctx, "other")
		return err
	})
	add("list_running_all", reps, nil, func() error {
		ids, err := a.ListInstancesByStatus(ctx, duroxide.StatusRunning)
		if err == nil && len(ids) != 13 { // the 10 planted and busy, other, hist
			err = fmt.Errorf("%d ids, want 13", len(ids))
		}
		return err
	})
	if err := e.pollRuns(n, add); err != nil {
		e.b.skipf("scale", e.d, "poll rows", "N=%d: %v", n, err)
	}
	return out
}

// addSearch adds the two Search rows.
func (e *scaleEnv) addSearch(add func(key string, reps int, setup, op func() error)) {
	ctx, ss, reps := e.ctx, e.st.Sessions(), 25
	add("search_selective", reps, nil, func() error {
		page, err := ss.Search(ctx, repo.SearchParams{Query: "zanzibar"})
		if err == nil && len(page.Hits) != 10 {
			err = fmt.Errorf("search: %d hits, want 10", len(page.Hits))
		}
		return err
	})
	add("search_common", 11, nil, func() error {
		page, err := ss.Search(ctx, repo.SearchParams{Query: "moderate"})
		if err == nil && len(page.Hits) != repo.DefaultSearchLimit {
			err = fmt.Errorf("search: %d hits, want %d", len(page.Hits), repo.DefaultSearchLimit)
		}
		return err
	})
}

// growth returns the per-decade growth of v (geometric mean over the
// measured decades) and each decade's ratio.
func growth(v []float64) (float64, []float64) {
	var per []float64
	first, last := math.NaN(), math.NaN()
	for i := range v {
		if v[i] > 0 {
			if math.IsNaN(first) {
				first = v[i]
			}
			last = v[i]
		}
		if i > 0 && v[i] > 0 && v[i-1] > 0 {
			per = append(per, v[i]/v[i-1])
		}
	}
	if len(per) == 0 {
		return math.NaN(), nil
	}
	return math.Pow(last/first, 1/float64(len(per))), per
}

func fmtMS(v float64) string {
	if math.IsNaN(v) || v <= 0 {
		return "—"
	}
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 1:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.3f", v)
	}
}

// growthCell renders "1.02 (0.98, 1.06)" and whether the row grows: the
// mean or the last decade above scaleGrowsAt.
func growthCell(v []float64) (string, bool) {
	g, per := growth(v)
	if math.IsNaN(g) {
		return "—", false
	}
	parts := make([]string, len(per))
	for i, r := range per {
		parts[i] = fmt.Sprintf("%.2f", r)
	}
	grows := g > scaleGrowsAt || per[len(per)-1] > scaleGrowsAt
	s := fmt.Sprintf("%.2f", g)
	if len(per) > 1 {
		s += " (" + strings.Join(parts, ", ") + ")"
	}
	if grows {
		s = "**" + s + " grows**"
	}
	return s, grows
}

// printScale writes the -scale Markdown table.
func (b *bench) printScale(w io.Writer, ns []int, results map[string]map[string][]float64, took time.Duration) {
	fmt.Fprintf(w, "# agentstore bench -scale (%s, %d CPUs, took %v)\n\n", runtime.Version(), runtime.NumCPU(), took.Round(time.Second))
	var hdr []string
	for _, n := range ns {
		hdr = append(hdr, fmt.Sprintf("1e%d", int(math.Round(math.Log10(float64(n))))))
	}
	fmt.Fprintf(w, "Median ms at N = %s; growth per decade = (median at the largest N / at the smallest)^(1/decades), each decade's ratio in brackets; **grows** = mean or last decade > %.1f×.\n\n",
		strings.Join(hdr, " · "), scaleGrowsAt)
	fmt.Fprint(w, "| operation |")
	for _, d := range b.dialects {
		name := map[string]string{"sqlite": "SQLite", "postgres": "PostgreSQL", "mariadb": "MariaDB"}[d]
		fmt.Fprintf(w, " %s ms (%s) | %s /10× |", name, strings.Join(hdr, " · "), name)
	}
	fmt.Fprintln(w)
	fmt.Fprint(w, "|---|")
	for range b.dialects {
		fmt.Fprint(w, "---:|---|")
	}
	fmt.Fprintln(w)
	for _, op := range scaleOps {
		measured := false
		for _, d := range b.dialects {
			for _, v := range results[d][op.key] {
				measured = measured || v > 0
			}
		}
		if !measured {
			continue
		}
		label := op.label
		if op.inherent {
			label += " (grows by design)"
		}
		fmt.Fprintf(w, "| %s |", label)
		for _, d := range b.dialects {
			v := results[d][op.key]
			cells := make([]string, len(v))
			for i := range v {
				cells[i] = fmtMS(v[i])
			}
			g, _ := growthCell(v)
			if op.inherent {
				g = strings.ReplaceAll(strings.ReplaceAll(g, "**", ""), " grows", "")
			}
			fmt.Fprintf(w, " %s | %s |", strings.Join(cells, " · "), g)
		}
		fmt.Fprintln(w)
	}
	if len(b.skips) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "Not run:")
		fmt.Fprintln(w)
		for _, s := range b.skips {
			fmt.Fprintf(w, "- %s / %s / %s: %s\n", s.Scenario, s.Dialect, s.Subject, strings.ReplaceAll(firstLines(s.Reason, 3), "\n", " "))
		}
	}
}
