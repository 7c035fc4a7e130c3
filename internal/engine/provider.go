package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentstore/agentstore/internal/dialect"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// ProviderName and ProviderVersion are what Provider.Name and Provider.Version return.
const (
	ProviderName    = "agentstore"
	ProviderVersion = "0.1.0"
)

// Provider-domain sentinels, re-exported from package repo/duroxide.
var (
	// ErrInvalidLockToken: unknown, expired, used or removed lock token; also matches ErrLockLost.
	ErrInvalidLockToken = duroxide.ErrInvalidLockToken
	// ErrInstanceRunning: a non-forced delete hit a Running instance.
	ErrInstanceRunning = duroxide.ErrInstanceRunning
	// ErrSubOrchestration: DeleteInstance on a sub-orchestration.
	ErrSubOrchestration = duroxide.ErrSubOrchestration
	// ErrOrphan: a delete would orphan a child instance.
	ErrOrphan = duroxide.ErrOrphan
	// ErrDuplicateEvent: an ack carried an existing history event id.
	ErrDuplicateEvent = duroxide.ErrDuplicateEvent
)

// signal is an in-process broadcast: wait returns a channel closed by the
// next notify. A wake-up for items any plain fetcher can take (handOff)
// instead goes to as many of the plain fetchers waiting as there are
// items, longest waiting first (the others keep waiting: woken, they
// would each send a claim that finds nothing).
type signal struct {
	mu  sync.Mutex
	cur *sigGen
	// plain: the plain fetchers enlisted (longPoll with plain set), in
	// the order they enlisted; each is woken by its own hand-off or by
	// the broadcast
	plain []*handoff
	// reserved: parked takers of leases reserved by acks in flight
	// (reserveTakers)
	reserved int
	// seq counts wake-ups (broadcasts and hand-offs), epoch broadcasts
	// only (every wake-up but a hand-off: another Store's, a notify).
	seq, epoch uint64
	// quiet is what the last empty claim of a quiet fetcher (longPollAs
	// with quiet set) learnt, kept across calls: see quietSkip.
	quiet quietState
	// publish, when set (CapWakeup), also tells other Stores and
	// processes; it is not called for wake-ups that came from them.
	publish func()
	// waiting, when set (CapWakeup), is told when a fetcher starts (+1)
	// and stops (-1) waiting on this signal.
	waiting func(delta int32)
	// healthy, when set, reports whether the cross-Store wake-up is up
	// (LISTEN connected, data_version watcher running); nextDue, when set,
	// returns the earliest time (the Store's clock, Unix ms) after since
	// at which a message of the queue may become fetchable without an
	// enqueue (a delay ends, a lock expires), or a negative due when the
	// poll interval must stay in force. With both, a waiting fetch
	// re-checks the database at that time or after idleRecheck, not every
	// poll interval.
	healthy func() bool
	nextDue func(ctx context.Context, since int64) (due int64, ok bool, err error)
	// onWake, when set (telemetry), is told that a wake-up ended a wait.
	onWake func(ctx context.Context)
}

// sigGen is one generation of a signal: its channel is closed by the
// wake-up that ends it, which sets ready first.
type sigGen struct {
	ch chan struct{}
	// ready: the wake-up was an enqueue by this Store of items all
	// visible at once (notifyReady), nothing else
	ready bool
}

func newSignal() *signal { return &signal{cur: &sigGen{ch: make(chan struct{})}} }

func (s *signal) wait() <-chan struct{} { return s.gen().ch }

// gen returns the current generation (its channel closes at the next
// wake-up; read ready after that).
func (s *signal) gen() *sigGen {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}

// notify wakes this Store's waiting fetchers and publishes the wake-up.
func (s *signal) notify() {
	s.wakeGen(false)
	if s.publish != nil {
		s.publish()
	}
}

// notifyReady is notify for an enqueue of items that are all visible at
// once: a fetcher this wakes that then finds nothing (another fetcher
// took them) need not ask again when something becomes due (longPoll's
// keepOnReady).
func (s *signal) notifyReady() {
	s.wakeGen(true)
	if s.publish != nil {
		s.publish()
	}
}

