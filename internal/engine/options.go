package engine

import (
	"log/slog"
	"strings"
	"time"

	"gorm.io/gorm/logger"

	"github.com/agentstore/agentstore/internal/dialect"
)

// DefaultTablePrefix is the table prefix used when WithTablePrefix is not given.
const DefaultTablePrefix = "agentstore_"

// Limits on identifiers accepted by WithTablePrefix and WithSchema. The
// prefix is short so that prefixed table and index names stay within
// PostgreSQL's 63-byte identifier limit.
const (
	MaxTablePrefixLen = 24
	MaxSchemaLen      = 63
)

// PoolConfig sets the connection pool (the contract's dialect.PoolConfig).
type PoolConfig = dialect.PoolConfig

// DefaultPool is the pool of a Store opened without WithPool: at most 10
// connections, 1 kept idle, 30 s connect timeout, 600 s idle timeout,
// 1800 s lifetime.
func DefaultPool() PoolConfig { return dialect.DefaultPool() }

// HighThroughputPool is a preset for busy services: at most 50
// connections, 5 kept idle, 10 s connect timeout, 300 s idle timeout, 900 s
// lifetime.
func HighThroughputPool() PoolConfig { return dialect.HighThroughputPool() }

// Config is a Store's configuration: the dialect contract's part and the
// engine's own (telemetry).
type Config struct {
	dialect.Config
	telemetry telemetryConfig // WithTracerProvider, WithMeterProvider
	// maxContent is WithMaxContentBytes (default DefaultMaxContentBytes).
	maxContent int
	// codec is WithContentCodec (nil: content is stored as it is).
	codec ContentCodec
	// pollSet: WithPollInterval was given (a dialect's
	// dialect.PollFallback default does not replace it).
	pollSet bool
}

// Option configures Open and New. Options validate their input and make
// Open fail with ErrInvalidConfig before any SQL runs.
type Option interface {
	apply(*Config) error
}

type optionFunc func(*Config) error

func (f optionFunc) apply(c *Config) error { return f(c) }

// WithTablePrefix sets the prefix of every table name (default
// DefaultTablePrefix). It must match ^[A-Za-z_][A-Za-z0-9_]*$ (or be empty)
// and be at most MaxTablePrefixLen bytes.
func WithTablePrefix(prefix string) Option {
	return optionFunc(func(c *Config) error {
		if prefix != "" && (!identRE.MatchString(prefix) || len(prefix) > MaxTablePrefixLen) {
			return configf("table prefix %q must match ^[A-Za-z_][A-Za-z0-9_]*$ and be at most %d bytes", clip(prefix), MaxTablePrefixLen)
		}
		c.Prefix = prefix
		return nil
	})
}

// WithSchema places every table in the given PostgreSQL schema (created by
// Migrate if missing). It must match ^[A-Za-z_][A-Za-z0-9_]*$ and be at
// most MaxSchemaLen bytes. SQLite has no schemas: Open rejects the option
// there.
func WithSchema(schema string) Option {
	return optionFunc(func(c *Config) error {
		if !identRE.MatchString(schema) || len(schema) > MaxSchemaLen {
			return configf("schema %q must match ^[A-Za-z_][A-Za-z0-9_]*$ and be at most %d bytes", clip(schema), MaxSchemaLen)
		}
		c.Schema = schema
		return nil
	})
}

// WithPool sets the connection pool (see PoolConfig, DefaultPool and
// HighThroughputPool). A negative value, or MinIdleConns above
// MaxOpenConns (after defaults), is ErrInvalidConfig.
func WithPool(p PoolConfig) Option {
	return optionFunc(func(c *Config) error {
		if p.MaxOpenConns < 0 || p.MinIdleConns < 0 || p.ConnectTimeout < 0 || p.IdleTimeout < 0 || p.MaxLifetime < 0 {
			return configf("pool settings must not be negative")
		}
		d := DefaultPool()
		if p.MaxOpenConns == 0 {
			p.MaxOpenConns = d.MaxOpenConns
		}
		if p.MinIdleConns > p.MaxOpenConns {
			return configf("pool: MinIdleConns %d exceeds MaxOpenConns %d", p.MinIdleConns, p.MaxOpenConns)
		}
		if p.ConnectTimeout == 0 {
			p.ConnectTimeout = d.ConnectTimeout
		}
		if p.IdleTimeout == 0 {
			p.IdleTimeout = d.IdleTimeout
		}
		if p.MaxLifetime == 0 {
			p.MaxLifetime = d.MaxLifetime
		}
		c.Pool = p
		return nil
	})
}

