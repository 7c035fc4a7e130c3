package main

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cschleiden/go-workflows/backend"
	"github.com/cschleiden/go-workflows/backend/monoprocess"
	gwmysql "github.com/cschleiden/go-workflows/backend/mysql"
	gwsqlite "github.com/cschleiden/go-workflows/backend/sqlite"
	"github.com/cschleiden/go-workflows/client"
	"github.com/cschleiden/go-workflows/core"
	"github.com/cschleiden/go-workflows/worker"
	"github.com/cschleiden/go-workflows/workflow"
	"github.com/dbos-inc/dbos-transact-golang/dbos"
	_ "github.com/go-sql-driver/mysql" // database/sql driver "mysql" (creating go-workflows' database)
	"golang.org/x/sync/errgroup"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/orchloop"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// benchOrchestration: N orchestrations, each start -> one activity ->
// complete. agentstore runs the orchloop (examples/orchestration) with 2
// orchestrator and 2 worker loops (-orch-loops); go-workflows v1.2.0 runs the same
// workflow on SQLite (with its SQLite run) and on MySQL/MariaDB (with the
// PostgreSQL run); DBOS v1.8.0 runs it through its durable queue on
// PostgreSQL (8 workers, 10 ms poll); with -dialects mariadb agentstore
// runs on MariaDB beside go-workflows' MySQL backend on the same server
// (which then leaves the PostgreSQL run). Each run creates the N instances one
// by one while the workers run and stops when the last result is in.
func (b *bench) benchOrchestration(ctx context.Context, d string) {
	const sc = "orchestration"
	n := b.sz.orchestrations
	switch d {
	case "sqlite":
		as, err := b.medianOf(func() (float64, error) { return b.agentstoreOrch(ctx, d) })
		if err != nil {
			b.skipf(sc, d, "agentstore", "%v", err)
		} else {
			b.add(sc, d, fmt.Sprintf("agentstore orchloop, %d orchestrator + %d worker loops, %d wf", b.orchLoops, b.orchWorkers, n), as, "wf/s")
		}
		gw, err := b.medianOf(func() (float64, error) { return b.goWorkflows(ctx, "sqlite") })
		if err != nil {
			b.skipf(sc, "sqlite", "go-workflows v1.2.0 sqlite", "%v", err)
		} else {
			b.add(sc, "sqlite", fmt.Sprintf("go-workflows v1.2.0 sqlite+monoprocess, %d wf", n), gw, "wf/s")
		}
		b.ratio(sc, "sqlite", "orchestration_vs_goworkflows_sqlite", as, gw)
	case "postgres":
		// agentstore and DBOS alternate round by round (a shared machine's
		// load then hits both alike); each round's CPU per workflow (every
		// postgres process, and this process) is logged
		var asVals, dbVals []float64
		var asErr, dbErr error
		for r := range b.rounds {
			if v, err := b.orchCPU(fmt.Sprintf("agentstore round %d", r+1), func() (float64, error) {
				return labelled("agentstore", func() (float64, error) { return b.agentstoreOrch(ctx, d) })
			}); err != nil {
				asErr = err
			} else {
				asVals = append(asVals, v)
			}
			if v, err := b.orchCPU(fmt.Sprintf("DBOS round %d", r+1), func() (float64, error) { return labelled("dbos", func() (float64, error) { return b.dbosQueue(ctx) }) }); err != nil {
				dbErr = err
			} else {
				dbVals = append(dbVals, v)
			}
		}
		as, db := medianRate(asVals), medianRate(dbVals)
		if as == 0 {
			b.skipf(sc, d, "agentstore", "%v", asErr)
		} else {
			b.add(sc, d, fmt.Sprintf("agentstore orchloop, %d orchestrator + %d worker loops, %d wf", b.orchLoops, b.orchWorkers, n), as, "wf/s")
		}
		if !slices.Contains(b.dialects, "mariadb") { // else beside agentstore on MariaDB
			gw, err := b.goWorkflows(ctx, "mysql")
			if err != nil {
				b.skipf(sc, "mysql", "go-workflows v1.2.0 mysql", "%v", err)
			} else {
				b.add(sc, "mysql", fmt.Sprintf("go-workflows v1.2.0 mysql+monoprocess (MariaDB), %d wf", n), gw, "wf/s")
			}
			b.ratio(sc, "postgres", "orchestration_vs_goworkflows_mysql", as, gw)
		}
		if db == 0 {
			b.skipf(sc, "postgres", "DBOS v1.8.0 queue", "%v", dbErr)
		} else {
			b.add(sc, "postgres", fmt.Sprintf("DBOS v1.8.0 durable queue (8 workers, 10 ms poll), %d wf", n), db, "wf/s")
		}
		b.ratio(sc, "postgres", "orchestration_vs_dbos", as, db)
	case "mariadb":
		// agentstore on MariaDB and go-workflows' MySQL backend on the
		// same server (-mysql), alternating round by round
		var asVals, gwVals []float64
		var asErr, gwErr error
		for range b.rounds {
			if v, err := b.agentstoreOrch(ctx, d); err != nil {
				asErr = err
			} else {
				asVals = append(asVals, v)
			}
			if gwErr != nil && len(gwVals) == 0 {
				continue // it cannot run here: do not retry every round
			}
			if v, err := b.goWorkflows(ctx, "mysql"); err != nil {
				gwErr = err
			} else {
				gwVals = append(gwVals, v)
			}
		}
		as, gw := medianRate(asVals), medianRate(gwVals)
		if as == 0 {
			b.skipf(sc, d, "agentstore", "%v", asErr)
		} else {
			b.add(sc, d, fmt.Sprintf("agentstore orchloop, %d orchestrator + %d worker loops, %d wf", b.orchLoops, b.orchWorkers, n), as, "wf/s")
		}
		if gw == 0 {
			b.skipf(sc, d, "go-workflows v1.2.0 mysql", "%v", gwErr)
		} else {
			b.add(sc, d, fmt.Sprintf("go-workflows v1.2.0 mysql+monoprocess, %d wf", n), gw, "wf/s")
		}
		b.ratio(sc, d, "orchestration_vs_goworkflows_mysql", as, gw)
	}
}