// wake wakes this Store's waiting fetchers only.
func (s *signal) wake() { s.wakeGen(false) }

func (s *signal) wakeGen(ready bool) {
	s.mu.Lock()
	s.broadcastLocked(ready)
	s.mu.Unlock()
}

func (s *signal) broadcastLocked(ready bool) {
	s.seq++
	s.epoch++
	g := s.cur
	g.ready = ready
	close(g.ch)
	s.cur = &sigGen{ch: make(chan struct{})}
}

// handoff is one plain fetcher's enlistment: ch is closed when a wake-up
// is handed to it (handed set first), with a lease when the wake-up is
// an item already claimed for it (signal.deliver).
type handoff struct {
	ch     chan struct{}
	handed bool
	// takes, when positive, is the lock timeout of a worker fetch that
	// takes a lease handed over in-process (an orchestration ack's worker
	// item, enqueued already leased to it); 0: wake-ups only. parked: the
	// fetch waits for a wake-up (not in a claim of its own); an ack
	// reserves parked takers only (reserveTakers), and hands a lease to
	// an unparked one only when no parked one is left (deliver).
	takes  time.Duration
	parked bool
	// lease: the lease handed over with the wake-up, nil for a wake-up only
	lease *handedLease
}

// handedLease is a worker item's lease handed over in-process: the item
// was enqueued already leased (lock token, locked_until = start + the
// taker's lock timeout, one attempt) by the orchestration ack that
// scheduled it, for a parked plain worker fetch of the same Store.
type handedLease struct {
	lease *duroxide.WorkItemLease
	wl    workLease
	start int64 // the clock (Unix ms) the lease's end was computed from
}

// enlistAs adds a plain fetcher to the hand-off list; it must leave.
// takes: the lock timeout of a worker fetch that takes leases handed over
// in-process, 0 for one that does not.
func (s *signal) enlistAs(takes time.Duration) *handoff {
	h := &handoff{ch: make(chan struct{}), takes: takes}
	s.mu.Lock()
	s.plain = append(s.plain, h)
	s.mu.Unlock()
	return h
}

// park marks h as waiting for a wake-up: from now until it leaves, a
// lease may be handed to it.
func (s *signal) park(h *handoff) {
	s.mu.Lock()
	h.parked = true
	s.mu.Unlock()
}

// reserveTakers reserves up to max parked takers for leases an ack is
// about to enqueue: it returns the lock timeout of the longest-parked
// taker and how many parked takers with that lock timeout it reserved
// (0 when none is free: every parked taker is reserved by an ack in
// flight). The ack hands its leases over with deliver, or gives the
// reservation back with unreserve when it fails.
func (s *signal) reserveTakers(max int) (time.Duration, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var lt time.Duration
	n := 0
	for _, h := range s.plain {
		if !h.parked || h.takes <= 0 {
			continue
		}
		if n == 0 {
			lt = h.takes
		}
		if h.takes == lt {
			n++
		}
	}
	n = min(n-s.reserved, max)
	if n <= 0 {
		return 0, 0
	}
	s.reserved += n
	return lt, n
}

// unreserve gives back n takers reserved by reserveTakers.
func (s *signal) unreserve(n int) {
	s.mu.Lock()
	s.reserved = max(s.reserved-n, 0)
	s.mu.Unlock()
}

// deliver ends a reservation of n takers (reserveTakers) and hands each
// lease of ls to a taker whose lock timeout is lt: a parked one, longest
// parked first, else one enlisted in its claim (it uses the lease when
// its claim finds nothing, and releases it otherwise). It returns the
// leases no such taker was left for (the caller releases them).
func (s *signal) deliver(ls []*handedLease, lt time.Duration, n int) []*handedLease {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reserved = max(s.reserved-n, 0)
	for len(ls) > 0 {
		i := slices.IndexFunc(s.plain, func(h *handoff) bool { return h.parked && h.takes == lt })
		if i < 0 {
			i = slices.IndexFunc(s.plain, func(h *handoff) bool { return h.takes == lt })
		}
		if i < 0 {
			break
		}
		h := s.plain[i]
		s.plain = slices.Delete(s.plain, i, i+1)
		h.handed, h.lease = true, ls[0]
		close(h.ch)
		ls = ls[1:]
	}
	return ls
}