// WithLogger sets the GORM logger (default: silent).
func WithLogger(l logger.Interface) Option {
	return optionFunc(func(c *Config) error {
		if l == nil {
			return configf("logger must not be nil")
		}
		c.Logger = l
		return nil
	})
}

// WithClock sets the clock the store reads "now" from (default time.Now).
// Tests use it to move time instead of sleeping.
func WithClock(now func() time.Time) Option {
	return optionFunc(func(c *Config) error {
		if now == nil {
			return configf("clock must not be nil")
		}
		c.Clock = now
		c.CustomClock = true
		return nil
	})
}

// WithSQLiteSynchronous sets SQLite's synchronous pragma: "NORMAL" (the
// default, safe with WAL: a power loss may lose the last commits but never
// corrupts) or "FULL" (every commit is durable). Ignored on PostgreSQL.
func WithSQLiteSynchronous(mode string) Option {
	return optionFunc(func(c *Config) error {
		m := strings.ToUpper(mode)
		if m != "NORMAL" && m != "FULL" && m != "OFF" && m != "EXTRA" {
			return configf("sqlite synchronous mode %q must be OFF, NORMAL, FULL or EXTRA", clip(mode))
		}
		c.SQLiteSync = m
		return nil
	})
}

// WithPollInterval sets how often a long-polling fetch re-checks the
// database when no wake-up arrives (default 20 ms; 1 s on MariaDB, which
// has no cross-Store wake-up: see below). Enqueues through the
// same Store wake waiting fetchers at once, and so do commits by other
// Stores and processes: LISTEN/NOTIFY on PostgreSQL, a PRAGMA data_version
// watcher on SQLite (one cheap check per 2 ms per Store while a fetch
// waits). While that cross-Store wake-up is up (and the Store runs on the
// real clock, not WithClock), a waiting fetch re-checks only at the next
// delay end or lock expiry of its queue (one query after each wake-up
// finds it) or after max(interval, 1 s): about one claim query per idle
// second per waiting fetch. Otherwise (wake-up off, not yet up or lost,
// behind PgBouncer without WithDirectDSN, a pool of fewer than 3
// connections) an idle waiting fetcher runs one claim query per interval,
// and the interval bounds how late a delayed item is seen. A change-feed
// Watch (ChangeFeed) follows the same rules, re-checking every
// max(interval, 250 ms) while the wake-up is up and every interval
// otherwise. A dialect with no cross-Store wake-up at all (MariaDB: no
// LISTEN/NOTIFY) defaults to 1 s, the idle-cost limit of about one query
// per second per waiting call: enqueues through the same Store still wake
// waiting calls at once, and another Store's or process's commit is seen
// within the interval; a shorter interval sees it sooner at one query per
// interval per waiting call.
func WithPollInterval(d time.Duration) Option {
	return optionFunc(func(c *Config) error {
		if d < time.Millisecond || d > time.Minute {
			return configf("poll interval %v must be between 1ms and 1m", d)
		}
		c.PollInterval, c.pollSet = d, true
		return nil
	})
}

// WithReadOnly opens the database for reading only (Open; New ignores
// it): a SQLite file is opened with mode=ro (a missing file is an error,
// never created) and PostgreSQL sessions default to read-only transactions
// (default_transaction_read_only). Every write then fails. `agentstore
// verify` opens its database this way.
func WithReadOnly() Option {
	return optionFunc(func(c *Config) error {
		c.ReadOnly = true
		return nil
	})
}

