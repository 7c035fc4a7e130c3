package engine

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/agentstore/agentstore/internal/dialect"
	"github.com/agentstore/agentstore/models"
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

// defaultPollInterval is how often a long-polling fetch re-checks the
// database when no wake-up arrives (delayed messages becoming visible,
// and on SQLite other processes). See WithPollInterval.
const defaultPollInterval = 20 * time.Millisecond

// listenIfPossible starts the cross-Store wake-up mechanism (CapWakeup)
// before a fetch waits.
func (p *gormProvider) listenIfPossible(pollTimeout time.Duration) {
	if p.waker != nil && pollTimeout > 0 {
		p.waker.Start()
	}
}

// Internal retries of retryable failures in fetch and ack (as duroxide-pg).
const (
	maxRetries = 3
	retryDelay = 50 * time.Millisecond
)

// signal is an in-process broadcast: wait returns a channel closed by the
// next notify.
type signal struct {
	mu sync.Mutex
	ch chan struct{}
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

func newSignal() *signal { return &signal{ch: make(chan struct{})} }

func (s *signal) wait() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ch
}

// notify wakes this Store's waiting fetchers and publishes the wake-up.
func (s *signal) notify() {
	s.wake()
	if s.publish != nil {
		s.publish()
	}
}

// wake wakes this Store's waiting fetchers only.
func (s *signal) wake() {
	s.mu.Lock()
	close(s.ch)
	s.ch = make(chan struct{})
	s.mu.Unlock()
}

// gormProvider implements duroxide.Provider and duroxide.ProviderAdmin on a Store.
type gormProvider struct {
	s    *Store
	orch *signal // orchestrator queue got messages
	work *signal // worker queue got items
	// waker carries wake-ups across Stores and processes (the dialect's
	// mechanism: LISTEN/NOTIFY, PRAGMA data_version); nil without
	// CapWakeup.
	waker dialect.Waker
	// fast is the dialect's one-statement provider steps; nil without
	// CapFastPaths (or a dialect that has none).
	fast providerFastPaths
}

var (
	_ duroxide.Provider      = (*gormProvider)(nil)
	_ duroxide.ProviderAdmin = (*gormProvider)(nil)
)

