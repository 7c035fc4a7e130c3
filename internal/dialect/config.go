package dialect

import (
	"database/sql"
	"log/slog"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// PoolConfig sets the connection pool of a Store made by Open (New keeps
// the caller's pool as it is). The zero value of a field keeps the
// DefaultPool value, except MinIdleConns, where 0 means none.
//
// MinIdleConns connections are kept open and idle, ready for a burst: a
// background keeper (one goroutine per Store, stopped by Close) opens them
// within about a second of Open and replaces them when they are closed
// (MaxLifetime, the server, a broken connection), and uses each one at
// least every IdleTimeout/2 (a ping) so IdleTimeout does not close them;
// it never opens more than MaxOpenConns in all, and never waits for a
// connection (it takes one only while the pool has an idle one or room
// for a new one), so it never holds the Store's own calls back. On
// PostgreSQL without WithDirectDSN the wake-up listener, once a waiting
// call starts it, holds one of the MaxOpenConns connections for the
// Store's life. Idle connections beyond
// MinIdleConns (up to MaxOpenConns) are kept until IdleTimeout. On SQLite
// the read pool is kept (the one write connection is always open); an
// in-memory database is one connection and needs none.
type PoolConfig struct {
	MaxOpenConns   int           // maximum open connections
	MinIdleConns   int           // idle connections kept open and warm (at most MaxOpenConns; 0 = none)
	ConnectTimeout time.Duration // time allowed to establish a connection (PostgreSQL)
	IdleTimeout    time.Duration // close connections (beyond MinIdleConns) idle this long
	MaxLifetime    time.Duration // recycle connections after this long
}

// DefaultPool is the pool of a Store opened without WithPool: at most 10
// connections, 1 kept idle, 30 s connect timeout, 600 s idle timeout,
// 1800 s lifetime.
func DefaultPool() PoolConfig {
	return PoolConfig{MaxOpenConns: 10, MinIdleConns: 1, ConnectTimeout: 30 * time.Second,
		IdleTimeout: 600 * time.Second, MaxLifetime: 1800 * time.Second}
}

// HighThroughputPool is a preset for busy services: at most 50
// connections, 5 kept idle, 10 s connect timeout, 300 s idle timeout, 900 s
// lifetime.
func HighThroughputPool() PoolConfig {
	return PoolConfig{MaxOpenConns: 50, MinIdleConns: 5, ConnectTimeout: 10 * time.Second,
		IdleTimeout: 300 * time.Second, MaxLifetime: 900 * time.Second}
}

// Config is a Store's configuration as the options set it (the root
// package's Option values fill it; telemetry settings live in the engine).
type Config struct {
	Prefix       string
	Schema       string
	Pool         PoolConfig
	Logger       logger.Interface
	Clock        func() time.Time
	SQLiteSync   string
	PollInterval time.Duration
	CapsOff      Capability // WithoutCapabilities
	ReadOnly     bool       // WithReadOnly
	CustomClock  bool       // WithClock
	PgBouncer    bool       // WithPgBouncer
	DirectDSN    string     // WithDirectDSN
	// SearchLanguage is WithSearchLanguage ("" = "simple").
	SearchLanguage string
	Slog           *slog.Logger
	// stmtTimeout and lockTimeout (WithStatementTimeout, WithLockTimeout;
	// 0 = off) are applied by the dialect (see its Open and Wrap).
	StmtTimeout time.Duration
	LockTimeout time.Duration
	// WrapPool, set by the engine, wraps the pool a dialect's Open and
	// Wrap build the GORM dialector on (the Store's close guard); a
	// dialect must call it when it is set.
	WrapPool func(gorm.ConnPool) gorm.ConnPool
}

// TimeoutMS returns d in whole milliseconds, rounded up.
func TimeoutMS(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// ApplyPool sets db's limits from p.
func ApplyPool(db *sql.DB, p PoolConfig) {
	db.SetMaxOpenConns(p.MaxOpenConns)
	// Keep every connection the load needed until it has been idle for
	// IdleTimeout: capping idle connections below MaxOpenConns made a
	// concurrent load close and reopen connections around its calls
	// (measured: an orchestration run at 68 instead of 155 wf/s).
	db.SetMaxIdleConns(p.MaxOpenConns)
	db.SetConnMaxIdleTime(p.IdleTimeout)
	db.SetConnMaxLifetime(p.MaxLifetime)
}

// Pooled returns p wrapped by WrapPool when set, else p: what a dialect's
// Open and Wrap build the GORM dialector on.
func (c *Config) Pooled(p gorm.ConnPool) gorm.ConnPool {
	if c.WrapPool != nil {
		return c.WrapPool(p)
	}
	return p
}
