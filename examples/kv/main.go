// Command kv shows the provider's instance key-value store from a runtime's
// side, with the orchloop replay loop: an orchestration records a cart in
// its key-value store (KeyValueSet events acked with the turn), reads it
// back after an activity's turn (replay restores it), clears one key and
// completes; the execution's writes are then merged into the store. It
// prints what the provider shows at each step: the fetch snapshot (store
// only), the merged view (GetKVValue / GetKVAllValues) and GetInstanceStats.
//
//	go run ./examples/kv                 # SQLite in a temp dir
//	go run ./examples/kv --dsn postgres://postgres@127.0.0.1:5432/test?sslmode=disable
//
// It exits 0 when the orchestration completed with the expected output and
// the store holds exactly the expected keys.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/orchloop"
	"github.com/agentstore/agentstore/repo/duroxide"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "kv:", err)
		os.Exit(1)
	}
}

// checkout keeps its cart and progress in the instance's key-value store.
func checkout(c *orchloop.Ctx, input string) (string, bool, error) {
	if err := c.SetKV("cart", input); err != nil {
		return "", false, err
	}
	if err := c.SetKV("step", "pricing"); err != nil {
		return "", false, err
	}
	price, ok, err := c.Activity("price", input)
	if err != nil || !ok {
		return "", false, err
	}
	cart, _ := c.KV("cart") // restored by replay in this later turn
	if err := c.SetKV("total", price); err != nil {
		return "", false, err
	}
	c.ClearKV("step")
	return cart + " costs " + price, true, nil
}

func run() error {
	dsn := flag.String("dsn", "", "agentstore DSN (default: SQLite in a temp dir)")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if *dsn == "" {
		dir, err := os.MkdirTemp("", "agentstore-kv-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		*dsn = "sqlite:" + filepath.Join(dir, "kv.db")
	}
	st, err := agentstore.Open(ctx, *dsn, agentstore.WithTablePrefix("kvexample_"))
	if err != nil {
		return err
	}
	defer st.Close()
	if err := st.Migrate(ctx); err != nil {
		return err
	}
	p, admin := st.Provider(), st.ProviderAdmin()
	inst := fmt.Sprintf("checkout-%d", time.Now().UnixNano())
	eng := &orchloop.Engine{P: p, PollTimeout: 50 * time.Millisecond,
		Orchestrations: map[string]orchloop.Orchestration{"checkout": checkout},
		Activities: map[string]orchloop.Activity{"price": func(_ context.Context, cart string) (string, error) {
			return fmt.Sprintf("%d.00 EUR", 3*len(cart)), nil
		}},
	}
	if err := eng.Start(ctx, inst, "checkout", "3 apples"); err != nil {
		return err
	}
	show := func(step string) error {
		all, err := p.GetKVAllValues(ctx, inst)
		if err != nil {
			return err
		}
		stats, err := p.GetInstanceStats(ctx, inst)
		if err != nil {
			return err
		}
		fmt.Printf("%-28s view %v\n", step, all)
		if stats != nil {
			fmt.Printf("%-28s stats: %d events (%d B), %d keys (%d B)\n", "", stats.HistoryEventCount, stats.HistorySizeBytes,
				stats.KVUserKeyCount, stats.KVTotalValueBytes)
		}
		return nil
	}
	// turn 1: the start; the orchestration sets cart and step and schedules the activity
	if _, err := eng.OrchestrationTurn(ctx); err != nil {
		return err
	}
	if err := show("after turn 1 (running):"); err != nil {
		return err
	}
	if _, err := eng.WorkTurn(ctx); err != nil {
		return err
	}
	// turn 2: the activity's result; the fetch snapshot is still empty
	// (nothing completed yet), the orchestration reads cart from replay
	it, err := p.FetchOrchestrationItem(ctx, 30*time.Second, time.Second, nil)
	if err != nil || it == nil {
		return fmt.Errorf("fetch turn 2: %v %v", it, err)
	}
	fmt.Printf("%-28s snapshot %v\n", "turn 2 fetch:", it.KVSnapshot)
	if err := p.AbandonOrchestrationItem(ctx, it.LockToken, 0, true); err != nil {
		return err
	}
	if _, err := eng.OrchestrationTurn(ctx); err != nil {
		return err
	}
	if err := show("after turn 2 (completed):"); err != nil {
		return err
	}
	info, err := admin.GetInstanceInfo(ctx, inst)
	if err != nil {
		return err
	}
	fmt.Printf("%-28s %s -> %q\n", "instance:", info.Status, *info.Output)
	total, err := p.GetKVValue(ctx, inst, "total")
	if err != nil {
		return err
	}
	all, err := p.GetKVAllValues(ctx, inst)
	if err != nil {
		return err
	}
	if info.Status != duroxide.StatusCompleted || *info.Output != "3 apples costs 24.00 EUR" || total == nil || *total != "24.00 EUR" ||
		!slices.Equal(slices.Sorted(maps.Keys(all)), []string{"cart", "total"}) {
		return errors.New("unexpected outcome")
	}
	if _, err := admin.DeleteInstance(ctx, inst, false); err != nil {
		return err
	}
	if all, _ := p.GetKVAllValues(ctx, inst); len(all) != 0 {
		return errors.New("delete left key-values")
	}
	fmt.Println("deleted: the instance's key-values went with it")
	return nil
}