func (s *Store) provider() *gormProvider {
	s.provOnce.Do(func() {
		p := &gormProvider{s: s, orch: newSignal(), work: newSignal()}
		if s.has(CapFastPaths) {
			p.fast = cteFastPaths{}
		}
		if s.has(CapWakeup) {
			p.waker = s.d.NewWaker(s.env(), func(kind string) {
				switch kind {
				case dialect.NotifyOrch:
					p.orch.wake()
				case dialect.NotifyWork:
					p.work.wake()
				}
			})
		}
		if w := p.waker; w != nil {
			p.orch.publish = func() { w.Publish(dialect.NotifyOrch) }
			p.work.publish = func() { w.Publish(dialect.NotifyWork) }
			p.orch.waiting = w.Waiting
			p.work.waiting = w.Waiting
			// A Store on its own clock (WithClock) cannot turn a due time
			// into a wait: it keeps re-checking every poll interval.
			if h, ok := w.(dialect.HealthReporter); ok && !s.cfg.CustomClock {
				p.orch.healthy, p.work.healthy = h.Healthy, h.Healthy
				p.orch.nextDue, p.work.nextDue = p.orchNextDue, p.workNextDue
			}
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

// ---------------------------------------------------------------------------
// helpers

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

// fetchTx runs a fetch transaction. On PostgreSQL its commit does not wait
// for the WAL flush (synchronous_commit = off for this transaction only): a
// fetch only takes a lock and counts an attempt, so if a crash loses the
// commit the token simply no longer exists (its ack fails with
// ErrInvalidLockToken) and the messages are fetched again; any later
// synchronous commit (every ack) flushes it first. This saves one fsync per
// fetch, the dominant cost of a turn on PostgreSQL.
//
// Its lock waits are bounded by claimWait where the dialect can bound them
// (dialect.ClaimLockWait, whose settings also carry the asynchronous
// commit, in the one statement asyncCommitTx would cost): the transaction
// then fails with ErrLockTimeout, and the fetch attempt claims nothing
// (claimWaitExpired).
func (p *gormProvider) fetchTx(ctx context.Context, fn func(tx *gorm.DB) error) error {
	if lw, ok := p.s.d.(dialect.ClaimLockWait); ok {
		return p.tx(ctx, func(tx *gorm.DB) error {
			if err := tx.Exec(`SELECT ` + lw.ClaimSettingsSQL(p.s.has(CapAsyncCommit), durMS(p.claimWait()))).Error; err != nil {
				return err
			}
			return fn(tx)
		})
	}
	if !p.s.has(CapAsyncCommit) {
		return p.tx(ctx, fn)
	}
	return p.tx(ctx, func(tx *gorm.DB) error {
		if err := p.s.asyncCommitTx(tx); err != nil {
			return err
		}
		return fn(tx)
	})
}

// claimLockWait bounds how long a claim waits for a row lock another
// transaction holds (an instance lock row or instance row under an ack in
// flight, a force delete, a user's long transaction), where the dialect
// can bound it (dialect.ClaimLockWait). Claims skip queue rows other claims hold
// (SKIP LOCKED, advisory try-locks); this bounds the waits that remain.
// Table locks (DDL, LOCK TABLE) are taken before a statement runs and are
// waited for like any statement's (WithLockTimeout bounds those).
const claimLockWait = time.Second

// claimWait is claimLockWait, or the Store's lock timeout
// (WithLockTimeout) when that is shorter.
func (p *gormProvider) claimWait() time.Duration {
	if lt := p.s.cfg.LockTimeout; lt > 0 && lt < claimLockWait {
		return lt
	}
	return claimLockWait
}

// claimWaitExpired returns nil for a claim that failed because a lock
// wait exceeded claimWait (the dialect bounds claim waits: the rows it
// waited for are held by another transaction, so there is nothing to
// claim now, and the long poll goes on), else err.
func (p *gormProvider) claimWaitExpired(err error) error {
	if err != nil && errors.Is(translateError(err), ErrLockTimeout) {
		if _, ok := p.s.d.(dialect.ClaimLockWait); ok {
			return nil
		}
	}
	return err
}

// maxBusySkips bounds the candidates one fetch attempt skips because a
// lock wait on them exceeded claimWait (a table lock would make every
// candidate wait): past it the attempt claims nothing and the poll goes on.
const maxBusySkips = 4

// boundedStep runs fn, a claim step of the fetch transaction tx, so that a
// lock wait over claimWait fails only fn: where the dialect bounds claim
// waits (dialect.ClaimLockWait), fn runs after a savepoint, and on
// ErrLockTimeout the transaction rolls back to it and goes on (busy).
// Elsewhere fn just runs.
func (p *gormProvider) boundedStep(tx *gorm.DB, fn func() error) (busy bool, err error) {
	if _, ok := p.s.d.(dialect.ClaimLockWait); !ok {
		return false, fn()
	}
	if err := tx.SavePoint("claim").Error; err != nil {
		return false, err
	}
	err = fn()
	if err != nil && errors.Is(translateError(err), ErrLockTimeout) {
		if rerr := tx.RollbackTo("claim").Error; rerr != nil {
			return false, rerr
		}
		return true, nil
	}
	return false, err
}

// claimSettingsSQL is the SELECT list a one-statement fetch evaluates
// first (its CTE async; the forcing condition reads its column w): the
// dialect's claim settings (dialect.ClaimLockWait) with asynchronous
// commit, else the asynchronous commit alone.
func (p *gormProvider) claimSettingsSQL() string {
	if lw, ok := p.s.d.(dialect.ClaimLockWait); ok {
		return lw.ClaimSettingsSQL(true, durMS(p.claimWait()))
	}
	return `set_config('synchronous_commit', 'off', true) AS w`
}

func (p *gormProvider) tx(ctx context.Context, fn func(tx *gorm.DB) error) error {
	return p.s.db.WithContext(ctx).Transaction(fn)
}

// scanAll runs sql and scans every row into dest, like Raw(...).Scan(dest)
// (errors translated the same way) but without the recorder logger that
// GORM's Scan installs on every call: it renders the statement with all
// arguments inlined (logger.ExplainSQL) even when the Store's logger
// discards it, ~10 % of the client CPU of an orchestration on PostgreSQL
// with the many-parameter fetch and ack statements. The Store's logger
// still sees the statement.
func scanAll(db *gorm.DB, dest any, sql string, args ...any) error {
	switch dest.(type) {
	case *int64, *int, *string, *bool:
		// one column into a scalar: GORM's ScanRows would first try, and
		// fail (building an error), to parse dest as a model
		_, err := scanRow(db, sql, args, dest)
		return err
	}
	tx := db.Raw(sql, args...)
	rows, err := tx.Rows()
	if err != nil {
		return err
	}
	if rows.Next() {
		err = tx.ScanRows(rows, dest)
	} else if rerr := translateVia(tx, rows.Err()); rerr != nil {
		err = tx.AddError(rerr)
	}
	if cerr := rows.Close(); err == nil && cerr != nil {
		err = tx.AddError(cerr)
	}
	return err
}

// scanRow runs sql through GORM (its callbacks and logger see it) and
// scans the first row's columns into dest; found reports whether there was
// a row. Unlike scanAll it does not map rows onto a model (GORM would parse
// dest as one on every call).
func scanRow(db *gorm.DB, sql string, args []any, dest ...any) (found bool, err error) {
	tx := db.Raw(sql, args...)
	rows, err := tx.Rows()
	if err != nil {
		return false, err
	}
	if rows.Next() {
		found = true
		if err = rows.Scan(dest...); err != nil {
			err = tx.AddError(err)
		}
	} else if rerr := translateVia(tx, rows.Err()); rerr != nil {
		err = tx.AddError(rerr)
	}
	if cerr := rows.Close(); err == nil && cerr != nil {
		err = tx.AddError(cerr)
	}
	return found, err
}

// queryDirect runs query on db's connection pool (or transaction) without
// gorm's statement building: the ? placeholders are bound as the dialect
// binds them (none may be inside a literal; arguments are plain values),
// each row is handed to scan, the statement is reported to the Store's
// gorm logger like any other, and an error comes back as gorm returns it
// (translated by the dialector when the gorm.DB translates errors). It is
// for the provider's per-turn writes (the PostgreSQL one-statement acks,
// EnqueueForOrchestrator), where gorm's placeholder scan of the long SQL
// text, its per-argument reflection and its row scanning by column name
// were a large part of the client CPU of an orchestration. Like directTx it
// bypasses gorm's callbacks; the fetches keep them (they are where a
// callback registered on the Store sees a failing long poll).
func queryDirect(db *gorm.DB, query string, args []any, scan func(rows *sql.Rows) error) error {
	_, err := newDirectTx(db).each(query, args, func(rows *sql.Rows, _ int64) error { return scan(rows) })
	return gormTranslate(db, err)
}

// execDirect is queryDirect for a statement that returns no rows.
func execDirect(db *gorm.DB, query string, args ...any) error {
	_, err := newDirectTx(db).execRaw(query, args...)
	return gormTranslate(db, err)
}

// gormTranslate translates a driver error the way gorm does for db (by
// its dialector, when the gorm.DB translates errors).
func gormTranslate(db *gorm.DB, err error) error {
	if err != nil && db.Config.TranslateError {
		if tr, ok := db.Dialector.(gorm.ErrorTranslator); ok {
			return tr.Translate(err)
		}
	}
	return err
}

// withRetry runs fn again (up to maxRetries, after 50, 100 and 150 ms)
// while it fails retryably (as translateError classifies it: deadlock,
// serialization failure, busy SQLite, lost connection). A non-zero deadline bounds the retries: a retry
// whose back-off would end at or after it is not made, and the last error
// is returned (so a long poll never sleeps past its poll timeout). Each
// retry is an Info event "retry" on the WithSlog logger (op, attempt,
// wait, the failure's class and the database's message).
func (p *gormProvider) withRetry(ctx context.Context, op string, deadline time.Time, fn func() error) error {
	var err error
	for attempt := 0; ; attempt++ {
		err = fn()
		// classify through translateError: fn returns driver errors as they
		// came (wrapped), translated only by perr at the end
		if err == nil || attempt >= maxRetries || !errors.Is(translateError(err), ErrRetryable) || ctx.Err() != nil {
			return err
		}
		wait := retryDelay * time.Duration(attempt+1)
		if !deadline.IsZero() && !time.Now().Add(wait).Before(deadline) {
			return err
		}
		noteRetry(ctx)
		p.s.cfg.Slog.LogAttrs(ctx, slog.LevelInfo, "agentstore: retrying after a transient database failure",
			slog.String("component", "agentstore"), slog.String("event", "retry"), slog.String("op", op),
			slog.Int("attempt", attempt+1), slog.Duration("wait", wait),
			slog.String("class", retryClass(err)), slog.String("error", err.Error()))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// retryClass names the class of a retried failure for the retry event.
func retryClass(err error) string {
	if errors.Is(translateError(err), ErrLockTimeout) {
		return "lock_timeout"
	}
	return "retryable"
}

// idleRecheck is how often a fetch waiting on a healthy cross-Store
// wake-up re-checks the database when no wake-up arrives and no message is
// due sooner (the poll interval, if longer, instead): a safety net for a
// lost notification, since every enqueue wakes the waiting fetchers.
const idleRecheck = time.Second

// longPoll calls try until it yields something, fails, or pollTimeout
// passes; between tries it waits for sig or the fallback interval. try gets
// the poll's deadline for its internal retries (zero for a short poll,
// pollTimeout 0, which keeps duroxide's three retries). While sig's
// wake-up is healthy (sig.healthy), an empty try is followed by one
// sig.nextDue query (after a wake-up or once the last answer is due; a
// plain re-check reuses it) and the wait lasts until that time, a
// wake-up, or max(fallback, idleRecheck), whichever comes first: about
// one claim statement per idle second per waiting fetch.
// (nextDue is set only on a Store on the real clock, so due times are
// Unix ms of time.Now.)
func longPoll[T any](ctx context.Context, sig *signal, pollTimeout, fallback time.Duration, try func(deadline time.Time) (*T, error)) (*T, error) {
	deadline := time.Now().Add(pollTimeout)
	retryBound := deadline
	if pollTimeout <= 0 {
		retryBound = time.Time{}
	}
	// due is the last nextDue answer (dueOK: there is one); fresh means
	// it must be asked again: first round, after a wake-up, once due.
	var due, askedAt int64
	dueOK, fresh := false, true
	for {
		ch := sig.wait()
		since := time.Now().UnixMilli()
		v, err := try(retryBound)
		if err != nil || v != nil {
			return v, err
		}
		remaining := time.Until(deadline)
		if remaining <= 0 {
			return nil, nil
		}
		wait := fallback
		if sig.healthy != nil && sig.nextDue != nil && sig.healthy() {
			// Anything committed since ch was taken has woken it; what
			// remains is time: the next delay or lock expiry. A re-check
			// after idleRecheck without a wake-up keeps the last answer
			// (a lock taken since by another Store is seen expired by the
			// claim at a re-check).
			// A negative answer (a message waits for a locked instance)
			// keeps the poll interval and is asked again after idleRecheck.
			if fresh || (dueOK && due <= since && (due >= 0 || since-askedAt >= idleRecheck.Milliseconds())) {
				var err error
				due, dueOK, err = sig.nextDue(ctx, since)
				fresh, askedAt = err != nil, since
			}
			if !fresh {
				switch {
				case dueOK && due < 0:
					wait = fallback
				case dueOK:
					wait = min(max(fallback, idleRecheck), max(time.Duration(due-time.Now().UnixMilli())*time.Millisecond, time.Millisecond))
				default:
					wait = max(fallback, idleRecheck)
				}
			}
		}
		t := time.NewTimer(min(remaining, wait))
		if sig.waiting != nil {
			sig.waiting(1)
		}
		select {
		case <-ctx.Done():
		case <-ch:
			fresh = true
			sig.woke(ctx)
		case <-t.C:
		}
		t.Stop()
		if sig.waiting != nil {
			sig.waiting(-1)
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
}

// minDue runs a query of one column t (MIN over UNION ALL branches) and
// returns its value.
func (p *gormProvider) minDue(ctx context.Context, sql string, args ...any) (int64, bool, error) {
	var row struct{ T *int64 }
	if err := p.s.db.WithContext(ctx).Raw(sql, args...).Scan(&row).Error; err != nil {
		return 0, false, err
	}
	if row.T == nil {
		return 0, false, nil
	}
	return *row.T, true, nil
}

// orchNextDue: the earliest future visible_at or lock expiry of an
// orchestrator-queue message, or instance-lock expiry, after since. While
// a visible message waits for a locked instance (a turn in flight, whose
// ack need not wake anyone), it is -1: the fetch keeps re-checking at the
// poll interval, as without a healthy wake-up.
func (p *gormProvider) orchNextDue(ctx context.Context, since int64) (int64, bool, error) {
	oq, il := p.q(models.TableOrchestratorQueue), p.q(models.TableInstanceLocks)
	return p.minDue(ctx, `SELECT MIN(x.t) AS t FROM (SELECT MIN(visible_at) AS t FROM `+oq+` WHERE visible_at > ?`+
		` UNION ALL SELECT MIN(locked_until) AS t FROM `+oq+` WHERE lock_token IS NOT NULL AND locked_until > ?`+
		` UNION ALL SELECT MIN(locked_until) AS t FROM `+il+` WHERE locked_until > ?`+
		` UNION ALL SELECT -1 AS t WHERE EXISTS (SELECT 1 FROM `+oq+` q JOIN `+il+` l ON l.instance_id = q.instance_id`+
		` WHERE l.locked_until > ? AND q.visible_at <= ? AND q.lock_token IS NULL)) x`,
		since, since, since, since, since)
}

// workNextDue: the earliest future visible_at or lock expiry of a
// worker-queue item, or activity-session lease expiry, after since.
func (p *gormProvider) workNextDue(ctx context.Context, since int64) (int64, bool, error) {
	wq, as := p.q(models.TableWorkerQueue), p.q(models.TableActivitySessions)
	return p.minDue(ctx, `SELECT MIN(x.t) AS t FROM (SELECT MIN(visible_at) AS t FROM `+wq+` WHERE visible_at > ?`+
		` UNION ALL SELECT MIN(locked_until) AS t FROM `+wq+` WHERE lock_token IS NOT NULL AND locked_until > ?`+
		` UNION ALL SELECT MIN(locked_until) AS t FROM `+as+` WHERE locked_until > ?) x`, since, since, since)
}

func newLockToken() string { return "lock_" + uuid.NewString() }

// durMS converts a duration to whole milliseconds, rounding up: a lock,
// lease or delay of 500 µs lasts 1 ms, never 0 (which would be expired or
// due at once).
func durMS(d time.Duration) int64 {
	if d <= 0 {
		return d.Milliseconds()
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// placeholders returns "?,?,...,?" for n values.
func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?,", n), ",")
}

func strArgs(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

func ptr[T any](v T) *T { return &v }

// decodeHistory decodes stored events in order, each once (Event's
// decoder validates and parses the text in one pass over it, so it is
// called directly rather than through json.Unmarshal, which would scan the
// text once more first); the first failure is returned as a
// *CorruptRowError.
func decodeHistory(instance string, execution int64, rows []historyRow) ([]duroxide.Event, error) {
	out := make([]duroxide.Event, 0, len(rows))
	for _, r := range rows {
		var e duroxide.Event
		if err := e.UnmarshalJSON([]byte(r.EventData)); err != nil {
			return nil, &CorruptRowError{Table: models.TableHistory,
				RowID: fmt.Sprintf("%s/%d/%d", instance, execution, r.EventID), Column: "event_data", Err: err}
		}
		out = append(out, e)
	}
	return out, nil
}

type historyRow struct {
	EventID   int64
	EventData string
}

// readHistory runs query, a query of (event_id, event_data) rows in event
// id order, and decodes at most max events (max < 0: all) straight from
// the driver's buffer: the stored text is neither copied into a string
// nor scanned through GORM's reflection, and each event is decoded once.
// It returns the events, the event_id of the last decoded row (the cursor
// of a page) and the number of rows; the first undecodable row is a
// *CorruptRowError.
func readHistory(db *gorm.DB, instance string, execution int64, max int, query string, args ...any) ([]duroxide.Event, int64, int, error) {
	tx := db.Raw(query, args...)
	rows, err := tx.Rows()
	if err != nil {
		return nil, 0, 0, err
	}
	defer rows.Close()
	var (
		out  []duroxide.Event
		id   int64
		last int64
		data sql.RawBytes
		n    int
	)
	for rows.Next() {
		n++
		if max >= 0 && len(out) == max {
			continue // counted only: the caller asked for one row more than it returns
		}
		if err := rows.Scan(&id, &data); err != nil {
			return nil, 0, 0, tx.AddError(err)
		}
		var e duroxide.Event
		if err := e.UnmarshalJSON(data); err != nil {
			return nil, 0, 0, &CorruptRowError{Table: models.TableHistory,
				RowID: fmt.Sprintf("%s/%d/%d", instance, execution, id), Column: "event_data", Err: err}
		}
		out, last = append(out, e), id
	}
	if err := translateVia(tx, rows.Err()); err != nil {
		return nil, 0, 0, tx.AddError(err)
	}
	if out == nil {
		out = []duroxide.Event{}
	}
	return out, last, n, nil
}

// loadHistory returns the whole history of one execution, each event
// decoded once (readHistory).
func (p *gormProvider) loadHistory(tx *gorm.DB, instance string, execution int64) ([]duroxide.Event, error) {
	evs, _, _, err := readHistory(tx, instance, execution, -1, `SELECT event_id, event_data FROM `+p.q(models.TableHistory)+
		` WHERE instance_id = ? AND execution_id = ? ORDER BY event_id`, instance, execution)
	return evs, err
}

func validateWorkItem(item duroxide.WorkItem) error {
	if item == nil {
		return invalidf("nil work item")
	}
	if item.RoutingInstance() == "" {
		return invalidf("%s: empty instance", item.WorkItemType())
	}
	return checkUTF8(item.WorkItemType(), item)
}

// checkUTF8 refuses values holding strings that are not valid UTF-8: JSON
// encoding would silently replace the bytes with U+FFFD, so they could not
// be read back exactly. It walks exported fields, pointers, interfaces and
// slices.
func checkUTF8(what string, v any) error {
	bad := false
	var walk func(rv reflect.Value)
	walk = func(rv reflect.Value) {
		if bad {
			return
		}
		switch rv.Kind() {
		case reflect.String:
			bad = !utf8.ValidString(rv.String())
		case reflect.Pointer, reflect.Interface:
			if !rv.IsNil() {
				walk(rv.Elem())
			}
		case reflect.Struct:
			for i := range rv.NumField() {
				if rv.Type().Field(i).IsExported() {
					walk(rv.Field(i))
				}
			}
		case reflect.Slice, reflect.Array:
			for i := range rv.Len() {
				walk(rv.Index(i))
			}
		}
	}
	walk(reflect.ValueOf(v))
	if bad {
		return invalidf("%s: string is not valid UTF-8", what)
	}
	return nil
}

// ---------------------------------------------------------------------------
// orchestrator queue: enqueue

// EnqueueForOrchestrator implements duroxide.Provider.
func (p *gormProvider) EnqueueForOrchestrator(ctx context.Context, item duroxide.WorkItem, delay time.Duration) error {
	const op = "enqueue_for_orchestrator"
	if err := validateWorkItem(item); err != nil {
		return perr(op, err)
	}
	if _, ok := item.(*duroxide.ActivityExecute); ok {
		return perr(op, invalidf("ActivityExecute belongs to the worker queue"))
	}
	if delay < 0 {
		return perr(op, invalidf("negative delay"))
	}
	data, err := json.Marshal(item)
	if err != nil {
		return perr(op, invalidf("encode work item: %v", err))
	}
	now := p.s.nowMS()
	visible := now + durMS(delay)
	if tf, ok := item.(*duroxide.TimerFired); ok && tf.FireAtMS > 0 {
		visible = int64(tf.FireAtMS)
		if delay > 0 {
			visible = max(visible, now+durMS(delay))
		}
	}
	// one INSERT of the row's columns, as Create(&models.OrchestratorQueueItem{...})
	// writes them, without gorm's per-call reflection (see queryDirect)
	if err := execDirect(p.s.db.WithContext(ctx), `INSERT INTO `+p.q(models.TableOrchestratorQueue)+
		` (instance_id, work_item, visible_at, created_at, attempt_count) VALUES (?, ?, ?, ?, 0)`,
		item.RoutingInstance(), string(data), visible, now); err != nil {
		return perr(op, fmt.Errorf("enqueue %s for %s: %w", item.WorkItemType(), item.RoutingInstance(), dbErr(err)))
	}
	p.orch.notify()
	return nil
}

// orchRows builds the orchestrator-queue rows of items (ActivityExecute refused).
func orchRows(items []duroxide.WorkItem, now int64) ([]models.OrchestratorQueueItem, error) {
	rows := make([]models.OrchestratorQueueItem, 0, len(items))
	for _, it := range items {
		if err := validateWorkItem(it); err != nil {
			return nil, err
		}
		if _, ok := it.(*duroxide.ActivityExecute); ok {
			return nil, invalidf("ActivityExecute in orchestrator items")
		}
		data, err := json.Marshal(it)
		if err != nil {
			return nil, invalidf("encode %s: %v", it.WorkItemType(), err)
		}
		visible := now
		if tf, ok := it.(*duroxide.TimerFired); ok && tf.FireAtMS > 0 {
			visible = int64(tf.FireAtMS)
		}
		rows = append(rows, models.OrchestratorQueueItem{InstanceID: it.RoutingInstance(), WorkItem: string(data), VisibleAt: visible, CreatedAt: now})
	}
	return rows, nil
}

// workerRows builds worker-queue rows, copying the activity identity,
// session and tag of ActivityExecute items into their columns.
func workerRows(items []duroxide.WorkItem, now int64) ([]models.WorkerQueueItem, error) {
	rows := make([]models.WorkerQueueItem, 0, len(items))
	for _, it := range items {
		if err := validateWorkItem(it); err != nil {
			return nil, err
		}
		data, err := json.Marshal(it)
		if err != nil {
			return nil, invalidf("encode %s: %v", it.WorkItemType(), err)
		}
		r := models.WorkerQueueItem{WorkItem: string(data), VisibleAt: now, CreatedAt: now}
		if ae, ok := it.(*duroxide.ActivityExecute); ok {
			r.InstanceID = ptr(ae.Instance)
			r.ExecutionID = ptr(int64(ae.ExecutionID))
			r.ActivityID = ptr(int64(ae.ID))
			r.SessionID = ae.SessionID
			r.Tag = ae.Tag
		}
		rows = append(rows, r)
	}
	return rows, nil
}

// ---------------------------------------------------------------------------
// orchestrator queue: fetch

// FetchOrchestrationItem implements duroxide.Provider.
func (p *gormProvider) FetchOrchestrationItem(ctx context.Context, lockTimeout, pollTimeout time.Duration, filter *duroxide.DispatcherCapabilityFilter) (*duroxide.OrchestrationItem, error) {
	const op = "fetch_orchestration_item"
	if lockTimeout <= 0 {
		return nil, perr(op, invalidf("lock timeout must be positive"))
	}
	if filter != nil && len(filter.SupportedDuroxideVersions) == 0 {
		return nil, nil // supports nothing
	}
	p.listenIfPossible(pollTimeout)
	item, err := longPoll(ctx, p.orch, pollTimeout, p.s.cfg.PollInterval, func(deadline time.Time) (*duroxide.OrchestrationItem, error) {
		var it *duroxide.OrchestrationItem
		err := p.withRetry(ctx, "fetch_orchestration_item", deadline, func() error {
			var e error
			start := p.s.nowMS()
			if it, e = p.fetchOrchOnce(ctx, lockTimeout, filter); e != nil || it == nil {
				return p.claimWaitExpired(e)
			}
			it, e = p.keepOrchLease(ctx, it, start, lockTimeout)
			return e
		})
		return it, err
	})
	return item, perr(op, err)
}

// Lease validity. A claim computes its lease end from a clock read before
// its statements run (the candidate query needs it), so a claim that
// waited (on a lock another transaction holds, a busy database, a
// descheduled process) would hand out a lease already partly or wholly
// spent: every ack with it would fail, and another fetcher could take the
// item at once (duroxide#46/#47, duroxide-pg#21). So every fetch reads the
// clock again when its claim returns and, when more than leaseSlackMS has
// passed since the fetch started, re-stamps the lease (the instance lock
// and its messages, or the worker item and its activity session) to end
// exactly the lock timeout after that second reading. A lease a fetch
// returns therefore ends at least lockTimeout - leaseSlackMS after the
// fetch returns, and exactly start + lockTimeout when the claim was quick.

// maxLeaseSlack bounds leaseSlackMS.
const maxLeaseSlack = 100 * time.Millisecond

// maxRestamps bounds the re-stamps of one fetch (each re-stamp that itself
// took longer than the slack is followed by another).
const maxRestamps = 3

// leaseSlackMS is how much of its lease a fetch may have spent when it
// returns: a twentieth of the lock timeout, at most maxLeaseSlack.
func leaseSlackMS(lockTimeout time.Duration) int64 {
	return min(durMS(lockTimeout)/20, maxLeaseSlack.Milliseconds())
}

// keepOrchLease re-stamps the lease of it, claimed by a fetch that read
// its clock at start, when the claim took longer than the slack (see
// "Lease validity"). A lease another fetcher took over meanwhile (it had
// expired during the claim) or whose instance was deleted is not handed
// out: nil, nil. A failed re-stamp releases the claim.
func (p *gormProvider) keepOrchLease(ctx context.Context, it *duroxide.OrchestrationItem, start int64, lockTimeout time.Duration) (*duroxide.OrchestrationItem, error) {
	slack, lt := leaseSlackMS(lockTimeout), durMS(lockTimeout)
	for i := 0; ; i++ {
		now := p.s.nowMS()
		if now-start <= slack || i == maxRestamps {
			return it, nil
		}
		var held bool
		err := p.tx(ctx, func(tx *gorm.DB) error {
			res := tx.Exec(`UPDATE `+p.q(models.TableInstanceLocks)+` SET locked_until = ? WHERE lock_token = ?`, now+lt, it.LockToken)
			if res.Error != nil || res.RowsAffected == 0 {
				return res.Error
			}
			held = true
			return tx.Exec(`UPDATE `+p.q(models.TableOrchestratorQueue)+` SET locked_until = ? WHERE lock_token = ?`, now+lt, it.LockToken).Error
		})
		if err != nil {
			p.releaseOrchLease(ctx, it.LockToken)
			return nil, fmt.Errorf("renew the lease of %s after a slow claim: %w", it.Instance, err)
		}
		if !held {
			return nil, nil
		}
		start = now
	}
}

// releaseOrchLease undoes a claim whose fetch then failed: the lock row
// goes, the messages are unlocked and their attempt uncounted. Best
// effort: if it fails too, the lock expires.
func (p *gormProvider) releaseOrchLease(ctx context.Context, token string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = p.tx(ctx, func(tx *gorm.DB) error {
		if err := tx.Exec(`DELETE FROM `+p.q(models.TableInstanceLocks)+` WHERE lock_token = ?`, token).Error; err != nil {
			return err
		}
		return tx.Exec(`UPDATE `+p.q(models.TableOrchestratorQueue)+` SET lock_token = NULL, locked_until = NULL,`+
			` attempt_count = CASE WHEN attempt_count > 0 THEN attempt_count - 1 ELSE 0 END WHERE lock_token = ?`, token).Error
	})
}

type orchMsgRow struct {
	ID           int64
	WorkItem     string
	AttemptCount int32
}

// capabilitySQL returns the predicate matching executions e compatible with
// filter: unpinned, or inside any range (row-value comparison, no packing).
func capabilitySQL(filter *duroxide.DispatcherCapabilityFilter) (string, []any) {
	var b strings.Builder
	var args []any
	b.WriteString("(e.duroxide_version_major IS NULL")
	for _, r := range filter.SupportedDuroxideVersions {
		b.WriteString(" OR ((e.duroxide_version_major, COALESCE(e.duroxide_version_minor, 0), COALESCE(e.duroxide_version_patch, 0)) >= (?, ?, ?)" +
			" AND (e.duroxide_version_major, COALESCE(e.duroxide_version_minor, 0), COALESCE(e.duroxide_version_patch, 0)) <= (?, ?, ?))")
		args = append(args, int64(r.Min.Major()), int64(r.Min.Minor()), int64(r.Min.Patch()),
			int64(r.Max.Major()), int64(r.Max.Minor()), int64(r.Max.Patch()))
	}
	b.WriteString(")")
	return b.String(), args
}

// The orchestration candidate query comes in three levels; each of the
// first two answers with a row whose instance_id is NULL when it cannot
// decide, and the fetch asks the next level.
const (
	// orchCandWindow looks at the first orchCandidateWindow visible
	// messages of the visible index (visible_at, id) only.
	orchCandWindow = iota
	// orchCandWalk visits the instance ids that have queued messages, up
	// to orchCandidateWalkMax of them (a loose index scan of the
	// (instance_id, visible_at, id) index: one probe per instance, an
	// excluded instance's messages never read), and takes each eligible
	// instance's oldest visible message.
	orchCandWalk
	// orchCandScan reads the visible index until the first eligible
	// message (what the window does, without its bound).
	orchCandScan
)

const (
	// orchCandidateWindow is how many visible messages the window level
	// inspects.
	orchCandidateWindow = 8
	// orchCandidateWalkMax is how many instance ids the walk level visits
	// before it gives up (the queue then holds many instances, and a
	// scan past the excluded messages is the cheaper way).
	orchCandidateWalkMax = 256
)

// orchCandidateSQL returns the query, at level (orchCand*), for the oldest
// visible, unclaimed message of an unlocked, compatible instance not in
// tried (one instance_id column, at most one row), taken without row
// locks so a failed candidate blocks nobody. The window and walk levels
// return a row with a NULL instance_id when they cannot decide (the
// window is full of excluded instances' messages; the queue holds more
// than orchCandidateWalkMax instances): ask the next level.
//
// So the messages of excluded instances (locked by a turn in flight,
// filtered out, or tried) decide the cost only when the queue also holds
// many instances: a locked instance's backlog is skipped, not read. Every
// level picks the message the plain ORDER BY visible_at, id over every
// eligible message would.
func (p *gormProvider) orchCandidateSQL(now int64, filter *duroxide.DispatcherCapabilityFilter, tried []string, level int) (string, []any) {
	oq, il := p.q(models.TableOrchestratorQueue), p.q(models.TableInstanceLocks)
	// eligible returns the joins and conditions that keep instance col:
	// no live instance lock, compatible with filter, not tried.
	eligible := func(col string) (joins, where string, args []any) {
		where = ` AND NOT EXISTS (SELECT 1 FROM ` + il + ` il WHERE il.instance_id = ` + col + ` AND il.locked_until > ?)`
		args = append(args, now)
		if filter != nil {
			joins = ` LEFT JOIN ` + p.q(models.TableInstances) + ` i ON i.instance_id = ` + col +
				` LEFT JOIN ` + p.q(models.TableExecutions) + ` e ON e.instance_id = i.instance_id AND e.execution_id = i.current_execution_id`
			c, cargs := capabilitySQL(filter)
			where += ` AND ` + c
			args = append(args, cargs...)
		}
		if len(tried) > 0 {
			where += ` AND ` + col + ` NOT IN (` + placeholders(len(tried)) + `)`
			args = append(args, strArgs(tried)...)
		}
		return joins, where, args
	}
	switch level {
	case orchCandWindow:
		j, w, args := eligible("x.instance_id")
		return `SELECT u.instance_id FROM (SELECT 0 AS ph, x.instance_id, x.visible_at, x.id FROM` +
			` (SELECT q.id, q.instance_id, q.visible_at, q.lock_token, q.locked_until FROM ` + oq + ` q` +
			` WHERE q.visible_at <= ? ORDER BY q.visible_at, q.id LIMIT ` + strconv.Itoa(orchCandidateWindow) + `) x` + j +
			` WHERE (x.lock_token IS NULL OR x.locked_until <= ?)` + w +
			// the window-full row: sorts after every candidate
			` UNION ALL SELECT 1, NULL, NULL, NULL WHERE EXISTS (SELECT 1 FROM ` + oq + ` q WHERE q.visible_at <= ?` +
			` ORDER BY q.visible_at, q.id LIMIT 1 OFFSET ` + strconv.Itoa(orchCandidateWindow-1) + `)) u` +
			` ORDER BY u.ph, u.visible_at, u.id LIMIT 1`, append(append([]any{now, now}, args...), now)
	case orchCandWalk:
		j, w, args := eligible("ids.iid")
		return `WITH RECURSIVE ids(iid, n) AS (SELECT (SELECT q.instance_id FROM ` + oq + ` q ORDER BY q.instance_id LIMIT 1), 1` +
			` UNION ALL SELECT (SELECT q.instance_id FROM ` + oq + ` q WHERE q.instance_id > ids.iid ORDER BY q.instance_id LIMIT 1), ids.n + 1` +
			` FROM ids WHERE ids.iid IS NOT NULL AND ids.n <= ` + strconv.Itoa(orchCandidateWalkMax) + `),` +
			// each eligible instance's oldest visible, unclaimed message
			// (instance_id as a range and ordered by the whole index key:
			// with instance_id = x PostgreSQL drops instance_id from the
			// order and may read the visible index filtering on
			// instance_id instead), and the walk's end (iid NULL: complete)
			` h AS MATERIALIZED (SELECT ids.iid, CASE WHEN ids.iid IS NULL THEN NULL ELSE (SELECT q.id FROM ` + oq + ` q` +
			` WHERE q.instance_id >= ids.iid AND q.instance_id <= ids.iid AND q.visible_at <= ? AND (q.lock_token IS NULL OR q.locked_until <= ?)` +
			` ORDER BY q.instance_id, q.visible_at, q.id LIMIT 1) END AS hid FROM ids` + j + ` WHERE ids.iid IS NULL OR (1 = 1` + w + `))` +
			// (the head's visible_at by a primary-key probe, not a join: the
			// planner cannot estimate h and may hash-join a seq scan)
			` SELECT u.instance_id FROM (SELECT 0 AS ph, h.iid AS instance_id, (SELECT q.visible_at FROM ` + oq + ` q WHERE q.id = h.hid) AS va, h.hid` +
			` FROM h WHERE h.hid IS NOT NULL AND EXISTS (SELECT 1 FROM h WHERE h.iid IS NULL)` +
			// the walk-incomplete row
			` UNION ALL SELECT 1, NULL, NULL, NULL WHERE NOT EXISTS (SELECT 1 FROM h WHERE h.iid IS NULL)) u` +
			` ORDER BY u.ph, u.va, u.hid LIMIT 1`, append([]any{now, now}, args...)
	}
	j, w, args := eligible("q.instance_id")
	return `SELECT q.instance_id FROM ` + oq + ` q` + j + ` WHERE q.visible_at <= ? AND (q.lock_token IS NULL OR q.locked_until <= ?)` + w +
		` ORDER BY q.visible_at, q.id LIMIT 1`, append([]any{now, now}, args...)
}

func (p *gormProvider) fetchOrchOnce(ctx context.Context, lockTimeout time.Duration, filter *duroxide.DispatcherCapabilityFilter) (*duroxide.OrchestrationItem, error) {
	if p.fast != nil && p.s.has(CapAdvisoryLocks) {
		return p.fast.fetchOrchestration(p, ctx, lockTimeout, filter)
	}
	var item *duroxide.OrchestrationItem
	var corrupt error
	err := p.fetchTx(ctx, func(tx *gorm.DB) error {
		item, corrupt = nil, nil
		now := p.s.nowMS()
		var tried []string
		level := orchCandWindow
		busySkips := 0
		for {
			// 1. candidate (SQLite: BEGIN IMMEDIATE already serialises fetchers)
			sql, args := p.orchCandidateSQL(now, filter, tried, level)
			var cands []struct{ InstanceID *string }
			if err := tx.Raw(sql, args...).Scan(&cands).Error; err != nil {
				return fmt.Errorf("select candidate: %w", err)
			}
			if len(cands) == 0 {
				return nil
			}
			if cands[0].InstanceID == nil { // this level cannot decide: the next one
				if level == orchCandScan {
					return nil
				}
				level++
				continue
			}
			instance := *cands[0].InstanceID
			tried = append(tried, instance)

			// 2. take the instance lock unless a live one exists, and 3. lock
			// every visible, unlocked message of the instance (the batch);
			// a lock wait over claimWait skips the candidate
			token := newLockToken()
			until := now + durMS(lockTimeout)
			var msgs []orchMsgRow
			won := false
			busy, err := p.boundedStep(tx, func() error {
				res := tx.Exec(`INSERT INTO `+p.q(models.TableInstanceLocks)+` AS il (instance_id, lock_token, locked_until, locked_at) VALUES (?, ?, ?, ?)`+
					` ON CONFLICT (instance_id) DO UPDATE SET lock_token = excluded.lock_token, locked_until = excluded.locked_until, locked_at = excluded.locked_at`+
					` WHERE il.locked_until <= ?`, instance, token, until, now, now)
				if res.Error != nil {
					return fmt.Errorf("lock instance %s: %w", instance, res.Error)
				}
				if won = res.RowsAffected > 0; !won {
					return nil
				}
				if err := tx.Raw(`UPDATE `+p.q(models.TableOrchestratorQueue)+` SET lock_token = ?, locked_until = ?, attempt_count = attempt_count + 1`+
					` WHERE instance_id = ? AND visible_at <= ? AND (lock_token IS NULL OR locked_until <= ?) RETURNING id, work_item, attempt_count`,
					token, until, instance, now, now).Scan(&msgs).Error; err != nil {
					return fmt.Errorf("lock messages of %s: %w", instance, err)
				}
				return nil
			})
			if err != nil {
				return err
			}
			if busy {
				if busySkips++; busySkips > maxBusySkips {
					return nil
				}
				continue // its rows are held by another transaction: next candidate
			}
			if !won {
				continue // lost the race: next candidate
			}
			if len(msgs) == 0 { // the messages were consumed meanwhile: release and move on
				if err := tx.Exec(`DELETE FROM `+p.q(models.TableInstanceLocks)+` WHERE lock_token = ?`, token).Error; err != nil {
					return fmt.Errorf("release lock of %s: %w", instance, err)
				}
				continue
			}
			it, bad := orchItem(instance, token, msgs)
			if bad != nil {
				corrupt = bad // keep the lock and the counted attempt; report the row
				return nil
			}

			// 4. instance metadata and history
			if err := p.fillOrchMetadata(tx, it); err != nil {
				return err
			}

			// 5. orphan queue messages (never-started instance): drop them and move on
			if isOrphanBatch(it) {
				if err := tx.Exec(`DELETE FROM `+p.q(models.TableOrchestratorQueue)+` WHERE lock_token = ?`, token).Error; err != nil {
					return fmt.Errorf("drop orphan messages of %s: %w", instance, err)
				}
				if err := tx.Exec(`DELETE FROM `+p.q(models.TableInstanceLocks)+` WHERE lock_token = ?`, token).Error; err != nil {
					return fmt.Errorf("release lock of %s: %w", instance, err)
				}
				continue
			}
			item = it
			return nil
		}
	})
	if err != nil {
		return nil, err
	}
	if corrupt != nil {
		return nil, corrupt
	}
	return item, nil
}

// orchItem builds the fetched item from the locked messages in id order; a
// message that does not decode is returned as a *CorruptRowError.
func orchItem(instance, token string, msgs []orchMsgRow) (*duroxide.OrchestrationItem, error) {
	sort.Slice(msgs, func(i, j int) bool { return msgs[i].ID < msgs[j].ID })
	it := &duroxide.OrchestrationItem{Instance: instance, LockToken: token}
	for _, m := range msgs {
		it.AttemptCount = max(it.AttemptCount, uint32(m.AttemptCount))
		w, err := duroxide.UnmarshalWorkItem([]byte(m.WorkItem))
		if err != nil {
			return nil, &CorruptRowError{Table: models.TableOrchestratorQueue, RowID: fmt.Sprint(m.ID), Column: "work_item", Err: err}
		}
		it.Messages = append(it.Messages, w)
	}
	return it, nil
}

// isOrphanBatch reports a batch of queue messages only, for an instance
// that was never started (no instance row, no history).
func isOrphanBatch(it *duroxide.OrchestrationItem) bool {
	return it.OrchestrationName == "Unknown" && len(it.History) == 0 && it.HistoryError == "" && allQueueMessages(it.Messages)
}

func allQueueMessages(ms []duroxide.WorkItem) bool {
	for _, m := range ms {
		if _, ok := m.(*duroxide.QueueMessage); !ok {
			return false
		}
	}
	return len(ms) > 0
}

// fillOrchMetadata sets name, version, execution, history and key-value
// snapshot of it: one query for an existing instance, two for one not
// created yet. The rows are scanned without GORM's reflection and each
// history event is decoded once, straight from the driver's buffer.
func (p *gormProvider) fillOrchMetadata(tx *gorm.DB, it *duroxide.OrchestrationItem) error {
	q := tx.Raw(`SELECT 0 AS kind, i.orchestration_name, i.orchestration_version, i.current_execution_id, h.event_id, h.event_data,`+
		` CAST(NULL AS text) AS kv_key FROM `+p.q(models.TableInstances)+` i LEFT JOIN `+p.q(models.TableHistory)+
		` h ON h.instance_id = i.instance_id AND h.execution_id = i.current_execution_id WHERE i.instance_id = ?`+
		` UNION ALL SELECT 1, NULL, NULL, 0, kv.last_updated_at_ms, kv.value, kv.key FROM `+p.q(models.TableKVStore)+` kv WHERE kv.instance_id = ?`+
		` ORDER BY kind, event_id`, it.Instance, it.Instance)
	rows, err := q.Rows()
	if err != nil {
		return fmt.Errorf("load instance %s: %w", it.Instance, err)
	}
	defer rows.Close()
	it.KVSnapshot = map[string]duroxide.KvEntry{}
	var (
		kind          int
		name, version sql.NullString
		exec          int64
		eventID       sql.NullInt64
		data          sql.RawBytes
		kvKey         sql.NullString
		found         bool
		fname         string
		fversion      *string
		hist          historyDecoder
	)
	for rows.Next() {
		if err := rows.Scan(&kind, &name, &version, &exec, &eventID, &data, &kvKey); err != nil {
			return fmt.Errorf("load instance %s: %w", it.Instance, q.AddError(err))
		}
		switch {
		case kind == 1 && kvKey.Valid && data != nil && eventID.Valid:
			it.KVSnapshot[kvKey.String] = duroxide.KvEntry{Value: string(data), LastUpdatedAtMS: uint64(eventID.Int64)}
		case kind == 0:
			if !found {
				found, fname, hist.instance, hist.exec = true, name.String, it.Instance, exec
				if version.Valid {
					fversion = ptr(version.String)
				}
			}
			if eventID.Valid && data != nil {
				hist.add(eventID.Int64, data)
			}
		}
	}
	if err := translateVia(q, rows.Err()); err != nil {
		return fmt.Errorf("load instance %s: %w", it.Instance, q.AddError(err))
	}
	if found {
		setOrchMetadataDecoded(it, true, fname, fversion, hist.exec, hist.events, hist.err)
		return nil
	}
	// history written by acks without metadata (no instance row): the newest execution's
	var hrows []struct {
		ExecutionID int64
		EventID     int64
		EventData   string
	}
	if err := tx.Raw(`SELECT execution_id, event_id, event_data FROM `+p.q(models.TableHistory)+` WHERE instance_id = ? AND execution_id =`+
		` (SELECT MAX(execution_id) FROM `+p.q(models.TableHistory)+` WHERE instance_id = ?) ORDER BY event_id`, it.Instance, it.Instance).Scan(&hrows).Error; err != nil {
		return fmt.Errorf("load history of %s: %w", it.Instance, err)
	}
	var hexec int64
	var hr []historyRow
	for _, r := range hrows {
		hexec = r.ExecutionID
		hr = append(hr, historyRow{EventID: r.EventID, EventData: r.EventData})
	}
	setOrchMetadata(it, false, "", nil, hexec, hr)
	return nil
}

// historyDecoder decodes the history rows of one execution as they are
// scanned, each once; the first undecodable row is kept as a
// *CorruptRowError and later rows are skipped.
type historyDecoder struct {
	instance string
	exec     int64
	events   []duroxide.Event
	err      error
}

func (d *historyDecoder) add(id int64, data []byte) {
	if d.err != nil {
		return
	}
	var e duroxide.Event
	if err := e.UnmarshalJSON(data); err != nil {
		d.err = &CorruptRowError{Table: models.TableHistory, RowID: fmt.Sprintf("%s/%d/%d", d.instance, d.exec, id), Column: "event_data", Err: err}
		return
	}
	d.events = append(d.events, e)
}

// setOrchMetadata sets name, version, execution and decoded history of it.
// found: the instance row exists (name, version and execution come from
// it); otherwise they come from the batch (any Start or ContinueAsNew in
// it) and exec is the execution of history written by acks without
// metadata (0: none).
func setOrchMetadata(it *duroxide.OrchestrationItem, found bool, name string, version *string, exec int64, hist []historyRow) {
	h, err := decodeHistory(it.Instance, exec, hist)
	setOrchMetadataDecoded(it, found, name, version, exec, h, err)
}

// setOrchMetadataDecoded is setOrchMetadata with the history already
// decoded: hist holds the events decoded before the first failure
// decodeErr (reported in HistoryError, with an empty History).
func setOrchMetadataDecoded(it *duroxide.OrchestrationItem, found bool, name string, version *string, exec int64, hist []duroxide.Event, decodeErr error) {
	if found {
		it.OrchestrationName = name
		it.Version = "unknown"
		if version != nil {
			it.Version = *version
		}
	} else {
		it.OrchestrationName, it.Version = "Unknown", "unknown"
		batchExec := int64(1)
		for _, m := range it.Messages {
			if so, ok := m.(*duroxide.StartOrchestration); ok {
				it.OrchestrationName = so.Orchestration
				if so.Version != nil {
					it.Version = *so.Version
				}
				if so.ExecutionID > 0 {
					batchExec = int64(so.ExecutionID)
				}
				break
			}
			if can, ok := m.(*duroxide.ContinueAsNew); ok {
				it.OrchestrationName = can.Orchestration
				if can.Version != nil {
					it.Version = *can.Version
				}
				break
			}
		}
		if len(hist) == 0 && decodeErr == nil { // no history rows
			exec = batchExec
		}
	}
	it.ExecutionID = uint64(exec)
	if decodeErr != nil {
		it.History = []duroxide.Event{}
		it.HistoryError = "Failed to deserialize history: " + decodeErr.Error()
		return
	}
	if hist == nil {
		hist = []duroxide.Event{}
	}
	it.History = hist
}

// ---------------------------------------------------------------------------
// orchestrator queue: ack, abandon, renew

// execUpsert holds the values and the ON CONFLICT action of an ack's
// execution-row upsert (status, output, completed_at for every terminal
// status, ContinuedAsNew included, and the pinned runtime version), shared
// by the transaction path and the one-statement PostgreSQL path.
type execUpsert struct {
	status                         string
	output                         *string
	completed, major, minor, patch *int64
	conflict                       string
}

// writeTuples writes n copies of tuple, comma-separated (a VALUES list).
func writeTuples(b *strings.Builder, n int, tuple string) {
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(tuple)
	}
}

func newExecUpsert(md duroxide.ExecutionMetadata, now int64) execUpsert {
	eu := execUpsert{status: duroxide.StatusRunning, conflict: ` DO NOTHING`}
	var set []string
	if md.Status != nil {
		eu.status, eu.output = *md.Status, md.Output
		if duroxide.IsTerminalStatus(eu.status) {
			eu.completed = &now
		}
		set = append(set, `status = excluded.status`, `output = excluded.output`, `completed_at = excluded.completed_at`)
	}
	if v := md.PinnedDuroxideVersion; v != nil {
		eu.major, eu.minor, eu.patch = ptr(int64(v.Major())), ptr(int64(v.Minor())), ptr(int64(v.Patch()))
		set = append(set, `duroxide_version_major = excluded.duroxide_version_major`,
			`duroxide_version_minor = excluded.duroxide_version_minor`, `duroxide_version_patch = excluded.duroxide_version_patch`)
	}
	if len(set) > 0 {
		eu.conflict = ` DO UPDATE SET ` + strings.Join(set, ", ")
	}
	return eu
}

// AckOrchestrationItem implements duroxide.Provider.
func (p *gormProvider) AckOrchestrationItem(ctx context.Context, lockToken string, ack duroxide.OrchestrationAck) error {
	const op = "ack_orchestration_item"
	md := ack.Metadata
	if md.Status != nil {
		switch *md.Status {
		case duroxide.StatusRunning, duroxide.StatusCompleted, duroxide.StatusFailed, duroxide.StatusContinuedAsNew:
		default:
			return perr(op, invalidf("unknown status %q", *md.Status))
		}
	}
	if ack.ExecutionID == 0 {
		return perr(op, invalidf("execution id must be > 0"))
	}
	if err := checkUTF8("metadata", md); err != nil {
		return perr(op, err)
	}
	if err := checkUTF8("cancelled activities", ack.CancelledActivities); err != nil {
		return perr(op, err)
	}
	// Encode everything before the transaction.
	var customStatus *duroxide.CustomStatusUpdatedEvent
	hist := make([]models.HistoryEvent, 0, len(ack.HistoryDelta))
	for _, ev := range ack.HistoryDelta {
		if ev.EventID == 0 {
			return perr(op, invalidf("event_id must be set by runtime"))
		}
		if ev.Kind == nil {
			return perr(op, invalidf("event %d has no kind", ev.EventID))
		}
		if err := checkUTF8("event", ev); err != nil {
			return perr(op, err)
		}
		data, err := json.Marshal(ev)
		if err != nil {
			return perr(op, invalidf("encode event %d: %v", ev.EventID, err))
		}
		if cs, ok := ev.Kind.(*duroxide.CustomStatusUpdatedEvent); ok {
			customStatus = cs
		}
		hist = append(hist, models.HistoryEvent{ExecutionID: int64(ack.ExecutionID), EventID: int64(ev.EventID),
			EventType: ev.Kind.EventType(), EventData: string(data)})
	}
	kv, err := planKV(ack.HistoryDelta)
	if err != nil {
		return perr(op, err)
	}
	err = p.withRetry(ctx, op, time.Time{}, func() error {
		now := p.s.nowMS()
		wrows, err := workerRows(ack.WorkerItems, now)
		if err != nil {
			return err
		}
		orows, err := orchRows(ack.OrchestratorItems, now)
		if err != nil {
			return err
		}
		if p.fast != nil {
			if ok, err := p.fast.ackOrchestration(p, p.s.db.WithContext(ctx), now, lockToken, ack, hist, customStatus, kv, wrows, orows); ok {
				return err
			}
		}
		return p.tx(ctx, func(tx *gorm.DB) error {
			return p.ackOrch(tx, now, lockToken, ack, hist, customStatus, kv, wrows, orows)
		})
	})
	var dup *dupEventError
	if errors.As(err, &dup) {
		return p.duplicateEventError(ctx, lockToken, dup, hist)
	}
	if err != nil {
		return perrLock(op, lockToken, err)
	}
	if len(ack.OrchestratorItems) > 0 {
		p.orch.notify()
	}
	if len(ack.WorkerItems) > 0 {
		p.work.notify()
	}
	return nil
}

func (p *gormProvider) ackOrch(tx *gorm.DB, now int64, lockToken string, ack duroxide.OrchestrationAck, hist []models.HistoryEvent,
	customStatus *duroxide.CustomStatusUpdatedEvent, kv *kvPlan, wrows []models.WorkerQueueItem, orows []models.OrchestratorQueueItem) error {
	const op = "ack_orchestration_item"
	md := ack.Metadata
	exec := int64(ack.ExecutionID)
	// 1. validate and consume the lock (strict single ack)
	var ids []string
	if err := tx.Raw(`DELETE FROM `+p.q(models.TableInstanceLocks)+` WHERE lock_token = ? AND locked_until > ? RETURNING instance_id`,
		lockToken, now).Scan(&ids).Error; err != nil {
		return fmt.Errorf("claim lock: %w", err)
	}
	if len(ids) == 0 {
		return pfail(op, ErrInvalidLockToken, "Invalid lock token")
	}
	instance := ids[0]
	// 2. instance row only with name and version (upsert); current_execution_id only grows
	var instanceExists bool
	if md.OrchestrationName != nil && md.OrchestrationVersion != nil {
		if err := tx.Exec(`INSERT INTO `+p.q(models.TableInstances)+` AS i`+
			` (instance_id, orchestration_name, orchestration_version, current_execution_id, created_at, updated_at, parent_instance_id, custom_status_version)`+
			` VALUES (?, ?, ?, ?, ?, ?, ?, 0) ON CONFLICT (instance_id) DO UPDATE SET orchestration_name = excluded.orchestration_name,`+
			` orchestration_version = excluded.orchestration_version, parent_instance_id = COALESCE(i.parent_instance_id, excluded.parent_instance_id),`+
			` updated_at = excluded.updated_at, current_execution_id = CASE WHEN i.current_execution_id < excluded.current_execution_id`+
			` THEN excluded.current_execution_id ELSE i.current_execution_id END`,
			instance, *md.OrchestrationName, *md.OrchestrationVersion, exec, now, now, md.ParentInstanceID).Error; err != nil {
			return fmt.Errorf("upsert instance %s: %w", instance, err)
		}
		instanceExists = true
	} else {
		res := tx.Exec(`UPDATE `+p.q(models.TableInstances)+` SET current_execution_id = CASE WHEN current_execution_id < ? THEN ? ELSE current_execution_id END,`+
			` updated_at = ? WHERE instance_id = ?`, exec, exec, now, instance)
		if res.Error != nil {
			return fmt.Errorf("bump execution of %s: %w", instance, res.Error)
		}
		instanceExists = res.RowsAffected > 0
	}
	// 3. execution row (unless the batch is a true orphan: no instance row,
	// no history stored or in this ack, no Start/ContinueAsNew in the batch)
	// with status, output, completed_at (every terminal status,
	// ContinuedAsNew included) and the pinned runtime version, in one upsert
	needExec := instanceExists || len(hist) > 0
	if !needExec {
		var hits []int
		if err := tx.Raw(p.orchStartedSQL("?"), lockToken, instance).Scan(&hits).Error; err != nil {
			return fmt.Errorf("check batch of %s: %w", instance, err)
		}
		needExec = len(hits) > 0
	}
	if needExec {
		eu := newExecUpsert(md, now)
		if err := tx.Exec(`INSERT INTO `+p.q(models.TableExecutions)+` (instance_id, execution_id, status, output, started_at, completed_at,`+
			` duroxide_version_major, duroxide_version_minor, duroxide_version_patch) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`+
			` ON CONFLICT (instance_id, execution_id)`+eu.conflict,
			instance, exec, eu.status, eu.output, now, eu.completed, eu.major, eu.minor, eu.patch).Error; err != nil {
			return fmt.Errorf("upsert execution %s/%d: %w", instance, exec, err)
		}
	}
	// 4. history
	if len(hist) > 0 {
		for i := range hist {
			hist[i].InstanceID = instance
			hist[i].CreatedAt = now
		}
		if err := tx.CreateInBatches(hist, 500).Error; err != nil {
			if errors.Is(translateError(err), ErrConflict) {
				return &dupEventError{instance: instance, exec: exec, cause: translateError(err)}
			}
			return fmt.Errorf("append history %s/%d: %w", instance, exec, err)
		}
	}
	// 5. custom status: one version bump per ack
	if customStatus != nil {
		if err := tx.Exec(`UPDATE `+p.q(models.TableInstances)+` SET custom_status = ?, custom_status_version = custom_status_version + 1 WHERE instance_id = ?`,
			customStatus.Status, instance).Error; err != nil {
			return fmt.Errorf("custom status of %s: %w", instance, err)
		}
	}
	// 5b. key-value events into the delta, merged into the store when the
	// execution ends
	if terminal := md.Status != nil && duroxide.IsTerminalStatus(*md.Status); terminal || !kv.empty() {
		if err := p.applyKV(tx, instance, exec, now, kv, terminal); err != nil {
			return err
		}
	}
	// 6. worker items, then 7. cancelled activities (schedule+cancel in one turn is a no-op)
	if len(wrows) > 0 {
		if err := tx.CreateInBatches(wrows, 500).Error; err != nil {
			return fmt.Errorf("enqueue worker items: %w", err)
		}
	}
	if n := len(ack.CancelledActivities); n > 0 {
		conds := make([]string, 0, n)
		args := make([]any, 0, 3*n)
		for _, c := range ack.CancelledActivities {
			conds = append(conds, `(instance_id = ? AND execution_id = ? AND activity_id = ?)`)
			args = append(args, c.Instance, int64(c.ExecutionID), int64(c.ActivityID))
		}
		if err := tx.Exec(`DELETE FROM `+p.q(models.TableWorkerQueue)+` WHERE `+strings.Join(conds, " OR "), args...).Error; err != nil {
			return fmt.Errorf("cancel activities: %w", err)
		}
	}
	// 8. orchestrator items
	if len(orows) > 0 {
		if err := tx.CreateInBatches(orows, 500).Error; err != nil {
			return fmt.Errorf("enqueue orchestrator items: %w", err)
		}
	}
	// 9. delete exactly the fetched batch
	if err := tx.Exec(`DELETE FROM `+p.q(models.TableOrchestratorQueue)+` WHERE lock_token = ?`, lockToken).Error; err != nil {
		return fmt.Errorf("delete batch: %w", err)
	}
	return nil
}

// orchStartedSQL returns the query (args: the lock token, then instance if
// it is "?") that has a
// row when the locked batch holds a StartOrchestration or ContinueAsNew or
// the instance has stored history: such an ack writes its execution row
// even when the metadata names no orchestration (as duroxide does). Work
// items are stored as externally tagged JSON written by this package, so
// the variant is the text's first key.
func (p *gormProvider) orchStartedSQL(instance string) string {
	return `SELECT 1 FROM ` + p.q(models.TableOrchestratorQueue) + ` WHERE lock_token = ?` +
		` AND (work_item LIKE '{"StartOrchestration":%' OR work_item LIKE '{"ContinueAsNew":%')` +
		` UNION ALL SELECT 1 WHERE EXISTS (SELECT 1 FROM ` + p.q(models.TableHistory) + ` WHERE instance_id = ` + instance + `)`
}

// dupEventError is an ack's unique violation on history, raised inside the
// ack's transaction or statement; AckOrchestrationItem turns it into the
// ErrDuplicateEvent error after the rollback. instance is empty when the
// statement did not know it (PostgreSQL one-statement ack).
type dupEventError struct {
	instance string
	exec     int64
	cause    error
}

func (e *dupEventError) Error() string { return "duplicate history event" }

// duplicateEventError names the instance, execution and (when it can find
// them) the already stored event ids of a rolled-back ack whose history
// delta collided. The lookups are best effort: their failure only makes the
// message less specific.
func (p *gormProvider) duplicateEventError(ctx context.Context, lockToken string, dup *dupEventError, hist []models.HistoryEvent) error {
	db := p.s.db.WithContext(ctx)
	instance := dup.instance
	if instance == "" { // the ack rolled back, so the lock row is still there
		var ids []string
		if db.Raw(`SELECT instance_id FROM `+p.q(models.TableInstanceLocks)+` WHERE lock_token = ?`, lockToken).Scan(&ids).Error == nil && len(ids) > 0 {
			instance = ids[0]
		}
	}
	where := fmt.Sprintf("execution %d", dup.exec)
	if instance != "" {
		where = fmt.Sprintf("%s/%d", instance, dup.exec)
		ids := make([]any, 0, len(hist))
		for _, h := range hist {
			ids = append(ids, h.EventID)
		}
		var found []int64
		if len(ids) > 0 && len(ids) < 10000 && db.Raw(`SELECT event_id FROM `+p.q(models.TableHistory)+` WHERE instance_id = ? AND execution_id = ?`+
			` AND event_id IN (`+placeholders(len(ids))+`) ORDER BY event_id LIMIT 5`, append([]any{instance, dup.exec}, ids...)...).Scan(&found).Error == nil && len(found) > 0 {
			where = fmt.Sprintf("%s (event id %v already stored)", where, found)
		}
	}
	return &duroxide.ProviderError{Op: "ack_orchestration_item", Message: "duplicate history event in " + where,
		Err: fmt.Errorf("%w: %w", ErrDuplicateEvent, dup.cause)}
}

// maxAckParams bounds the parameters of the one-statement PostgreSQL ack
// (the protocol allows 65,535); a larger ack runs as a transaction.
const maxAckParams = 30000

// AbandonOrchestrationItem implements duroxide.Provider.
func (p *gormProvider) AbandonOrchestrationItem(ctx context.Context, lockToken string, delay time.Duration, ignoreAttempt bool) error {
	const op = "abandon_orchestration_item"
	if delay < 0 {
		return perr(op, invalidf("negative delay"))
	}
	err := p.tx(ctx, func(tx *gorm.DB) error {
		now := p.s.nowMS()
		var ids []string
		if err := tx.Raw(`DELETE FROM `+p.q(models.TableInstanceLocks)+` WHERE lock_token = ? RETURNING instance_id`, lockToken).Scan(&ids).Error; err != nil {
			return fmt.Errorf("release lock: %w", err)
		}
		if len(ids) == 0 {
			return pfail(op, ErrInvalidLockToken, "Invalid lock token")
		}
		set := `lock_token = NULL, locked_until = NULL`
		args := []any{}
		if delay > 0 {
			set += `, visible_at = ?`
			args = append(args, now+durMS(delay))
		}
		if ignoreAttempt {
			set += `, attempt_count = CASE WHEN attempt_count > 0 THEN attempt_count - 1 ELSE 0 END`
		}
		args = append(args, lockToken)
		return tx.Exec(`UPDATE `+p.q(models.TableOrchestratorQueue)+` SET `+set+` WHERE lock_token = ?`, args...).Error
	})
	if err != nil {
		return perrLock(op, lockToken, err)
	}
	p.orch.notify()
	return nil
}

// RenewOrchestrationItemLock implements duroxide.Provider.
func (p *gormProvider) RenewOrchestrationItemLock(ctx context.Context, lockToken string, extendFor time.Duration) error {
	const op = "renew_orchestration_item_lock"
	if extendFor <= 0 {
		return perr(op, invalidf("extension must be positive"))
	}
	err := p.tx(ctx, func(tx *gorm.DB) error {
		now := p.s.nowMS()
		until := now + durMS(extendFor)
		res := tx.Exec(`UPDATE `+p.q(models.TableInstanceLocks)+` SET locked_until = ? WHERE lock_token = ? AND locked_until > ?`, until, lockToken, now)
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			return pfail(op, ErrInvalidLockToken, "Lock token invalid, expired, or already released")
		}
		return tx.Exec(`UPDATE `+p.q(models.TableOrchestratorQueue)+` SET locked_until = ? WHERE lock_token = ?`, until, lockToken).Error
	})
	return perrLock(op, lockToken, err)
}

// ---------------------------------------------------------------------------
// history

// Read implements duroxide.Provider.
func (p *gormProvider) Read(ctx context.Context, instance string) ([]duroxide.Event, error) {
	const op = "read"
	db := p.s.db.WithContext(ctx)
	var exec *int64
	if err := db.Raw(`SELECT MAX(execution_id) FROM `+p.q(models.TableExecutions)+` WHERE instance_id = ?`, instance).Scan(&exec).Error; err != nil {
		return nil, perrAt(op, instance, err)
	}
	if exec == nil { // acked without metadata: no execution rows, only history
		if err := db.Raw(`SELECT MAX(execution_id) FROM `+p.q(models.TableHistory)+` WHERE instance_id = ?`, instance).Scan(&exec).Error; err != nil {
			return nil, perrAt(op, instance, err)
		}
	}
	if exec == nil {
		return []duroxide.Event{}, nil
	}
	return p.readExec(ctx, op, instance, *exec)
}

// ReadWithExecution implements duroxide.Provider.
func (p *gormProvider) ReadWithExecution(ctx context.Context, instance string, executionID uint64) ([]duroxide.Event, error) {
	return p.readExec(ctx, "read_with_execution", instance, int64(executionID))
}

func (p *gormProvider) readExec(ctx context.Context, op, instance string, exec int64) ([]duroxide.Event, error) {
	evs, err := p.loadHistory(p.s.db.WithContext(ctx), instance, exec)
	if err != nil {
		return nil, perrAt(op, instance, err)
	}
	return evs, nil
}

// AppendWithExecution implements duroxide.Provider.
func (p *gormProvider) AppendWithExecution(ctx context.Context, instance string, executionID uint64, events []duroxide.Event) error {
	const op = "append_with_execution"
	if instance == "" || !utf8.ValidString(instance) {
		return perr(op, invalidf("instance id must be non-empty valid UTF-8"))
	}
	now := p.s.nowMS()
	rows := make([]models.HistoryEvent, 0, len(events))
	for _, ev := range events {
		if ev.EventID == 0 || ev.Kind == nil {
			return perr(op, invalidf("event id must be > 0 and kind set"))
		}
		if err := checkUTF8("event", ev); err != nil {
			return perr(op, err)
		}
		data, err := json.Marshal(ev)
		if err != nil {
			return perr(op, invalidf("encode event %d: %v", ev.EventID, err))
		}
		rows = append(rows, models.HistoryEvent{InstanceID: instance, ExecutionID: int64(executionID), EventID: int64(ev.EventID),
			EventType: ev.Kind.EventType(), EventData: string(data), CreatedAt: now})
	}
	if len(rows) == 0 {
		return nil
	}
	// One batched INSERT ... ON CONFLICT DO NOTHING (duplicates ignored),
	// not a statement per event.
	err := p.s.db.WithContext(ctx).Clauses(clause.OnConflict{DoNothing: true}).CreateInBatches(rows, 500).Error
	return perrAt(op, instance, err)
}
