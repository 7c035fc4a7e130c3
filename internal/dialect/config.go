package dialect

import (
	"database/sql"
	"log/slog"
	"time"

	"gorm.io/gorm/logger"
)

// PoolConfig sets the connection pool. The zero value of a field keeps the
// DefaultPool value.
type PoolConfig struct {
	MaxOpenConns   int           // maximum open connections
	MinIdleConns   int           // validated (<= MaxOpenConns); database/sql keeps up to MaxOpenConns idle connections until IdleTimeout
	ConnectTimeout time.Duration // time allowed to establish a connection (PostgreSQL)
	IdleTimeout    time.Duration // close connections idle this long
	MaxLifetime    time.Duration // recycle connections after this long
}

// DefaultPool is the default preset: 10/1 connections, 30 s connect,
// 600 s idle, 1800 s lifetime.
func DefaultPool() PoolConfig {
	return PoolConfig{MaxOpenConns: 10, MinIdleConns: 1, ConnectTimeout: 30 * time.Second,
		IdleTimeout: 600 * time.Second, MaxLifetime: 1800 * time.Second}
}

// HighThroughputPool is the high-throughput preset: 50/5
// connections, 10 s connect, 300 s idle, 900 s lifetime.
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
	Slog         *slog.Logger
	// stmtTimeout and lockTimeout (WithStatementTimeout, WithLockTimeout;
	// 0 = off) are applied by the dialect (see its Open and Wrap).
	StmtTimeout time.Duration
	LockTimeout time.Duration
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