// WithPgBouncer makes a PostgreSQL Store work through PgBouncer (or
// another pooler) in transaction or session pooling:
//
//   - Open sends every statement with the extended protocol and an unnamed
//     statement in one round trip (pgx's QueryExecModeExec) and keeps no
//     statement or description cache, so no prepared statement outlives
//     its transaction (PgBouncer 1.18 cannot carry named ones in
//     transaction pooling). A Store made by New keeps the pgx settings of
//     the handle it is given: configure that handle the same way.
//   - No other session state is relied on across transactions (settings
//     are SET LOCAL / set_config(..., true), locks transaction-scoped).
//   - LISTEN, which needs a session, runs on a connection of its own to
//     WithDirectDSN's server when that option is given (not a pooled
//     connection, so it never takes a slot of a small pool). Without it
//     waiting fetches are woken only by enqueues through the same Store and
//     otherwise re-check the database every WithPollInterval (default 20
//     ms); the Store logs this fallback at Warn level (see WithSlog) when
//     its first fetch waits.
//   - Migrate's steps that cannot run in a transaction (CREATE INDEX
//     CONCURRENTLY, serialised by a session-level advisory lock) run on a
//     connection to WithDirectDSN's server; without that option Migrate
//     refuses such a step with ErrInvalidConfig. Run Migrate on a direct
//     connection (or pass WithDirectDSN).
//
// Open refuses WithReadOnly together with WithPgBouncer (ErrInvalidConfig):
// PgBouncer refuses the startup parameter WithReadOnly sets. SQLite ignores
// the option.
func WithPgBouncer() Option {
	return optionFunc(func(c *Config) error {
		c.PgBouncer = true
		return nil
	})
}

// WithDirectDSN names a direct (not pooled) connection to the same
// PostgreSQL database as the Store's DSN, postgres://... or key=value,
// for what needs a session behind a pooler: the LISTEN wake-up subscriber
// runs on a connection of its own to it whenever the option is given (one
// connection for the Store's lifetime, outside the pool, so even a pool of
// fewer than 3 connections gets the wake-up), and with WithPgBouncer
// Migrate's non-transactional steps run on a connection to it opened for
// the step. Open checks only that it parses (ErrInvalidConfig otherwise,
// the DSN redacted); it connects when first needed, and a LISTEN
// connection that fails is retried every 500 ms and logged (WithSlog)
// while the fallback re-check covers the gap. SQLite ignores the option.
func WithDirectDSN(dsn string) Option {
	return optionFunc(func(c *Config) error {
		if dsn == "" {
			return configf("direct DSN must not be empty")
		}
		c.DirectDSN = dsn
		return nil
	})
}

// WithSlog sets the logger of the Store's structured events (default:
// none): Warn when a waiting fetch falls back to polling because the
// cross-Store wake-up is unavailable (behind PgBouncer without
// WithDirectDSN, or a pool of fewer than 3 connections), Warn when the
// LISTEN connection is lost or cannot be opened, Info when it is up again,
// Info "retry" when a provider call retries a transient failure itself
// (attributes op, attempt, wait, class, error). Events carry the attribute
// "component"="agentstore", an "event" name and no DSN password.
func WithSlog(l *slog.Logger) Option {
	return optionFunc(func(c *Config) error {
		if l == nil {
			return configf("slog logger must not be nil")
		}
		c.Slog = l
		return nil
	})
}

// maxTimeout is the longest statement or lock timeout the options accept
// (PostgreSQL's limit is 2^31-1 ms, about 24.8 days).
const maxTimeout = 24 * time.Hour

// checkTimeout validates a timeout option's duration: 0 (off) or between
// 1 ms and maxTimeout.
func checkTimeout(name string, d time.Duration) error {
	if d < 0 || (d > 0 && d < time.Millisecond) || d > maxTimeout {
		return configf("%s %v must be 0 (off) or between 1ms and %v", name, d, maxTimeout)
	}
	return nil
}