// labelled runs fn with the pprof label side=side (goroutines it starts
// inherit it), so a -cpuprofile splits the two sides of a comparison
// (go tool pprof -tagfocus side=agentstore).
func labelled(side string, fn func() (float64, error)) (v float64, err error) {
	pprof.Do(context.Background(), pprof.Labels("side", side), func(context.Context) { v, err = fn() })
	return v, err
}

// medianRate is the median of vals (0 when empty).
func medianRate(vals []float64) float64 {
	if len(vals) == 0 {
		return 0
	}
	slices.Sort(vals)
	return vals[len(vals)/2]
}

// orchCPU runs one orchestration round and logs its rate and its CPU per
// workflow while the workflows ran (measure records it in b.orchSpent):
// server (every process named postgres on this machine, so a shared
// server's other work counts too) and client (this process).
func (b *bench) orchCPU(what string, measure func() (float64, error)) (float64, error) {
	b.orchSpent = cpuSpan{}
	v, err := measure()
	if err != nil {
		return 0, err
	}
	if sp := b.orchSpent; sp.ok {
		n := time.Duration(b.sz.orchestrations)
		b.logf("   %s: %.0f wf/s, CPU per workflow: server %v, client %v", what, v,
			(sp.server / n).Round(time.Microsecond), (sp.client / n).Round(time.Microsecond))
	}
	return v, nil
}

// cpuSpan is the CPU spent between cpuStart and its end (see cpuNow).
type cpuSpan struct {
	server, client time.Duration
	ok             bool
}

// cpuStart returns a function that, called at the end of the span,
// records it in *into.
func cpuStart(into *cpuSpan) func() {
	srv0, cli0, ok := cpuNow()
	return func() {
		srv1, cli1, ok1 := cpuNow()
		*into = cpuSpan{server: srv1 - srv0, client: cli1 - cli0, ok: ok && ok1}
	}
}

// oneActivity is the agentstore orchestration: one activity, then complete.
func oneActivity(c *orchloop.Ctx, input string) (string, bool, error) {
	return c.Activity("inc", input)
}

func incActivity(_ context.Context, in string) (string, error) {
	i, err := strconv.Atoi(in)
	if err != nil {
		return "", err
	}
	return strconv.Itoa(i + 1), nil
}

