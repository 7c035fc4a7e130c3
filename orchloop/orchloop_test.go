package orchloop_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/orchloop"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// drive runs turns on one goroutine until no work is left.
func drive(t *testing.T, eng *orchloop.Engine) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(20 * time.Second)
	for idle := 0; idle < 3; {
		if time.Now().After(deadline) {
			t.Fatalf("no quiescence")
		}
		o, err := eng.OrchestrationTurn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		w, err := eng.WorkTurn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if o || w {
			idle = 0
		} else {
			idle++
		}
	}
}

func TestProviderOrchloopReplayActivityTimerSubOrchestration(t *testing.T) {
	ctx := context.Background()
	st, err := agentstore.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "o.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	eng := &orchloop.Engine{P: st.Provider(), PollTimeout: 30 * time.Millisecond,
		Orchestrations: map[string]orchloop.Orchestration{
			"parent": func(c *orchloop.Ctx, in string) (string, bool, error) {
				a, ok, err := c.Activity("up", in)
				if err != nil || !ok {
					return "", false, err
				}
				if !c.Timer(10 * time.Millisecond) {
					return "", false, nil
				}
				b, ok, err := c.SubOrchestration("child", a)
				if err != nil || !ok {
					return "", false, err
				}
				return a + "+" + b, true, nil
			},
			"child": func(c *orchloop.Ctx, in string) (string, bool, error) { return c.Activity("up", in+"!") },
			"bad": func(c *orchloop.Ctx, in string) (string, bool, error) {
				_, ok, err := c.Activity("fail", in)
				if err != nil || !ok {
					return "", false, err
				}
				return "unreachable", true, nil
			},
		},
		Activities: map[string]orchloop.Activity{
			"up":   func(_ context.Context, s string) (string, error) { return s + s, nil },
			"fail": func(context.Context, string) (string, error) { return "", errors.New("boom") },
		}}
	if err := eng.Start(ctx, "p1", "parent", "x"); err != nil {
		t.Fatal(err)
	}
	if err := eng.Start(ctx, "b1", "bad", "x"); err != nil {
		t.Fatal(err)
	}
	drive(t, eng)
	infos, err := orchloop.Wait(ctx, st.ProviderAdmin(), []string{"p1", "b1"}, 5*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if infos[0].Status != duroxide.StatusCompleted || *infos[0].Output != "xx+xx!xx!" {
		t.Fatalf("p1 = %s %v", infos[0].Status, *infos[0].Output)
	}
	if infos[1].Status != duroxide.StatusFailed || *infos[1].Output != "boom" {
		t.Fatalf("b1 = %s %v", infos[1].Status, *infos[1].Output)
	}
	hist, err := st.ProviderAdmin().ReadHistory(ctx, "p1")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"OrchestrationStarted", "ActivityScheduled", "ActivityCompleted", "TimerCreated", "TimerFired",
		"SubOrchestrationScheduled", "SubOrchestrationCompleted", "OrchestrationCompleted"}
	if len(hist) != len(want) {
		t.Fatalf("history has %d events, want %d", len(hist), len(want))
	}
	for i, ev := range hist {
		if ev.Kind.EventType() != want[i] || ev.EventID != uint64(i+1) {
			t.Fatalf("event %d = #%d %s, want %s", i, ev.EventID, ev.Kind.EventType(), want[i])
		}
	}
	if kids, _ := st.ProviderAdmin().ListChildren(ctx, "p1"); len(kids) != 1 {
		t.Fatalf("children = %v", kids)
	}
}

// TestProviderOrchloopKV: an orchestration that sets two keys, reads them
// back across the activity's turn (replay restores the state from its
// KeyValueSet events) and clears one completes with the values it read;
// after completion the provider's merged view holds the remaining key and
// a new instance reading the same keys starts empty. SetKV refuses a value
// over the limit with ErrKVLimit.
func TestProviderOrchloopKV(t *testing.T) {
	ctx := context.Background()
	st, err := agentstore.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "kv.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	var limitErr error
	eng := &orchloop.Engine{P: st.Provider(), PollTimeout: 30 * time.Millisecond,
		Orchestrations: map[string]orchloop.Orchestration{
			"kv": func(c *orchloop.Ctx, in string) (string, bool, error) {
				if _, seen := c.KV("before"); seen {
					return "", false, errors.New("a fresh instance sees a key")
				}
				if err := c.SetKV("before", in); err != nil {
					return "", false, err
				}
				limitErr = c.SetKV("huge", string(make([]byte, duroxide.MaxKVValueBytes+1)))
				r, ok, err := c.Activity("up", in)
				if err != nil || !ok {
					return "", false, err
				}
				if err := c.SetKV("after", r); err != nil {
					return "", false, err
				}
				b, _ := c.KV("before")
				a, _ := c.KV("after")
				c.ClearKV("before")
				return b + "+" + a, true, nil
			},
		},
		Activities: map[string]orchloop.Activity{"up": func(_ context.Context, s string) (string, error) { return s + "!", nil }},
	}
	for _, inst := range []string{"k1", "k2"} {
		if err := eng.Start(ctx, inst, "kv", "x-"+inst); err != nil {
			t.Fatal(err)
		}
	}
	drive(t, eng)
	for _, inst := range []string{"k1", "k2"} {
		info, err := st.ProviderAdmin().GetInstanceInfo(ctx, inst)
		if err != nil || info.Status != duroxide.StatusCompleted || *info.Output != "x-"+inst+"+x-"+inst+"!" {
			t.Fatalf("%s = %+v %v", inst, info, err)
		}
		all, err := st.Provider().GetKVAllValues(ctx, inst)
		if err != nil || len(all) != 1 || all["after"] != "x-"+inst+"!" {
			t.Fatalf("%s kv = %v %v", inst, all, err)
		}
	}
	if !errors.Is(limitErr, orchloop.ErrKVLimit) {
		t.Fatalf("oversized SetKV = %v, want ErrKVLimit", limitErr)
	}
}