// WithStatementTimeout bounds every statement the Store runs (those sent
// through Store.DB and Store.SQLDB included) by d (0, the default, is off;
// d is rounded up to a whole millisecond; a negative d, one below 1 ms or
// above 24 h is ErrInvalidConfig). A statement that runs
// longer is cancelled, its transaction rolled back, and the call fails
// with a *repo.Error (Op names the call; the message names the session,
// or the instance where the provider call has one, and holds no driver
// text) matching ErrStatementTimeout and ErrTimeout, not ErrRetryable (see
// ErrStatementTimeout for why). The caller's own context deadline stays
// what it was: context.DeadlineExceeded, not ErrTimeout.
//
// PostgreSQL (Store made by Open): every transaction the Store opens
// starts with SET LOCAL statement_timeout = d, sent in the same message
// as its BEGIN (no extra round trip), so the setting lives exactly as long
// as the transaction and works through PgBouncer in transaction pooling
// (nothing is left on the server connection). A statement the Store would
// otherwise run on its own (autocommit: the one-statement fast paths,
// single reads) is run as BEGIN + SET LOCAL, the statement, COMMIT: two
// extra round trips per such statement, paid only while a timeout is
// configured (a set_config inside the statement itself would not bound
// it: the server arms statement_timeout when the statement starts). Off,
// nothing is sent. Migrate's steps that cannot run in a transaction
// (CREATE INDEX CONCURRENTLY) are not bounded; its other steps are, so run
// Migrate on a Store without the option if an index build may take
// longer. The LISTEN connection's wait for notifications is not a
// statement and is not bounded. A Store made by New does not own its
// connections: New refuses the option on PostgreSQL (ErrInvalidConfig);
// set statement_timeout on the handle's connections instead.
//
// SQLite has no server-side statement timeout. There every statement the
// Store runs gets a context bounded by d: the driver interrupts a statement
// still running at that deadline (sqlite3_interrupt) and the call fails
// with ErrStatementTimeout. A wait for the database write lock (BEGIN
// IMMEDIATE, or a write outside a transaction, while another connection or
// process writes) is bounded by d too, by shortening the connection's busy
// timeout for that wait (PRAGMA busy_timeout, restored after; only when d
// is shorter than the busy timeout). Waiting for the Store's own write
// connection (another call of the same Store is writing) happens in Go and
// is bounded by the caller's context only. Cost while set: a timer per
// statement, two PRAGMAs per such lock wait; nothing when off. Open only:
// New refuses the option on SQLite too (ErrInvalidConfig).
func WithStatementTimeout(d time.Duration) Option {
	return optionFunc(func(c *Config) error {
		if err := checkTimeout("statement timeout", d); err != nil {
			return err
		}
		c.StmtTimeout = d
		return nil
	})
}

// WithLockTimeout bounds every wait for a lock by d (0, the default, is
// off; d is rounded up to a whole millisecond; a negative d, one below
// 1 ms or above 24 h is ErrInvalidConfig). A statement that waits longer
// for a lock another transaction holds fails; its transaction is rolled
// back and the call fails with a *repo.Error (Op names the call; the
// message names the session, or the instance where the provider call has
// one, and holds no driver text) matching ErrLockTimeout, ErrTimeout and
// ErrRetryable: contention is transient, so the call may be retried (the
// provider's own internal retries of retryable failures apply too, so one
// provider call may wait up to about four times d).
//
// PostgreSQL (Store made by Open): applied exactly like
// WithStatementTimeout, as SET LOCAL lock_timeout = d at the start of
// every transaction the Store opens (in the BEGIN's message; autocommit
// statements run in a transaction of their own, two extra round trips
// each, only while a timeout is set), so it works through PgBouncer in
// transaction pooling. Row locks (SELECT ... FOR UPDATE, UPDATE), table
// locks and advisory locks are all covered. New refuses the option on
// PostgreSQL (ErrInvalidConfig); set lock_timeout on the handle's
// connections instead.
//
// SQLite: the busy timeout of every connection Open opens is d instead of
// 10 s: a write that waits longer for the database write lock another
// connection or process holds fails with ErrLockTimeout (so does one that
// waited the default 10 s without the option). Waiting for the Store's own
// write connection (another call of the same Store is writing) happens in
// Go and is bounded by the caller's context, not by d. New refuses the
// option on SQLite (ErrInvalidConfig): the busy timeout is a setting of
// the caller's connections (_busy_timeout).
//
// On both dialects a wait for a lock is also ended by the caller's own
// context deadline, which then is the error (context.DeadlineExceeded, not
// ErrTimeout); on SQLite the Store shortens the busy wait to it.
func WithLockTimeout(d time.Duration) Option {
	return optionFunc(func(c *Config) error {
		if err := checkTimeout("lock timeout", d); err != nil {
			return err
		}
		c.LockTimeout = d
		return nil
	})
}