// leave takes h off the list and reports whether a wake-up was handed to
// it (then it is the fetcher's to use, or to pass on; h.lease, when set,
// is a lease the fetcher must use or release).
func (s *signal) leave(h *handoff) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h.handed {
		return true
	}
	if i := slices.Index(s.plain, h); i >= 0 {
		s.plain = slices.Delete(s.plain, i, i+1)
	}
	return false
}

// handOff wakes this Store's fetchers for n new items (n > 0) that are
// visible at once and that any plain fetcher can take (no tag, no
// session; an orchestrator message, for a fetch without a capability
// filter): up to n plain fetchers enlisted, longest waiting first; when
// fewer are enlisted, every waiting fetcher (the broadcast, ready as
// notifyReady's when ready is set). It publishes the wake-up to other
// Stores as notify does.
func (s *signal) handOff(n int, ready bool) {
	s.mu.Lock()
	s.seq++
	if s.quiet.valid {
		s.quiet.pending += n
	}
	for n > 0 && len(s.plain) > 0 {
		h := s.plain[0]
		s.plain = slices.Delete(s.plain, 0, 1)
		h.handed = true
		close(h.ch)
		n--
	}
	if n > 0 {
		s.broadcastLocked(ready)
	}
	s.mu.Unlock()
	if s.publish != nil {
		s.publish()
	}
}

// quietState: at Unix ms at (the Store's clock, the real one), a quiet
// fetcher's claim found nothing and the next due time was due (none:
// !dueOK), and no wake-up came from its start until then (epoch). Since
// then pending items were handed off and not yet claimed by a quiet
// fetcher.
type quietState struct {
	valid   bool
	epoch   uint64
	at, due int64
	dueOK   bool
	pending int
}

// recordQuiet records an empty claim of a quiet fetcher that started at
// since (seq0: the signal's seq then) and the next due time it was told
// after it, unless a wake-up came meanwhile (an item the claim may not
// have seen) or a message waits for a locked instance (due < 0).
func (s *signal) recordQuiet(seq0 uint64, since, due int64, dueOK bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seq != seq0 || (dueOK && due < 0) {
		return
	}
	s.quiet = quietState{valid: true, epoch: s.epoch, at: since, due: due, dueOK: dueOK}
}

// tookQuiet is told that a quiet fetcher claimed an item: one of the
// pending items handed off, or, when none is pending, an item the quiet
// state did not know of (it no longer holds).
func (s *signal) tookQuiet() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.quiet.valid {
		return
	}
	if s.quiet.pending > 0 {
		s.quiet.pending--
		return
	}
	s.quiet.valid = false
}

// quietSkip reports whether a quiet fetcher starting at now may skip its
// first claim: the last empty claim (quietState) is under idleRecheck
// old, its next due time has not come, no wake-up but hand-offs came
// since, and every item handed off since was claimed by a quiet fetcher
// of this Store. A claim now would then find nothing: new items come
// with a wake-up (this Store's hand-off or notify, another Store's
// through the healthy cross-Store wake-up), others become claimable only
// at a due time. It returns the state to wait on.
func (s *signal) quietSkip(now int64) (quietState, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.quiet
	ok := q.valid && q.epoch == s.epoch && q.pending == 0 && now >= q.at && now-q.at < idleRecheck.Milliseconds() && (!q.dueOK || now < q.due)
	return q, ok
}

// seqNow returns the signal's wake-up count.
func (s *signal) seqNow() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seq
}

// passOn gives a wake-up handed to a fetcher that will not use it (it
// returned without claiming after the hand-off) to the next plain
// fetcher enlisted, or to every waiting fetcher when none is. In-process
// only: the item's enqueue published it already.
func (s *signal) passOn() {
	s.mu.Lock()
	s.seq++
	if len(s.plain) > 0 {
		h := s.plain[0]
		s.plain = slices.Delete(s.plain, 0, 1)
		h.handed = true
		close(h.ch)
	} else {
		s.broadcastLocked(false)
	}
	s.mu.Unlock()
}

