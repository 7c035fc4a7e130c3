package agentstore_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/agentstore/agentstore/internal/testkit"
	"github.com/agentstore/agentstore/orchloop"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// Benchmarks of the provider's hot paths (issue 5), on both dialects:
//
//	go test -run '^$' -bench 'BenchmarkProvider' -benchtime 2000x .
//
// WorkerQueue is one activity's life on the worker queue: EnqueueForWorker,
// FetchWorkItem, AckWorkItem (no completion). OrchestrationTurn is one
// whole 1-activity orchestration run inline by one goroutine: start, the
// orchestrator turn that schedules the activity, the worker turn, the
// orchestrator turn that completes it (2 orchestration fetch+ack, 1 work
// fetch+ack); its output is checked. Its kv variant also sets two
// key-value keys in the first turn and reads them back in the second.

func BenchmarkProviderWorkerQueue(b *testing.B) {
	for _, d := range dialects {
		b.Run(string(d), func(b *testing.B) {
			h := newHarness(b, d)
			p := h.New(b).Provider()
			ctx := context.Background()
			i := uint64(0)
			for b.Loop() {
				i++
				if err := p.EnqueueForWorker(ctx, testkit.Activity("bench", 1, i)); err != nil {
					b.Fatal(err)
				}
				l, err := p.FetchWorkItem(ctx, time.Minute, 0, nil, duroxide.TagFilter{})
				if err != nil || l == nil {
					b.Fatalf("fetch: %v %v", l, err)
				}
				if err := p.AckWorkItem(ctx, l.LockToken, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkProviderOrchestrationTurn(b *testing.B) {
	// plain: the 1-activity orchestration; kv: the same orchestration also
	// sets two keys before the activity and reads both back after it (the
	// second turn restores them by replay), so its acks carry KeyValueSet
	// events and its completion merges them into the store.
	orchs := map[string]orchloop.Orchestration{
		"plain": func(c *orchloop.Ctx, in string) (string, bool, error) {
			return c.Activity("inc", in)
		},
		"kv": func(c *orchloop.Ctx, in string) (string, bool, error) {
			if err := c.SetKV("input", in); err != nil {
				return "", false, err
			}
			if err := c.SetKV("state", "scheduled"); err != nil {
				return "", false, err
			}
			out, done, err := c.Activity("inc", in)
			if err != nil || !done {
				return "", done, err
			}
			if v, ok := c.KV("input"); !ok || v != in {
				return "", false, fmt.Errorf("kv input = %q %v", v, ok)
			}
			if v, ok := c.KV("state"); !ok || v != "scheduled" {
				return "", false, fmt.Errorf("kv state = %q %v", v, ok)
			}
			return out, true, nil
		},
	}
	for _, d := range dialects {
		for _, kind := range []string{"plain", "kv"} {
			b.Run(string(d)+"/"+kind, func(b *testing.B) {
				h := newHarness(b, d)
				st := h.New(b)
				ctx := context.Background()
				eng := &orchloop.Engine{
					P:              st.Provider(),
					Orchestrations: map[string]orchloop.Orchestration{"one": orchs[kind]},
					Activities: map[string]orchloop.Activity{"inc": func(_ context.Context, in string) (string, error) {
						n, err := strconv.Atoi(in)
						return strconv.Itoa(n + 1), err
					}},
					PollTimeout: time.Millisecond,
				}
				i := 0
				for b.Loop() {
					i++
					id := fmt.Sprint("wf-", i)
					if err := eng.Start(ctx, id, "one", strconv.Itoa(i)); err != nil {
						b.Fatal(err)
					}
					for _, turn := range []func(context.Context) (bool, error){eng.OrchestrationTurn, eng.WorkTurn, eng.OrchestrationTurn} {
						if ok, err := turn(ctx); err != nil || !ok {
							b.Fatalf("turn of %s: did work %v, err %v", id, ok, err)
						}
					}
					info, err := st.ProviderAdmin().GetInstanceInfo(ctx, id)
					if err != nil || info.Status != duroxide.StatusCompleted || info.Output == nil || *info.Output != strconv.Itoa(i+1) {
						b.Fatalf("%s: %+v %v", id, info, err)
					}
				}
				if kind == "kv" { // the last instance's keys were merged
					if all, err := st.Provider().GetKVAllValues(ctx, fmt.Sprint("wf-", i)); err != nil || len(all) != 2 {
						b.Fatalf("kv of the last instance = %v %v", all, err)
					}
				}
			})
		}
	}
}