// Limits of WithMaxContentBytes.
const (
	// DefaultMaxContentBytes is the largest message or queue-item content
	// a Store accepts when WithMaxContentBytes is not given: 8 MiB.
	DefaultMaxContentBytes = 8 << 20
	// MaxContentBytesLimit is the largest value WithMaxContentBytes
	// accepts: 1 GiB, PostgreSQL's largest field.
	MaxContentBytesLimit = 1 << 30
)

// WithMaxContentBytes sets the largest content the Store accepts, in
// bytes (default DefaultMaxContentBytes): the Content of each message
// (AppendMessages, AppendMessagesWith, Save) and of each session-queue
// item (Enqueue, EnqueueWith). Larger content is refused with
// ErrInvalidInput before any SQL runs, the message naming the message (or
// item), its size and the limit; nothing of the call is written. Content
// already stored is read whatever its size. n must be between 1 and
// MaxContentBytesLimit (else ErrInvalidConfig).
func WithMaxContentBytes(n int) Option {
	return optionFunc(func(c *Config) error {
		if n < 1 || n > MaxContentBytesLimit {
			return configf("max content bytes %d must be between 1 and %d", n, MaxContentBytesLimit)
		}
		c.maxContent = n
		return nil
	})
}

// WithContentCodec encrypts content at rest with c (docs/encryption.md):
// message content and metadata, summaries (the summaries table, the
// session row's latest summary and compaction records' summaries) and
// session-queue item content are encrypted before they reach the database,
// each bound to its row, and decrypted on every read. Ids, roles, states,
// timestamps, token usage, todos and plans stay in the clear. With a codec
// Sessions.Search refuses (ErrContentEncrypted). Stored values under
// another key id are read while c holds that key; Store.RotateContentKeys
// moves them (and values stored before the codec was set) to the active
// key. A nil codec, or one whose ActiveKeyID is empty, longer than
// MaxKeyIDLen or not valid UTF-8, is ErrInvalidConfig.
func WithContentCodec(c ContentCodec) Option {
	return optionFunc(func(cfg *Config) error {
		if c == nil {
			return configf("content codec must not be nil")
		}
		if err := checkKeyID(c.ActiveKeyID()); err != nil {
			return configf("content codec: active key: %v", err)
		}
		cfg.codec = c
		return nil
	})
}

// BuildConfig applies opts to the defaults.
func BuildConfig(opts []Option) (*Config, error) {
	c := &Config{Config: dialect.Config{Prefix: DefaultTablePrefix, Pool: DefaultPool(), Logger: logger.Discard, Clock: time.Now, SQLiteSync: "NORMAL",
		PollInterval: defaultPollInterval, Slog: slog.New(slog.DiscardHandler)}, maxContent: DefaultMaxContentBytes}
	for _, o := range opts {
		if o == nil {
			return nil, configf("nil option")
		}
		if err := o.apply(c); err != nil {
			return nil, err
		}
	}
	return c, nil
}
