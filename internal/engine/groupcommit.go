package engine

import (
	"context"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
)

// Group commit (CapGroupCommit).
//
// Concurrent calls of one Store — SessionQueue.Dequeue,
// SessionQueue.Complete and Provider.AckWorkItem (and appends on the
// transaction path) — are coalesced where the dialect claims CapGroupCommit
// (both dialects). Each kind has a committer that runs one flush at a time
// (Store.gcFlushes). A call that finds no flush running becomes a leader: it
// yields the processor once (runtime.Gosched, so that calls woken by the
// same event — the other callers of the flush that just ended — can queue
// behind it) and then takes what is waiting; when that is only itself it
// runs alone through the single-item path (exactly the code that runs
// without group commit). A call that finds a flush running waits in the
// queue. When a flush ends, its leader hands the lead to the first waiting
// call, which takes its own call and every call waiting at that moment (at
// most maxGroupCommit, never two of the same row) and runs them as one
// statement or one transaction that checks each item on its own and reports
// which matched, hands each caller its own outcome, and passes the lead on.
// So there is never a timer waiting for company: calls are batched only
// while an earlier flush runs (or during a new leader's one yield). Each
// lease-ending call returns after the commit that applied its item was
// acknowledged by the database (synchronous commit), as without group
// commit; a coalesced Dequeue returns after its claim statement, as alone.
//
// Per-item truth:
//   - A call whose context ends before a leader takes its item returns the
//     context's error, and its item is not applied.
//   - Once taken, the call waits for that flush (one statement or one
//     transaction) and reports its outcome, even if its context ends
//     meanwhile. A flush runs under none of its callers' cancellation (a
//     caller giving up must not fail the others); it has a deadline only
//     when every caller has one (the latest of them).
//   - Each item is checked against its own lease in the flush: one stale
//     or invalid token fails only its own call, with the error it would
//     get alone (ErrLockLost / ErrNotFound, ErrInvalidLockToken).
//   - When the flush itself fails (a statement or commit error: the
//     database went away, a deadlock, the Store closed), every item of it
//     runs again alone, under its own caller's context, so each caller
//     gets the error (or success) of its own single-item call. Every item
//     is guarded by its lease token, so a flush whose commit did succeed
//     although the driver reported an error is never applied twice: the
//     lone re-run then reports the token as no longer valid, and no call
//     ever reports success for an item that was not applied.

// maxGroupCommit bounds one flush (parameters per item × this stays far
// below every dialect's limit on bound parameters).
const maxGroupCommit = 64

// gcReq is one call waiting in a committer.
type gcReq[K comparable, T any] struct {
	ctx context.Context
	key K // the row it ends; two requests of one row never share a flush
	in  T
	err error
	// taken: a leader took it into a flush (set under the committer's
	// mutex); promoted: it was handed the lead.
	taken, promoted bool
	done            chan struct{} // closed when err is final
	lead            chan struct{} // receives the lead (capacity 1)
}

// committer coalesces concurrent calls of one kind (leader/follower).
// The zero value is ready to use.
type committer[K comparable, T any] struct {
	mu    sync.Mutex
	busy  int // leaders running (or the lead being handed over)
	queue []*gcReq[K, T]
	// batches counts the flushes of several calls (batch was called)
	batches atomic.Int64
}

// do runs in through the committer, with at most flushes flushes running
// at once (see Store.gcFlushes). single applies one item alone;
// batch applies several (at least 2) in one flush, setting each request's
// err, or returns an error when the flush as a whole failed (then each
// item is re-run with single under its own context).
func (c *committer[K, T]) do(ctx context.Context, flushes int, key K, in T,
	single func(ctx context.Context, in T) error,
	batch func(ctx context.Context, reqs []*gcReq[K, T]) error) error {
	r := &gcReq[K, T]{ctx: ctx, key: key, in: in, done: make(chan struct{}), lead: make(chan struct{}, 1)}
	c.mu.Lock()
	c.queue = append(c.queue, r)
	if c.busy < flushes {
		c.busy++
		r.promoted = true
		c.mu.Unlock()
		// Let the calls that are about to arrive (the other workers
		// woken by the same flush) queue first: one yield of the
		// processor, no timer; alone, it returns at once.
		runtime.Gosched()
		c.run(r, single, batch)
		<-r.done
		return r.err
	}
	c.mu.Unlock()
	select {
	case <-r.done:
	case <-r.lead:
		c.run(r, single, batch)
	case <-ctx.Done():
		c.mu.Lock()
		// A promoted request is only ever taken by itself, so here it is
		// still queued: it gives up and passes the lead on.
		if r.taken || r.isDone() {
			c.mu.Unlock()
			break
		}
		c.remove(r)
		if r.promoted {
			c.handOff()
		}
		c.mu.Unlock()
		return ctx.Err()
	}
	<-r.done
	return r.err
}

func (r *gcReq[K, T]) isDone() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// remove drops r from the queue (c.mu held).
func (c *committer[K, T]) remove(r *gcReq[K, T]) {
	for i, q := range c.queue {
		if q == r {
			c.queue = append(c.queue[:i], c.queue[i+1:]...)
			return
		}
	}
}

// handOff passes a finishing leader's lead to the first waiting call that
// does not hold one yet, or gives it up (c.mu held).
func (c *committer[K, T]) handOff() {
	for _, n := range c.queue {
		if !n.promoted {
			n.promoted = true
			n.lead <- struct{}{} // never sent before: the buffer is free
			return
		}
	}
	c.busy--
}

