package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"
)

// noopArgs is the River job of the queue scenario.
type noopArgs struct {
	I int `json:"i"`
}

func (noopArgs) Kind() string { return "noop" }

// riverQueue opens River v0.51.2 for the queue scenario's drain in
// slices: a fresh, migrated schema (PostgreSQL, a pgx pool of 20) or
// database file (SQLite, one connection as riversqlite recommends), and a
// started client with 8 workers tuned as in peers.md §7 (FetchCooldown
// 2 ms, FetchPollInterval 20 ms) whose queue is paused. Each slice inserts
// its k no-op jobs with InsertManyFast (batches of 1000) while the queue
// is paused (not timed), then the clock runs from QueueResume until the
// k-th completion event (emitted after the completion is persisted), and
// the queue is paused again. Completed jobs stay in the table from slice
// to slice, as in one whole drain.
func (b *bench) riverQueue(ctx context.Context, d, sync string) (queueSubject, error) {
	workers := b.sz.queueWorkers
	switch d {
	case "mariadb":
		return queueSubject{}, errors.New("River v0.51.2 has no MySQL/MariaDB driver (riverpgxv5 and riversqlite only)")
	case "postgres":
		schema := "bench_river"
		if err := b.resetSchema(ctx, schema); err != nil {
			return queueSubject{}, err
		}
		drop := func() { _ = b.dropSchema(context.Background(), schema) }
		cfg, err := pgxpool.ParseConfig(b.pgDSN)
		if err != nil {
			drop()
			return queueSubject{}, err
		}
		cfg.ConnConfig.RuntimeParams["search_path"] = schema
		cfg.MaxConns = 20
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			drop()
			return queueSubject{}, err
		}
		cleanup := func() { pool.Close(); drop() }
		drv := riverpgxv5.New(pool)
		if err := riverMigrate(ctx, drv); err != nil {
			cleanup()
			return queueSubject{}, err
		}
		return riverSubject(ctx, drv, b.sz.queueItems, workers, cleanup)
	default:
		if sync == "" {
			sync = "NORMAL"
		}
		path := filepath.Join(b.dir, "river"+sync+".db")
		remove := func() {
			for _, s := range []string{"", "-wal", "-shm"} {
				_ = os.Remove(path + s)
			}
		}
		remove()
		db, err := sql.Open("sqlite3", "file:"+path+"?_journal_mode=WAL&_busy_timeout=5000&_txlock=immediate&_synchronous="+sync)
		if err != nil {
			return queueSubject{}, err
		}
		db.SetMaxOpenConns(1) // riversqlite's recommendation
		cleanup := func() { _ = db.Close(); remove() }
		drv := riversqlite.New(db)
		if err := riverMigrate(ctx, drv); err != nil {
			cleanup()
			return queueSubject{}, err
		}
		return riverSubject(ctx, drv, b.sz.queueItems, workers, cleanup)
	}
}

func riverMigrate[TTx any](ctx context.Context, drv riverdriver.Driver[TTx]) error {
	mig, err := rivermigrate.New(drv, &rivermigrate.Config{Logger: quietLogger()})
	if err != nil {
		return err
	}
	if _, err := mig.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("river migrate: %w", err)
	}
	return nil
}

// riverSubject starts a River client on drv (see riverQueue) and makes it
// a queue subject that drains by slices.
func riverSubject[TTx any](ctx context.Context, drv riverdriver.Driver[TTx], n, workers int, closeDB func()) (queueSubject, error) {
	ws := river.NewWorkers()
	river.AddWorker(ws, river.WorkFunc(func(context.Context, *river.Job[noopArgs]) error { return nil }))
	client, err := river.NewClient(drv, &river.Config{
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: workers}},
		Workers:           ws,
		FetchCooldown:     2 * time.Millisecond,
		FetchPollInterval: 20 * time.Millisecond,
		Logger:            quietLogger(),
	})
	if err != nil {
		closeDB()
		return queueSubject{}, err
	}
	events, cancelEvents := client.SubscribeConfig(&river.SubscribeConfig{ChanSize: n + 1000, Kinds: []river.EventKind{river.EventKindJobCompleted}})
	runCtx, cancelRun := context.WithCancel(context.Background())
	cleanup := func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		_ = client.Stop(sctx)
		cancelRun()
		cancelEvents()
		closeDB()
	}
	if err := client.Start(runCtx); err != nil {
		cleanup()
		return queueSubject{}, err
	}
	// the producer creates its queue's row when it starts
	for i := 0; ; i++ {
		err := client.QueuePause(ctx, river.QueueDefault, nil)
		if err == nil {
			break
		}
		if i == 200 {
			cleanup()
			return queueSubject{}, fmt.Errorf("river pause: %w", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	next := 0 // the next job's number
	slice := func(ctx context.Context, k int) (el time.Duration, err error) {
		err = guard(func() error {
			el, err = riverSliceOnce(ctx, client, events, next, k)
			return err
		})
		next += k
		return el, err
	}
	return queueSubject{cleanup: cleanup, slice: slice}, nil
}

// riverSliceOnce is one slice of riverSubject: jobs first..first+k-1.
func riverSliceOnce[TTx any](ctx context.Context, client *river.Client[TTx], events <-chan *river.Event, first, k int) (time.Duration, error) {
	for done := 0; done < k; done += 1000 {
		params := make([]river.InsertManyParams, 0, 1000)
		for i := done; i < min(k, done+1000); i++ {
			params = append(params, river.InsertManyParams{Args: noopArgs{I: first + i}})
		}
		if _, err := client.InsertManyFast(ctx, params); err != nil {
			return 0, fmt.Errorf("river insert: %w", err)
		}
	}
	wctx, stop := context.WithTimeout(ctx, 10*time.Minute)
	defer stop()
	t0 := time.Now()
	if err := client.QueueResume(wctx, river.QueueDefault, nil); err != nil {
		return 0, fmt.Errorf("river resume: %w", err)
	}
	for got := 0; got < k; {
		select {
		case <-events:
			got++
		case <-wctx.Done():
			return 0, fmt.Errorf("river completed %d of %d jobs: %w", got, k, wctx.Err())
		}
	}
	el := time.Since(t0)
	if err := client.QueuePause(ctx, river.QueueDefault, nil); err != nil {
		return 0, fmt.Errorf("river pause: %w", err)
	}
	return el, nil
}

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}
