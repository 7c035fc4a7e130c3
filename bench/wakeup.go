package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/repo"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// benchWakeup: a fetcher waits (FetchOrchestrationItem / FetchWorkItem
// with a 2 s poll timeout, or a session-queue Dequeue with a 2 s Wait) on
// an idle queue; after a random 2-12 ms the
// item is enqueued, through the same Store or through a second Store on
// the same database (another process as far as in-process signals go).
// Latency = fetch returned - Enqueue returned (the item committed), 0 if
// the fetcher returned first. p50 and p99 over the samples.
func (b *bench) benchWakeup(ctx context.Context, d string) {
	const sc = "wakeup"
	st, cleanup, err := b.openStore(ctx, d, "wakeup", "")
	if err != nil {
		b.skipf(sc, d, "agentstore", "open store: %v", err)
		return
	}
	defer cleanup()
	other, err := b.openHandle(ctx, d, "wakeup", "")
	if err != nil {
		b.skipf(sc, d, "agentstore", "open second handle: %v", err)
		return
	}
	defer other.Close()
	for _, kind := range []string{"orchestration item", "work item", "session-queue item"} {
		for _, via := range []struct {
			name string
			st   *agentstore.Store
		}{{"same Store", st}, {"other Store", other}} {
			subject := fmt.Sprintf("agentstore %s, enqueue via %s", kind, via.name)
			var lat, enq []time.Duration
			var err error
			if kind == "session-queue item" {
				lat, enq, err = dequeueWakeupSamples(ctx, st, via.st, b.sz.wakeupSamples)
			} else {
				lat, enq, err = wakeupSamples(ctx, st.Provider(), via.st.Provider(), kind, b.sz.wakeupSamples)
			}
			if err != nil {
				b.skipf(sc, d, subject, "%v", err)
				continue
			}
			b.add(sc, d, subject+", p50", ms(percentile(lat, 0.5)), "ms")
			b.add(sc, d, subject+", p99", ms(percentile(lat, 0.99)), "ms")
			b.add(sc, d, subject+", Enqueue call itself, p50", ms(percentile(enq, 0.5)), "ms")
		}
	}
}

func wakeupSamples(ctx context.Context, fetcher, enqueuer duroxide.Provider, kind string, n int) (lat, enq []time.Duration, err error) {
	type got struct {
		at  time.Time
		err error
	}
	for i := range n {
		ch := make(chan got, 1)
		go func() {
			switch kind {
			case "work item":
				l, err := fetcher.FetchWorkItem(ctx, time.Minute, 2*time.Second, nil, duroxide.TagFilter{})
				at := time.Now()
				if err == nil && l == nil {
					err = fmt.Errorf("fetch timed out (2 s) without the item")
				}
				if err == nil {
					err = fetcher.AckWorkItem(ctx, l.LockToken, nil)
				}
				ch <- got{at, err}
			default:
				it, err := fetcher.FetchOrchestrationItem(ctx, time.Minute, 2*time.Second, nil)
				at := time.Now()
				if err == nil && it == nil {
					err = fmt.Errorf("fetch timed out (2 s) without the item")
				}
				if err == nil {
					err = fetcher.AckOrchestrationItem(ctx, it.LockToken, duroxide.OrchestrationAck{ExecutionID: it.ExecutionID})
				}
				ch <- got{at, err}
			}
		}()
		time.Sleep(2*time.Millisecond + rand.N(10*time.Millisecond))
		t0 := time.Now()
		switch kind {
		case "work item":
			err = enqueuer.EnqueueForWorker(ctx, &duroxide.ActivityExecute{Instance: fmt.Sprintf("wake-%d", i), ExecutionID: 1, ID: 2, Name: "noop", Input: "x"})
		default:
			v := "1.0.0"
			err = enqueuer.EnqueueForOrchestrator(ctx, &duroxide.StartOrchestration{Instance: fmt.Sprintf("wake-%d-%d", i, time.Now().UnixNano()),
				Orchestration: "noop", Input: "x", Version: &v, ExecutionID: 1}, 0)
		}
		t1 := time.Now()
		if err != nil {
			<-ch
			return nil, nil, fmt.Errorf("enqueue: %w", err)
		}
		g := <-ch
		if g.err != nil {
			return nil, nil, g.err
		}
		lat = append(lat, max(0, g.at.Sub(t1)))
		enq = append(enq, t1.Sub(t0))
	}
	return lat, enq, nil
}

// dequeueWakeupSamples: wakeupSamples for a session-queue Dequeue waiting
// (DequeueParams.Wait 2 s) on one session of waiter, the item enqueued
// through enqueuer.
func dequeueWakeupSamples(ctx context.Context, waiter, enqueuer *agentstore.Store, n int) (lat, enq []time.Duration, err error) {
	s := repo.NewSession()
	if err := waiter.Sessions().Save(ctx, s); err != nil {
		return nil, nil, err
	}
	type got struct {
		at  time.Time
		err error
	}
	for range n {
		ch := make(chan got, 1)
		go func() {
			it, err := waiter.SessionQueue().Dequeue(ctx, s.ID, repo.DequeueParams{Wait: 2 * time.Second})
			at := time.Now()
			if err == nil && it == nil {
				err = fmt.Errorf("dequeue waited 2 s without the item")
			}
			if err == nil {
				err = waiter.SessionQueue().Complete(ctx, it.Lease())
			}
			ch <- got{at, err}
		}()
		time.Sleep(2*time.Millisecond + rand.N(10*time.Millisecond))
		t0 := time.Now()
		_, err = enqueuer.SessionQueue().Enqueue(ctx, s.ID, "wake", 0)
		t1 := time.Now()
		if err != nil {
			<-ch
			return nil, nil, fmt.Errorf("enqueue: %w", err)
		}
		g := <-ch
		if g.err != nil {
			return nil, nil, g.err
		}
		lat = append(lat, max(0, g.at.Sub(t1)))
		enq = append(enq, t1.Sub(t0))
	}
	return lat, enq, nil
}
