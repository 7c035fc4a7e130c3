// Command orchestration runs durable orchestrations end to end on the
// agentstore provider, with a small replay loop (internal/orchloop) written
// only against the provider API: an orchestration schedules an activity, a
// worker runs it, a durable timer fires, a sub-orchestration runs its own
// activity, and the parent completes with the combined result.
//
//	go run ./examples/orchestration                 # SQLite in a temp dir, one orchestration
//	go run ./examples/orchestration -n 1000         # 1000 orchestrations, 2 orchestrator + 2 worker loops
//	go run ./examples/orchestration --dsn postgres://postgres@127.0.0.1:5432/test?sslmode=disable
//
// It prints what happened and exits 0 when every orchestration completed.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/orchloop"
	"github.com/agentstore/agentstore/repo/duroxide"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "orchestration:", err)
		os.Exit(1)
	}
}

// greeter: activity -> timer -> sub-orchestration -> complete.
func greeter(c *orchloop.Ctx, input string) (string, bool, error) {
	greeting, ok, err := c.Activity("greet", input)
	if err != nil || !ok {
		return "", false, err
	}
	if !c.Timer(50 * time.Millisecond) {
		return "", false, nil
	}
	loud, ok, err := c.SubOrchestration("shouter", greeting)
	if err != nil || !ok {
		return "", false, err
	}
	return greeting + " / " + loud, true, nil
}

// shouter: one activity.
func shouter(c *orchloop.Ctx, input string) (string, bool, error) {
	out, ok, err := c.Activity("shout", input)
	return out, ok, err
}

func run() error {
	dir, err := os.MkdirTemp("", "agentstore-orchestration-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	dsn := flag.String("dsn", "sqlite:"+filepath.Join(dir, "orch.db"), "agentstore DSN (sqlite:PATH or postgres://...)")
	n := flag.Int("n", 1, "number of orchestrations to run")
	verbose := flag.Bool("v", false, "log every step (default: only for -n 1)")
	timeout := flag.Duration("timeout", 5*time.Minute, "give up after this long")
	keep := flag.Bool("keep", false, "keep the instances (default: delete them at the end)")
	flag.Parse()
	if *n < 1 {
		return errors.New("-n must be at least 1")
	}

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	st, err := agentstore.Open(ctx, *dsn, agentstore.WithPool(agentstore.PoolConfig{MaxOpenConns: 16}))
	if err != nil {
		return err
	}
	defer st.Close()
	if err := st.Migrate(ctx); err != nil {
		return err
	}
	fmt.Printf("store: %s (%s)\n", st.Dialect(), agentstore.RedactDSN(*dsn))

	eng := &orchloop.Engine{
		P:              st.Provider(),
		Orchestrations: map[string]orchloop.Orchestration{"greeter": greeter, "shouter": shouter},
		Activities: map[string]orchloop.Activity{
			"greet": func(_ context.Context, name string) (string, error) { return "hello " + name, nil },
			"shout": func(_ context.Context, s string) (string, error) { return strings.ToUpper(s) + "!", nil },
		},
		PollTimeout: 100 * time.Millisecond,
	}
	if *n == 1 || *verbose {
		eng.Log = func(format string, args ...any) { fmt.Printf("  "+format+"\n", args...) }
	}

	runID := time.Now().Format("150405.000")
	ids := make([]string, *n)
	start := time.Now()
	for i := range ids {
		ids[i] = fmt.Sprintf("greeter-%s-%d", runID, i)
		if err := eng.Start(ctx, ids[i], "greeter", fmt.Sprintf("world %d", i)); err != nil {
			return err
		}
	}

	loopCtx, stop := context.WithCancel(ctx)
	g, gctx := errgroup.WithContext(loopCtx)
	for range 2 {
		g.Go(func() error { return eng.RunOrchestrator(gctx) })
		g.Go(func() error { return eng.RunWorker(gctx) })
	}
	infos, werr := orchloop.Wait(ctx, st.ProviderAdmin(), ids, 20*time.Millisecond)
	elapsed := time.Since(start)
	stop()
	if err := g.Wait(); err != nil {
		return fmt.Errorf("loop: %w", err)
	}
	if werr != nil {
		return werr
	}

	failed := 0
	for _, info := range infos {
		if info.Status != duroxide.StatusCompleted {
			failed++
			fmt.Printf("%s: %s %v\n", info.InstanceID, info.Status, deref(info.Output))
		}
	}
	first := infos[0]
	fmt.Printf("%s: %s -> %q\n", first.InstanceID, first.Status, deref(first.Output))
	if *n == 1 {
		hist, err := st.ProviderAdmin().ReadHistory(ctx, first.InstanceID)
		if err != nil {
			return err
		}
		fmt.Println("history:")
		for _, ev := range hist {
			fmt.Printf("  #%d %s\n", ev.EventID, ev.Kind.EventType())
		}
	}
	s := eng.Stats()
	fmt.Printf("%d orchestrations (+%d sub-orchestrations): %d completed, %d failed in %v (%.1f orch/s); %d turns, %d activities, %d retries\n",
		*n, *n, *n-failed, failed, elapsed.Round(time.Millisecond), float64(*n)/elapsed.Seconds(), s.Turns, s.Activities, s.Retries)
	if failed > 0 {
		return fmt.Errorf("%d orchestrations did not complete", failed)
	}
	if !*keep {
		res, err := st.ProviderAdmin().DeleteInstanceBulk(ctx, duroxide.InstanceFilter{InstanceIDs: ids, Limit: len(ids)})
		if err != nil {
			return fmt.Errorf("clean up: %w", err)
		}
		fmt.Printf("cleaned up: %d instances, %d events deleted\n", res.InstancesDeleted, res.EventsDeleted)
	}
	return nil
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}
