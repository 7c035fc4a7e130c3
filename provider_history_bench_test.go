package agentstore_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/agentstore/agentstore/internal/testkit"
	"github.com/agentstore/agentstore/repo"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// BenchmarkProviderHistory measures the history read paths of one instance
// with a long history (issue 15: "Read / Fetch+Ack of an instance with N
// events"), on both dialects:
//
//	go test -run '^$' -bench 'BenchmarkProviderHistory' -benchmem -benchtime 20x .
//
// read is Provider.Read of the whole history; fetch is one
// FetchOrchestrationItem returning it (then an abandon that undoes the
// attempt, so every iteration fetches the same item); page is one
// ReadHistoryPage of 100 events half-way. The events are a realistic mix:
// activity scheduled/completed pairs with small JSON payloads.
// AGENTSTORE_BENCH_EVENTS sets the history length (default 10000).
func BenchmarkProviderHistory(b *testing.B) {
	n := 10000
	if v, err := strconv.Atoi(os.Getenv("AGENTSTORE_BENCH_EVENTS")); err == nil && v > 1 {
		n = v
	}
	for _, d := range dialects {
		b.Run(fmt.Sprintf("%s/events=%d", d, n), func(b *testing.B) {
			h := newHarness(b, d)
			st := h.New(b)
			p := st.Provider()
			ctx := context.Background()
			const inst = "long"
			if err := p.EnqueueForOrchestrator(ctx, testkit.StartItem(inst, nil), 0); err != nil {
				b.Fatal(err)
			}
			it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
			if err != nil || it == nil {
				b.Fatalf("fetch: %v %v", it, err)
			}
			if err := p.AckOrchestrationItem(ctx, it.LockToken, duroxide.OrchestrationAck{ExecutionID: 1,
				HistoryDelta: []duroxide.Event{testkit.StartedEv(inst, 1, 1, nil)}, Metadata: testkit.RunningMeta(nil)}); err != nil {
				b.Fatal(err)
			}
			evs := make([]duroxide.Event, 0, n)
			for id := uint64(2); id <= uint64(n); id++ {
				var k duroxide.EventKind = &duroxide.ActivityScheduledEvent{Name: "charge-card", Input: `{"order":"` + strconv.FormatUint(id, 10) + `","amount_cents":1999,"currency":"EUR"}`}
				if id%2 == 1 {
					src := id - 1
					e := testkit.Ev(inst, 1, id, &duroxide.ActivityCompletedEvent{Result: `{"ok":true,"receipt":"r-` + strconv.FormatUint(src, 10) + `"}`})
					e.SourceEventID = &src
					evs = append(evs, e)
					continue
				}
				evs = append(evs, testkit.Ev(inst, 1, id, k))
			}
			if err := p.AppendWithExecution(ctx, inst, 1, evs); err != nil {
				b.Fatal(err)
			}
			b.Run("read", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					h, err := p.Read(ctx, inst)
					if err != nil || len(h) != n {
						b.Fatalf("read: %d events, %v", len(h), err)
					}
				}
			})
			b.Run("page", func(b *testing.B) {
				x := st.ProviderAdminExt()
				after := ""
				for range n / 200 { // the cursor half-way
					_, next, err := x.ReadHistoryPage(ctx, inst, 1, repo.PageParams{Limit: 100, After: after})
					if err != nil || next == "" {
						b.Fatalf("walk: %q %v", next, err)
					}
					after = next
				}
				b.ReportAllocs()
				for b.Loop() {
					h, _, err := x.ReadHistoryPage(ctx, inst, 1, repo.PageParams{Limit: 100, After: after})
					if err != nil || len(h) != 100 {
						b.Fatalf("page: %d events, %v", len(h), err)
					}
				}
			})
			if err := p.EnqueueForOrchestrator(ctx, &duroxide.ExternalRaised{Instance: inst, Name: "poke"}, 0); err != nil {
				b.Fatal(err)
			}
			b.Run("fetch", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
					if err != nil || it == nil || len(it.History) != n || it.HistoryError != "" {
						b.Fatalf("fetch: %v %v", it, err)
					}
					if err := p.AbandonOrchestrationItem(ctx, it.LockToken, 0, true); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}
