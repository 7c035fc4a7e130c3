package agentstore_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

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
// fetch+ack); its output is checked.

func BenchmarkProviderWorkerQueue(b *testing.B) {
	for _, d := range dialects {
		b.Run(string(d), func(b *testing.B) {
			h := newHarness(b, d)
			p := h.New(b).Provider()
			ctx := context.Background()
			i := uint64(0)
			for b.Loop() {
				i++
				if err := p.EnqueueForWorker(ctx, activity("bench", 1, i)); err != nil {
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
	for _, d := range dialects {
		b.Run(string(d), func(b *testing.B) {
			h := newHarness(b, d)
			st := h.New(b)
			ctx := context.Background()
			eng := &orchloop.Engine{
				P: st.Provider(),
				Orchestrations: map[string]orchloop.Orchestration{"one": func(c *orchloop.Ctx, in string) (string, bool, error) {
					return c.Activity("inc", in)
				}},
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
		})
	}
}
