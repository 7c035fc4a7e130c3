package main

import (
	"context"
	"database/sql"
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

// riverRate drains n no-op jobs with River v0.51.2 and 8 workers, tuned as
// in peers.md §7: FetchCooldown 2 ms, FetchPollInterval 20 ms; jobs are
// inserted first with InsertManyFast (batches of 1000), then the client
// starts. The clock stops when the last completion event (emitted after the
// completion is persisted) arrives.
func (b *bench) riverRate(ctx context.Context, d, sync string) (float64, error) {
	var rate float64
	err := guard(func() error {
		switch d {
		case "postgres":
			schema := "bench_river"
			if err := b.resetSchema(ctx, schema); err != nil {
				return err
			}
			defer b.dropSchema(context.Background(), schema)
			cfg, err := pgxpool.ParseConfig(b.pgDSN)
			if err != nil {
				return err
			}
			cfg.ConnConfig.RuntimeParams["search_path"] = schema
			cfg.MaxConns = 20
			pool, err := pgxpool.NewWithConfig(ctx, cfg)
			if err != nil {
				return err
			}
			defer pool.Close()
			drv := riverpgxv5.New(pool)
			mig, err := rivermigrate.New(drv, &rivermigrate.Config{Logger: quietLogger()})
			if err != nil {
				return err
			}
			if _, err := mig.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
				return fmt.Errorf("river migrate: %w", err)
			}
			rate, err = riverDrain(ctx, drv, b.sz.queueItems, b.sz.queueWorkers)
			return err
		default:
			if sync == "" {
				sync = "NORMAL"
			}
			path := filepath.Join(b.dir, "river"+sync+".db")
			defer func() {
				for _, s := range []string{"", "-wal", "-shm"} {
					_ = os.Remove(path + s)
				}
			}()
			db, err := sql.Open("sqlite3", "file:"+path+"?_journal_mode=WAL&_busy_timeout=5000&_txlock=immediate&_synchronous="+sync)
			if err != nil {
				return err
			}
			defer db.Close()
			db.SetMaxOpenConns(1) // riversqlite's recommendation
			drv := riversqlite.New(db)
			mig, err := rivermigrate.New(drv, &rivermigrate.Config{Logger: quietLogger()})
			if err != nil {
				return err
			}
			if _, err := mig.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
				return fmt.Errorf("river migrate: %w", err)
			}
			rate, err = riverDrain(ctx, drv, b.sz.queueItems, b.sz.queueWorkers)
			return err
		}
	})
	return rate, err
}

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func riverDrain[TTx any](ctx context.Context, drv riverdriver.Driver[TTx], n, workers int) (float64, error) {
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
		return 0, err
	}
	for done := 0; done < n; done += 1000 {
		params := make([]river.InsertManyParams, 0, 1000)
		for i := done; i < min(n, done+1000); i++ {
			params = append(params, river.InsertManyParams{Args: noopArgs{I: i}})
		}
		if _, err := client.InsertManyFast(ctx, params); err != nil {
			return 0, fmt.Errorf("river insert: %w", err)
		}
	}
	events, cancel := client.SubscribeConfig(&river.SubscribeConfig{ChanSize: n + 1000, Kinds: []river.EventKind{river.EventKindJobCompleted}})
	defer cancel()
	wctx, stop := context.WithTimeout(ctx, 10*time.Minute)
	defer stop()
	t0 := time.Now()
	if err := client.Start(wctx); err != nil {
		return 0, err
	}
	got := 0
	for got < n {
		select {
		case <-events:
			got++
		case <-wctx.Done():
			_ = client.Stop(context.Background())
			return 0, fmt.Errorf("river completed %d of %d jobs: %w", got, n, wctx.Err())
		}
	}
	el := time.Since(t0)
	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	_ = client.Stop(sctx)
	return float64(n) / el.Seconds(), nil
}