// gormProvider implements duroxide.Provider and duroxide.ProviderAdmin on a Store.
type gormProvider struct {
	s    *Store
	orch *signal // orchestrator queue got messages
	work *signal // worker queue got items
	feed *signal // session changes were committed (the change feed's Watch)
	// queue: a session-queue item became claimable (an enqueue, a
	// release); waiting Dequeues (DequeueParams.Wait) wait on it.
	queue *signal
	// waker carries wake-ups across Stores and processes (the dialect's
	// mechanism: LISTEN/NOTIFY, PRAGMA data_version); nil without
	// CapWakeup.
	waker dialect.Waker
	// claimBounds maps a fetch transaction's connection (its gorm
	// ConnPool) to its claimBound while the transaction runs
	// (dialect.ClaimLockWaitSession).
	claimBounds sync.Map
	// orchIdle marks the orchestrator queue found empty, for an
	// in-process dialect's read before the write lock
	// (orchCandidateBeforeTx): 1 + the queue's signal count
	// (signal.seqNow) when the last orchestration fetch that found nothing
	// began, 0 after one that found something. A fetch reads first only
	// while the mark equals 1 + the current count: the queue was found
	// empty and no wake-up came since (an idle poll's re-check). A woken
	// fetch goes straight to its claim: a read before it would be one more
	// step on the path of every woken item. (Set to 1 at the start: the
	// first fetch reads first.)
	orchIdle atomic.Uint64
	// beforeHandOver, when set (the engine's own tests only), runs after
	// an orchestration ack committed and before its leased worker items
	// are handed over (handOverWork).
	beforeHandOver func()
	// afterRoutedClaim, when set (the engine's own tests only), runs
	// after each item a routed worker claim (claimWorkRouted) claimed.
	afterRoutedClaim func()
	// orchClaiming counts the orchestration claim statements of this
	// Store in flight (the one-statement claim of the fast path): a fetch
	// whose first claim starts while others run passes over as many of
	// the oldest eligible instances (orchCandidateSQL's skip). Two
	// orchestrator loops of one Store otherwise picked the same instance
	// often, and one of the two claims lost (19 % of the claims in a
	// bench round: BENCHMARKS.md, 2026-12-05, sixth session).
	orchClaiming atomic.Int64
	// afterWorkClaim, when set (the engine's own tests only), runs after
	// each fetch of FetchWorkItem that claimed an item, before the lease
	// is checked and handed out.
	afterWorkClaim func()
}

var (
	_ duroxide.Provider      = (*gormProvider)(nil)
	_ duroxide.ProviderAdmin = (*gormProvider)(nil)
)