func (b *bench) agentstoreOrch(ctx context.Context, d string) (float64, error) {
	var tr *orchTrace
	var extra []agentstore.Option
	if os.Getenv("BENCH_ORCH_TRACE") != "" {
		tr = newOrchTrace()
		extra = append(extra, agentstore.WithLogger(tr))
	}
	st, cleanup, err := b.openStore(ctx, d, "orch", "", extra...)
	if err != nil {
		return 0, err
	}
	defer cleanup()
	n := b.sz.orchestrations
	var prov duroxide.Provider = st.Provider()
	var admin duroxide.ProviderAdmin = st.ProviderAdmin()
	if tr != nil {
		prov, admin = tracedProvider{Provider: prov, t: tr}, tracedAdmin{ProviderAdmin: admin, t: tr}
	}
	eng := &orchloop.Engine{
		P:              prov,
		Orchestrations: map[string]orchloop.Orchestration{"one": oneActivity},
		Activities:     map[string]orchloop.Activity{"inc": incActivity},
		PollTimeout:    100 * time.Millisecond,
	}
	loopCtx, stop := context.WithCancel(ctx)
	defer stop()
	g, gctx := errgroup.WithContext(loopCtx)
	for range b.orchLoops {
		g.Go(func() error { return eng.RunOrchestrator(gctx) })
	}
	for range b.orchWorkers {
		g.Go(func() error { return eng.RunWorker(gctx) })
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	ids := make([]string, n)
	endCPU := cpuStart(&b.orchSpent)
	t0 := time.Now()
	if tr != nil {
		tr.t0 = t0
	}
	for i := range ids {
		ids[i] = fmt.Sprintf("one-%d", i)
		if err := eng.Start(wctx, ids[i], "one", strconv.Itoa(i)); err != nil {
			return 0, err
		}
	}
	startsTook := time.Since(t0)
	infos, werr := orchloop.Wait(wctx, admin, ids, 10*time.Millisecond)
	el := time.Since(t0)
	if tr != nil {
		tr.report(b.logf, n, el)
		ps := st.SQLDB().Stats()
		b.logf("   trace pool: open %d, in use %d, waits %d (%v waiting for a connection)", ps.OpenConnections, ps.InUse, ps.WaitCount, ps.WaitDuration.Round(time.Millisecond))
	}
	// the starts alone against the whole run: which side limits the rate
	b.logf("   agentstore: starts took %v of %v", startsTook.Round(time.Millisecond), el.Round(time.Millisecond))
	endCPU()
	stop()
	if err := g.Wait(); err != nil {
		return 0, fmt.Errorf("loop: %w", err)
	}
	if werr != nil {
		return 0, werr
	}
	for i, info := range infos {
		if info.Status != duroxide.StatusCompleted || info.Output == nil || *info.Output != strconv.Itoa(i+1) {
			return 0, fmt.Errorf("instance %s: status %s output %v", info.InstanceID, info.Status, info.Output)
		}
	}
	return float64(n) / el.Seconds(), nil
}

// gwWorkflow is the go-workflows workflow: one activity, then complete.
func gwWorkflow(ctx workflow.Context, i int) (int, error) {
	return workflow.ExecuteActivity[int](ctx, workflow.DefaultActivityOptions, gwActivity, i).Get(ctx)
}

func gwActivity(_ context.Context, i int) (int, error) { return i + 1, nil }

// goWorkflows runs the workflow on go-workflows v1.2.0 (backend "sqlite"
// or "mysql"), with the monoprocess wrapper, default worker options
// (2 pollers, 200 ms poll) as in peers.md §7, results awaited in
// order by one waiter polling every 10 ms.
func (b *bench) goWorkflows(ctx context.Context, kind string) (float64, error) {
	var rate float64
	err := guard(func() error {
		rec := &errRecorder{}
		logger := slog.New(rec)
		var be backend.Backend
		switch kind {
		case "sqlite":
			path := filepath.Join(b.dir, "gw.sqlite")
			defer func() {
				for _, s := range []string{"", "-wal", "-shm"} {
					_ = os.Remove(path + s)
				}
			}()
			be = monoprocess.NewMonoprocessBackend(gwsqlite.NewSqliteBackend(path, gwsqlite.WithBackendOptions(backend.WithLogger(logger))))
		case "mysql":
			user, pass, host, port, err := parseMySQL(b.mysqlDSN)
			if err != nil {
				return err
			}
			admin, err := sql.Open("mysql", b.mysqlDSN)
			if err != nil {
				return err
			}
			_, err = admin.ExecContext(ctx, "DROP DATABASE IF EXISTS agentstore_bench_gw")
			if err == nil {
				_, err = admin.ExecContext(ctx, "CREATE DATABASE agentstore_bench_gw")
			}
			if err != nil {
				admin.Close()
				return fmt.Errorf("mysql %s: %w", b.mysqlDSN, err)
			}
			defer func() {
				_, _ = admin.ExecContext(context.Background(), "DROP DATABASE IF EXISTS agentstore_bench_gw")
				admin.Close()
			}()
			be = monoprocess.NewMonoprocessBackend(gwmysql.NewMysqlBackend(host, port, user, pass, "agentstore_bench_gw",
				gwmysql.WithBackendOptions(backend.WithLogger(logger)),
				gwmysql.WithMySQLOptions(func(db *sql.DB) { db.SetMaxOpenConns(pgPool); db.SetMaxIdleConns(pgPool) })))
		}
		defer be.Close()
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		w := worker.New(be, nil) // defaults: 2 workflow + 2 activity pollers, 200 ms poll
		if err := w.RegisterWorkflow(gwWorkflow); err != nil {
			return err
		}
		if err := w.RegisterActivity(gwActivity); err != nil {
			return err
		}
		if err := w.Start(wctx); err != nil {
			return err
		}
		c := client.New(be)
		n := b.sz.orchestrations
		// One waiter walks the instances in order, polling each one's state
		// every 10 ms (as orchloop.Wait does for agentstore), then reads
		// and checks its result.
		instances := make(chan *workflow.Instance, n)
		waitErr := make(chan error, 1)
		t0 := time.Now()
		go func() {
			var firstErr error
			for inst := range instances {
				if firstErr != nil {
					continue
				}
				deadline := time.Now().Add(30 * time.Second)
				for {
					s, err := c.GetWorkflowInstanceState(ctx, inst)
					if err != nil {
						firstErr = err
						break
					}
					if s == core.WorkflowInstanceStateFinished {
						break
					}
					// A backend that logs errors and finishes nothing within 3 s
					// cannot work here: fail fast (the first error says why).
					if time.Now().After(deadline) || (rec.first() != "none" && time.Since(t0) > 3*time.Second && inst.InstanceID == "wf-0") {
						firstErr = fmt.Errorf("%s did not finish (after %v); first error the backend logged: %s", inst.InstanceID, time.Since(t0).Round(time.Second), rec.first())
						break
					}
					time.Sleep(10 * time.Millisecond)
				}
				if firstErr != nil {
					continue
				}
				want, _ := strconv.Atoi(strings.TrimPrefix(inst.InstanceID, "wf-"))
				got, err := client.GetWorkflowResult[int](ctx, c, inst, time.Minute)
				if err == nil && got != want+1 {
					err = fmt.Errorf("%s returned %d, want %d", inst.InstanceID, got, want+1)
				}
				firstErr = err
			}
			waitErr <- firstErr
		}()
		for i := range n {
			inst, err := c.CreateWorkflowInstance(ctx, client.WorkflowInstanceOptions{InstanceID: fmt.Sprintf("wf-%d", i)}, gwWorkflow, i)
			if err != nil {
				close(instances)
				<-waitErr
				return err
			}
			instances <- inst
		}
		close(instances)
		firstErr := <-waitErr
		el := time.Since(t0)
		cancel()
		_ = w.WaitForCompletion()
		if firstErr != nil {
			return firstErr
		}
		rate = float64(n) / el.Seconds()
		return nil
	})
	return rate, err
}

// parseMySQL splits "user[:pass]@tcp(host:port)/" (or "user@host:port").
func parseMySQL(dsn string) (user, pass, host string, port int, err error) {
	at := strings.LastIndex(dsn, "@")
	if at < 0 {
		return "", "", "", 0, fmt.Errorf("mysql DSN %q: want user[:pass]@tcp(host:port)/", dsn)
	}
	user, pass, _ = strings.Cut(dsn[:at], ":")
	addr := strings.TrimSuffix(dsn[at+1:], "/")
	addr = strings.TrimSuffix(strings.TrimPrefix(addr, "tcp("), ")")
	h, p, ok := strings.Cut(addr, ":")
	if !ok {
		p = "3306"
	}
	port, err = strconv.Atoi(p)
	return user, pass, h, port, err
}

// dbosWorkflow is the DBOS workflow: one step, then complete.
func dbosWorkflow(ctx dbos.Context, i int) (int, error) {
	return dbos.RunAsStep(ctx, func(context.Context) (int, error) { return i + 1, nil })
}

// dbosQueue runs the workflow on DBOS Transact Go v1.8.0 through a durable
// queue with worker concurrency 8 and a 10 ms base poll (peers.md §7 D2).
func (b *bench) dbosQueue(ctx context.Context) (float64, error) {
	var rate float64
	err := guard(func() error {
		const schema = "bench_dbos"
		if err := b.dropSchema(ctx, schema); err != nil {
			return err
		}
		defer b.dropSchema(context.Background(), schema)
		logger := peerLogger()
		dctx, err := dbos.NewContext(ctx, dbos.Config{AppName: "agentstore-bench", DatabaseURL: b.pgDSN, DatabaseSchema: schema, Logger: logger})
		if err != nil {
			return err
		}
		defer dbos.Shutdown(dctx, 10*time.Second)
		dbos.RegisterWorkflow(dctx, dbosWorkflow)
		q, err := dbos.RegisterQueue(dctx, "bench", dbos.WithWorkerConcurrency(8), dbos.WithQueueBasePollingInterval(10*time.Millisecond))
		if err != nil {
			return err
		}
		if err := dbos.Launch(dctx); err != nil {
			return err
		}
		n := b.sz.orchestrations
		handles := make(chan dbos.WorkflowHandle[int], n)
		var wg sync.WaitGroup
		var mu sync.Mutex
		var firstErr error
		want := make(map[string]int, n)
		for range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for h := range handles {
					got, err := h.GetResult(dbos.WithHandlePollingInterval(10*time.Millisecond), dbos.WithHandleTimeout(5*time.Minute))
					mu.Lock()
					if err == nil && got != want[h.GetWorkflowID()] {
						err = fmt.Errorf("%s returned %d, want %d", h.GetWorkflowID(), got, want[h.GetWorkflowID()])
					}
					if err != nil && firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
			}()
		}
		endCPU := cpuStart(&b.orchSpent)
		t0 := time.Now()
		for i := range n {
			id := fmt.Sprintf("wf-%d", i)
			mu.Lock()
			want[id] = i + 1
			mu.Unlock()
			h, err := dbos.RunWorkflow(dctx, dbosWorkflow, i, dbos.WithQueue(q), dbos.WithWorkflowID(id))
			if err != nil {
				close(handles)
				wg.Wait()
				return err
			}
			handles <- h
		}
		startsTook := time.Since(t0)
		close(handles)
		wg.Wait()
		el := time.Since(t0)
		endCPU()
		b.logf("   DBOS: starts took %v of %v", startsTook.Round(time.Millisecond), el.Round(time.Millisecond))
		if firstErr != nil {
			return firstErr
		}
		rate = float64(n) / el.Seconds()
		return nil
	})
	return rate, err
}

// peerLogger silences the peers' logs unless BENCH_PEER_LOG is set.
func peerLogger() *slog.Logger {
	level := slog.LevelError + 4
	if os.Getenv("BENCH_PEER_LOG") != "" {
		level = slog.LevelWarn
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

// errRecorder is a slog.Handler that keeps the first error record (so a
// peer that cannot work here says why) and prints records when
// BENCH_PEER_LOG is set.
type errRecorder struct {
	mu  sync.Mutex
	msg string
}

func (r *errRecorder) Enabled(context.Context, slog.Level) bool { return true }

func (r *errRecorder) Handle(_ context.Context, rec slog.Record) error {
	if rec.Level < slog.LevelError {
		return nil
	}
	var b strings.Builder
	b.WriteString(rec.Message)
	rec.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	if os.Getenv("BENCH_PEER_LOG") != "" {
		fmt.Fprintln(os.Stderr, "peer:", b.String())
	}
	r.mu.Lock()
	if r.msg == "" {
		r.msg = b.String()
	}
	r.mu.Unlock()
	return nil
}

func (r *errRecorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *errRecorder) WithGroup(string) slog.Handler      { return r }

func (r *errRecorder) first() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.msg == "" {
		return "none"
	}
	return r.msg
}
