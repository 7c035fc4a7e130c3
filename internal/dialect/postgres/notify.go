package postgres

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentstore/agentstore/internal/dialect"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Cross-process wake-up on PostgreSQL. A Store publishes "work arrived"
// with NOTIFY on a channel derived from its schema and prefix, and a
// long-polling fetch LISTENs on it, so a fetcher in another process (or on
// another Store) returns within milliseconds of an enqueue instead of at
// its next fallback re-check. Publishing is off the hot path: notify only
// flags the kind and nudges one background goroutine, which sends a single
// NOTIFY (asynchronous commit, no fsync wait) for everything flagged since
// its last send, so a burst of enqueues costs one NOTIFY. Publish errors
// are ignored: the fallback re-check still finds the work.
//
// A NOTIFY nobody else listens to is skipped: before it sends, the
// publisher asks pg_stat_activity whether any session other than this
// Store's own listener has LISTENed on the channel (a listener connection
// runs nothing after its LISTEN, so that is its query text, whatever
// agentstore version or process it belongs to), and keeps the answer for
// presenceTTL ("another session listens": presenceKeep). While the answer is "alone" kinds are flagged, not sent; the
// answer is asked again when it is presenceTTL old and something was
// skipped meanwhile, and if a listener appeared in that time the skipped
// kinds are sent then. So a Store that starts listening is woken at most
// presenceTTL late, once; one that was listening at the check is woken as
// before. Where the activity view cannot show that (another role's
// sessions hidden from this one, track_activities off, no such view) the
// publisher always sends. The listener's
// losses, reconnects and its absence (behind PgBouncer without
// WithDirectDSN, a pool under 3 connections) are logged (WithSlog).

// pgNotifier is a Store's NOTIFY publisher and LISTEN subscriber.
type pgNotifier struct {
	env     *dialect.Env
	channel string
	// self tags this Store's notifications ("o:<self>"), so its listener
	// ignores them: its own fetchers were already woken in process.
	self string

	mu      sync.Mutex
	pending map[string]bool
	kick    chan struct{}

	// started flags and closed are guarded by mu, so no goroutine is
	// added to wg once wait has begun.
	pubStarted    bool
	listenStarted bool
	closed        bool
	wg            sync.WaitGroup
	// onNotify is called with the payload of every notification received.
	onNotify func(payload string)
	// up: the subscriber is LISTENing; lostRuns counts the failed
	// attempts since it was last up.
	up       atomic.Bool
	lostRuns atomic.Int64
	// listenerPID is the server process id of this Store's LISTEN
	// session (0 while it has none).
	listenerPID atomic.Int64
	// sent counts the NOTIFY statements sent (tests).
	sent atomic.Int64
}

// presenceTTL is how long the publisher trusts its last answer to "does
// any other session listen on the channel?" (see the package comment).
const presenceTTL = 50 * time.Millisecond

// presenceKeep is how long the publisher keeps the answer "another
// session listens": acting on it when it is out of date only sends a
// NOTIFY nobody needed, so it is asked again less often.
const presenceKeep = time.Second

// presenceSQL counts, in the activity view, the client sessions other than
// $2 whose query is a LISTEN on channel $1 (their last statement), the
// client sessions whose query this role may not see, and whether this
// session's own query is visible (else track_activities is off and
// nothing can be concluded).
const presenceSQL = `SELECT COUNT(*) FILTER (WHERE pid <> $2 AND query ILIKE 'listen%' AND strpos(query, $1) > 0),` +
	` COUNT(*) FILTER (WHERE query = '<insufficient privilege>'),` +
	` COUNT(*) FILTER (WHERE pid = pg_backend_pid() AND query ILIKE '%pg_stat_activity%')` +
	` FROM pg_stat_activity WHERE backend_type = 'client backend'`

// alone reports whether no session other than this Store's own listener
// listens on the channel; false whenever that cannot be established.
func (n *pgNotifier) alone() bool {
	ctx, cancel := context.WithTimeout(n.env.BG, 5*time.Second)
	defer cancel()
	var others, hidden, self int64
	if err := n.env.SQLDB.QueryRowContext(ctx, presenceSQL, n.channel, n.listenerPID.Load()).Scan(&others, &hidden, &self); err != nil {
		return false
	}
	return others == 0 && hidden == 0 && self > 0
}

// notifyChannel names the channel of a schema and prefix (an identifier
// well under PostgreSQL's 63 bytes).
func notifyChannel(schema, prefix string) string {
	h := fnv.New64a()
	_, _ = h.Write([]byte(schema + "." + prefix))
	return fmt.Sprintf("agentstore_wake_%016x", h.Sum64())
}