// run is one leader's turn: take what is waiting, flush it, hand off.
func (c *committer[K, T]) run(self *gcReq[K, T], single func(context.Context, T) error, batch func(context.Context, []*gcReq[K, T]) error) {
	c.mu.Lock()
	reqs := c.take(self)
	c.mu.Unlock()
	c.flush(reqs, single, batch)
	for _, r := range reqs {
		close(r.done)
	}
	c.mu.Lock()
	c.handOff()
	c.mu.Unlock()
}

// take removes the next flush from the queue (c.mu held): the leader's
// own call first, then the waiting calls that hold no lead of their own,
// at most maxGroupCommit; calls whose context already ended are answered
// with its error and not applied; of two calls of one row only the first
// is taken (the other waits for the next flush).
func (c *committer[K, T]) take(self *gcReq[K, T]) []*gcReq[K, T] {
	var reqs []*gcReq[K, T]
	keys := make(map[K]struct{}, len(c.queue))
	// consider reports whether r leaves the queue (taken or answered).
	consider := func(r *gcReq[K, T]) bool {
		if err := r.ctx.Err(); err != nil {
			r.err = err
			close(r.done)
			return true
		}
		if _, dup := keys[r.key]; dup || len(reqs) == maxGroupCommit {
			return false
		}
		keys[r.key] = struct{}{}
		r.taken = true
		reqs = append(reqs, r)
		return true
	}
	if slices.Contains(c.queue, self) {
		consider(self) // first: never a duplicate, never over the limit
	}
	kept := c.queue[:0]
	for _, r := range c.queue {
		if r == self {
			continue
		}
		if r.promoted || !consider(r) {
			kept = append(kept, r)
		}
	}
	clear(c.queue[len(kept):])
	c.queue = kept
	return reqs
}

// flush applies reqs: one alone through single under its own context,
// several through batch, falling back to single per item when the flush
// failed as a whole.
func (c *committer[K, T]) flush(reqs []*gcReq[K, T], single func(context.Context, T) error, batch func(context.Context, []*gcReq[K, T]) error) {
	switch len(reqs) {
	case 0:
		return
	case 1:
		reqs[0].err = single(reqs[0].ctx, reqs[0].in)
		return
	}
	c.batches.Add(1)
	ctx, cancel := flushContext(reqs)
	err := batch(ctx, reqs)
	cancel()
	if err != nil {
		for _, r := range reqs {
			r.err = single(r.ctx, r.in)
		}
	}
}

// flushContext is the context of a flush of several calls: the first
// call's values without any caller's cancellation, with the latest of
// their deadlines when every one has a deadline.
func flushContext[K comparable, T any](reqs []*gcReq[K, T]) (context.Context, context.CancelFunc) {
	ctx := context.WithoutCancel(reqs[0].ctx)
	var latest time.Time
	for _, r := range reqs {
		d, ok := r.ctx.Deadline()
		if !ok {
			return ctx, func() {}
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(ctx, latest)
}

// groupCommitters are a Store's committers, one per coalesced call.
type groupCommitters struct {
	complete committer[uuid.UUID, completeReq] // SessionQueue.Complete, by queue item id
	ackWork  committer[int64, ackWorkReq]      // Provider.AckWorkItem, by worker row id
	// Sessions.AppendMessages (the transaction path), by call: appends
	// to one session may share a flush (they run one after the other in
	// its transaction)
	appends   committer[uint64, appendReq]
	appendSeq atomic.Uint64
	// SessionQueue.Dequeue, by call (every call claims an item of its own)
	dequeue    committer[uint64, dequeueReq]
	dequeueSeq atomic.Uint64
	// Provider.FetchWorkItem without a session config, by call
	fetchWork    committer[uint64, workFetchReq]
	fetchWorkSeq atomic.Uint64
}

// groupCommit reports whether the store coalesces concurrent calls.
func (s *Store) groupCommit() bool { return s.has(CapGroupCommit) }

// gcFlushes is how many flushes of one committer may run at once: one. A
// call that finds no flush running runs at once (after one yield of the
// processor, which lets calls woken at the same moment join it); calls that
// arrive while it runs queue and are taken together by the next leader.
// Measured on PostgreSQL at 8 workers with Dequeue and Complete both
// coalesced (BENCHMARKS.md): one flush each 3,100 items/s, two each
// 2,560–2,760, one commit per call 2,050. (Coalescing Complete alone, a
// second flush had helped: there every call waited for the one in front.)
func (s *Store) gcFlushes() int { return 1 }

// claimByGroup runs a coalesced claim: the requests are grouped by key (in
// arrival order), each group of several is claimed in one statement by
// claim, which returns the requests it found no item for; those, the
// requests of a group of one, and every request of a group whose
// statement failed run alone through single.
func claimByGroup[G comparable, T any](reqs []*gcReq[uint64, T], key func(T) G,
	claim func([]*gcReq[uint64, T]) ([]*gcReq[uint64, T], error), single func(*gcReq[uint64, T])) {
	var order []G
	groups := map[G][]*gcReq[uint64, T]{}
	for _, r := range reqs {
		k := key(r.in)
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], r)
	}
	for _, k := range order {
		g := groups[k]
		left := g
		if len(g) > 1 {
			var err error
			if left, err = claim(g); err != nil {
				left = g
			}
		}
		for _, r := range left {
			single(r)
		}
	}
}