func (s *Store) provider() *gormProvider {
	s.provOnce.Do(func() {
		p := &gormProvider{s: s, orch: newSignal(), work: newSignal(), feed: newSignal(), queue: newSignal()}
		p.orchIdle.Store(1)
		if s.has(CapWakeup) {
			p.waker = s.d.NewWaker(s.env(), func(kind string) {
				switch kind {
				case dialect.NotifyOrch:
					p.orch.wake()
				case dialect.NotifyWork:
					p.work.wake()
				case dialect.NotifyFeed:
					p.feed.wake()
				case dialect.NotifySessionQueue:
					p.queue.wake()
				}
			})
		}
		if w := p.waker; w != nil {
			p.orch.publish = func() { w.Publish(dialect.NotifyOrch) }
			p.work.publish = func() { w.Publish(dialect.NotifyWork) }
			p.queue.publish = func() { w.Publish(dialect.NotifySessionQueue) }
			p.orch.waiting = w.Waiting
			p.work.waiting = w.Waiting
			p.feed.publish = func() { w.Publish(dialect.NotifyFeed) }
			p.feed.waiting = w.Waiting
			if h, ok := w.(dialect.HealthReporter); ok {
				p.feed.healthy = h.Healthy
			}
			p.queue.waiting = w.Waiting
			// A Store on its own clock (WithClock) cannot turn a due time
			// into a wait: it keeps re-checking every poll interval.
			if h, ok := w.(dialect.HealthReporter); ok && !s.cfg.CustomClock {
				p.orch.healthy, p.work.healthy, p.queue.healthy = h.Healthy, h.Healthy, h.Healthy
				p.orch.nextDue, p.work.nextDue = p.orchNextDue, p.workNextDue
				// a waiting Dequeue asks about its own session (dequeueWait)
				p.queue.nextDue = func(context.Context, int64) (int64, bool, error) { return 0, false, nil }
			}
		}
		// A dialect with no wake-up at all (dialect.PollFallback) at
		// its default interval (at least idleRecheck): waiting calls
		// re-check every interval anyway, so they may as well wait for a
		// due time they know of (a delay end, a lease expiry) when it
		// comes sooner, as a healthy wake-up's waiters do. Another
		// Store's commits are seen at the next re-check, as without it.
		if _, ok := s.d.(dialect.PollFallback); ok && p.waker == nil && !s.cfg.CustomClock && s.cfg.PollInterval >= idleRecheck {
			always := func() bool { return true }
			p.orch.healthy, p.work.healthy, p.queue.healthy = always, always, always
			p.orch.nextDue, p.work.nextDue = p.orchNextDue, p.workNextDue
			p.queue.nextDue = func(context.Context, int64) (int64, bool, error) { return 0, false, nil }
		}
		s.tel.instrumentSignals(p)
		s.prov = p
	})
	return s.prov
}

// Provider returns the durable-orchestration provider of the store. Fetches
// long-poll and are woken at once by enqueues through the same Store. With
// WithTracerProvider or WithMeterProvider every call is also traced and
// measured (same results); Provider, ProviderAdmin and Admin then return
// one wrapper value per Store.
func (s *Store) Provider() duroxide.Provider { return s.providerAPI() }

// ProviderAdmin returns the provider's management interface.
func (s *Store) ProviderAdmin() duroxide.ProviderAdmin { return s.providerAPI() }

// Name implements duroxide.Provider.
func (p *gormProvider) Name() string { return ProviderName }

// Version implements duroxide.Provider.
func (p *gormProvider) Version() string { return ProviderVersion }

// Admin implements duroxide.Provider.
func (p *gormProvider) Admin() duroxide.ProviderAdmin { return p }

// perr wraps err as a *duroxide.ProviderError for op (classifying it
// through dbErr, which keeps driver text out of the message), unless it
// already is one.
func perr(op string, err error) error {
	if err == nil {
		return nil
	}
	var pe *duroxide.ProviderError
	if errors.As(err, &pe) {
		return err
	}
	// dbErr classifies a driver error and hides its text (SQLSTATE,
	// sqlite3 messages) behind the sentinel's; the driver's error stays in
	// the chain for errors.As and logs.
	t := dbErr(err)
	return &duroxide.ProviderError{Op: op, Message: t.Error(), Retryable: errors.Is(t, ErrRetryable), Err: t}
}

// perrAt is perr for a call about one instance: the message names it.
func perrAt(op, instance string, err error) error {
	if err == nil {
		return nil
	}
	var pe *duroxide.ProviderError
	if errors.As(err, &pe) {
		return err
	}
	return perr(op, fmt.Errorf("instance %s: %w", instance, dbErr(err)))
}

// perrLock is perr for a call identified by its lock token: a timeout's
// message names the token (the instance is known only behind the lock).
func perrLock(op, lockToken string, err error) error {
	if t := dbErr(err); errors.Is(t, ErrTimeout) {
		return perr(op, fmt.Errorf("lock token %s: %w", lockToken, t))
	}
	return perr(op, err)
}

// pfail returns a permanent *duroxide.ProviderError matching sentinel.
func pfail(op string, sentinel error, format string, args ...any) error {
	return &duroxide.ProviderError{Op: op, Message: fmt.Sprintf(format, args...), Err: sentinel}
}

func (p *gormProvider) q(base string) string { return p.s.quoted(base) }