func newPGNotifier(env *dialect.Env, onNotify func(string)) *pgNotifier {
	return &pgNotifier{env: env, channel: notifyChannel(env.Config.Schema, env.Config.Prefix), self: uuid.NewString()[:8],
		pending: map[string]bool{}, kick: make(chan struct{}, 1), onNotify: onNotify}
}

// publish flags kind for the next NOTIFY and wakes the publisher.
func (n *pgNotifier) Publish(kind string) {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return
	}
	if !n.pubStarted {
		n.pubStarted = true
		n.wg.Add(1)
		go n.publisher()
	}
	n.pending[kind] = true
	n.mu.Unlock()
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

func (n *pgNotifier) publisher() {
	defer n.wg.Done()
	// isAlone is the last presence answer, asked at checked; skipped holds
	// the kinds not sent since, because of it.
	var checked time.Time
	isAlone := false
	skipped := map[string]bool{}
	for {
		var recheck *time.Timer
		var due <-chan time.Time
		if len(skipped) > 0 {
			recheck = time.NewTimer(time.Until(checked.Add(presenceTTL)))
			due = recheck.C
		}
		select {
		case <-n.env.BG.Done():
			if recheck != nil {
				recheck.Stop()
			}
			return
		case <-n.kick:
		case <-due:
		}
		if recheck != nil {
			recheck.Stop()
		}
		n.mu.Lock()
		kinds := make([]string, 0, len(n.pending))
		for k := range n.pending {
			kinds = append(kinds, k)
		}
		clear(n.pending)
		n.mu.Unlock()
		if len(kinds) == 0 && len(skipped) == 0 {
			continue
		}
		ttl := presenceTTL
		if !isAlone {
			ttl = presenceKeep // sending when nobody listens only costs a NOTIFY
		}
		if time.Since(checked) >= ttl {
			// asked after the enqueues flagged so far committed: a
			// session that starts listening after this answer reads
			// them with its first fetch (a listener wakes its Store's
			// fetchers once it is up)
			isAlone, checked = n.alone(), time.Now()
			if !isAlone {
				for k := range skipped {
					if !slices.Contains(kinds, k) {
						kinds = append(kinds, k)
					}
				}
			}
			clear(skipped)
		}
		if isAlone {
			for _, k := range kinds {
				skipped[k] = true
			}
			continue
		}
		for _, k := range kinds {
			n.sent.Add(1)
			ctx, cancel := context.WithTimeout(n.env.BG, 5*time.Second)
			_, _ = n.env.SQLDB.ExecContext(ctx,
				`SELECT set_config('synchronous_commit', 'off', true), pg_notify($1, $2)`, n.channel, k+":"+n.self)
			cancel()
		}
	}
}

// waiting implements dialect.Waker: LISTEN needs no per-fetch bookkeeping.
func (n *pgNotifier) Waiting(int32) {}

// start implements dialect.Waker: it starts the LISTEN subscriber.
func (n *pgNotifier) Start() { n.listen() }

// listen starts the subscriber once. It holds one connection for the
// Store's lifetime and reconnects after failures: a connection of its own
// to WithDirectDSN's server when that option is given, else one pooled
// connection. Without a direct DSN it does not listen behind a pooler
// (WithPgBouncer: LISTEN needs a session) nor with a pool of fewer than
// three connections (it could starve the queries); such a Store relies on
// the fallback re-check and logs that once at Warn level.
func (n *pgNotifier) listen() {
	direct := n.env.Config.DirectDSN != ""
	reason := ""
	if !direct && n.env.Config.PgBouncer {
		reason = "behind PgBouncer (WithPgBouncer) LISTEN needs a session; pass WithDirectDSN"
	} else if m := n.env.SQLDB.Stats().MaxOpenConnections; !direct && m > 0 && m < 3 {
		reason = "the pool has fewer than 3 connections and the listener would hold one; pass WithDirectDSN or a larger pool"
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed || n.listenStarted {
		return
	}
	n.listenStarted = true
	if reason != "" {
		n.env.Config.Slog.Warn("agentstore: cross-Store wake-up (LISTEN/NOTIFY) off; waiting fetches poll the database",
			"component", "agentstore", "event", "wakeup_fallback", "reason", reason,
			"poll_interval", n.env.Config.PollInterval, "channel", n.channel)
		return
	}
	n.wg.Add(1)
	go n.listener()
}

// healthy reports whether the LISTEN subscriber is up (used by longPoll
// to re-check the database less often).
// Healthy reports whether the listener is connected (dialect.HealthReporter).
func (n *pgNotifier) Healthy() bool { return n.up.Load() }

func (n *pgNotifier) listener() {
	defer n.wg.Done()
	failures := 0
	for n.env.BG.Err() == nil {
		err := n.listenOnce()
		n.up.Store(false)
		if n.env.BG.Err() != nil {
			return
		}
		// The fallback re-check covers the gap; retry after a pause. Log
		// the first failure of a run of failures and every 100th.
		if failures%100 == 0 {
			n.env.Config.Slog.Warn("agentstore: LISTEN connection lost; reconnecting, waiting fetches poll meanwhile",
				"component", "agentstore", "event", "listener_lost", "error", dialect.Scrub(err, n.env.Config.DirectDSN),
				"failures", failures+1, "poll_interval", n.env.Config.PollInterval, "channel", n.channel)
		}
		failures++
		n.lostRuns.Store(int64(failures))
		select {
		case <-n.env.BG.Done():
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
}

var errNotPgx = errors.New("agentstore: listener connection is not a pgx connection")

// listenOnce listens on one connection until it fails or the Store closes.
func (n *pgNotifier) listenOnce() error {
	if n.env.Config.DirectDSN == "" {
		return n.listenOnceConn()
	}
	pc, err := parseDirectDSN(n.env.Config.DirectDSN)
	if err != nil {
		return err
	}
	if n.env.Config.Pool.ConnectTimeout > 0 {
		pc.ConnectTimeout = n.env.Config.Pool.ConnectTimeout
	}
	conn, err := pgx.ConnectConfig(n.env.BG, pc)
	if err != nil {
		return err
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = conn.Close(ctx)
		cancel()
	}()
	return n.serve(conn)
}

func (n *pgNotifier) listenOnceConn() error {
	conn, err := n.env.SQLDB.Conn(n.env.BG)
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.Raw(func(dc any) error {
		// *stdlib.Conn, or the pgTimeoutConn embedding it (WithStatementTimeout)
		sc, ok := dc.(interface{ Conn() *pgx.Conn })
		if !ok {
			return errNotPgx
		}
		return n.serve(sc.Conn())
	})
}

// serve LISTENs on pc and delivers notifications until pc fails or the
// Store closes (then it UNLISTENs, leaving a pooled connection clean).
func (n *pgNotifier) serve(pc *pgx.Conn) error {
	if _, err := pc.Exec(n.env.BG, `LISTEN "`+n.channel+`"`); err != nil {
		return err
	}
	n.listenerPID.Store(int64(pc.PgConn().PID()))
	defer n.listenerPID.Store(0)
	n.up.Store(true)
	if runs := n.lostRuns.Swap(0); runs > 0 {
		n.env.Config.Slog.Info("agentstore: LISTEN connection up again", "component", "agentstore",
			"event", "listener_reconnected", "failures", runs, "channel", n.channel)
	}
	// Work may have arrived while we were not listening.
	n.onNotify(dialect.NotifyOrch)
	n.onNotify(dialect.NotifyWork)
	n.onNotify(dialect.NotifyFeed)
	n.onNotify(dialect.NotifySessionQueue)
	for {
		note, err := pc.WaitForNotification(n.env.BG)
		if err != nil {
			if n.env.BG.Err() != nil {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				_, uerr := pc.Exec(ctx, `UNLISTEN *`)
				cancel()
				if uerr != nil {
					return driver.ErrBadConn
				}
				return nil
			}
			return fmt.Errorf("%w: %w", driver.ErrBadConn, err) // discard the connection; reconnect
		}
		if kind, from, _ := strings.Cut(note.Payload, ":"); from != n.self {
			n.onNotify(kind)
		}
	}
}

// wait blocks until the publisher and listener goroutines have stopped.
// The Store's background context must already be cancelled.
func (n *pgNotifier) Wait() {
	n.mu.Lock()
	n.closed = true
	n.mu.Unlock()
	n.wg.Wait()
}

// PublishSQL implements dialect.TxWakeup: a NOTIFY on the channel of schema
// and prefix, sent when the surrounding transaction commits (discarded when
// it rolls back). Its sender tag "tx" is no Store's own, so the sending
// Store's listener delivers it to its own waiters too.
func (pgDialect) PublishSQL(schema, prefix, kind string) string {
	return `SELECT pg_notify('` + notifyChannel(schema, prefix) + `', '` + strings.ReplaceAll(kind, "'", "''") + `:tx')`
}
