package agentstore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/agentstore/agentstore/models"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
)

// The PostgreSQL dialect: pgx through database/sql, GORM's postgres
// driver. Its optional fast paths are in dialect_postgres_provider.go and
// dialect_postgres_sessions.go, its wake-up mechanism (LISTEN/NOTIFY) in
// dialect_postgres_notify.go, its catalog reader in
// dialect_postgres_catalog.go.

func init() {
	registerDialect(pgDialect{})
	// jsonb for documents that may be normalised, json for message content
	// (validated, kept byte for byte), numeric(20,9) for money.
	models.RegisterColumnTypes("postgres", map[models.LogicalType]string{
		models.TypeJSON: "jsonb", models.TypeVerbatimJSON: "json", models.TypeDecimal: "numeric"})
}

// pgDialect implements dialect for PostgreSQL.
type pgDialect struct{}

func (pgDialect) title() string { return "PostgreSQL" }

func (pgDialect) name() Dialect { return Postgres }

func (pgDialect) capabilities() Capability {
	return CapRowLocks | CapSkipLocked | CapAsyncCommit | CapAdvisoryLocks | CapWakeup | CapSnapshotReads |
		CapValidatedJSON | CapPartialIndexes | CapAlterColumns | CapFastPaths
}

func (pgDialect) matchDSN(dsn string) (string, bool, error) {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		return dsn, true, nil
	}
	return "", false, nil
}

func (pgDialect) ownsGorm(name string) bool { return name == "postgres" }

func (pgDialect) checkConfig(*config) error { return nil }

func (pgDialect) open(_ context.Context, target string, cfg *config) (*dialectConn, error) {
	pc, err := pgx.ParseConfig(target)
	if err != nil {
		return nil, configf("parse postgres DSN %s: %v", RedactDSN(target), scrub(err, target))
	}
	if cfg.pool.ConnectTimeout > 0 {
		pc.ConnectTimeout = cfg.pool.ConnectTimeout
	}
	db := stdlib.OpenDB(*pc)
	applyPool(db, cfg.pool)
	return &dialectConn{gorm: postgres.New(postgres.Config{Conn: db}), sqlDB: db}, nil
}

func (pgDialect) wrap(db *gorm.DB, _ *config) (*dialectConn, error) {
	sqlDB, err := db.DB()
	if err != nil {
		return nil, configf("gorm handle has no *sql.DB: %v", err)
	}
	return &dialectConn{gorm: postgres.New(postgres.Config{Conn: sqlDB}), sqlDB: sqlDB}, nil
}

func (pgDialect) offline() (gorm.Dialector, func() error, error) {
	pc, err := pgx.ParseConfig("postgres://ddl-export.invalid/none")
	if err != nil {
		return nil, nil, err
	}
	db := stdlib.OpenDB(*pc) // never connected: DryRun executes nothing
	return postgres.New(postgres.Config{Conn: db}), db.Close, nil
}

// castParam: a parameter in a SELECT list would otherwise be typed text.
func (pgDialect) castParam(typ string) string { return "CAST(? AS " + typ + ")" }

// migrateLock takes a transaction-scoped advisory lock keyed by schema and
// prefix (CapAdvisoryLocks) and creates the schema if missing.
func (pgDialect) migrateLock(tx *gorm.DB, s *Store) error {
	if s.has(CapAdvisoryLocks) {
		if err := tx.Exec("SELECT pg_advisory_xact_lock(?)", s.migrateLockKey()).Error; err != nil {
			return fmt.Errorf("take migration lock: %w", err)
		}
	}
	if s.cfg.schema != "" {
		if err := tx.Exec(`CREATE SCHEMA IF NOT EXISTS "` + s.cfg.schema + `"`).Error; err != nil {
			return fmt.Errorf("create schema %s: %w", s.cfg.schema, err)
		}
	}
	return nil
}

func (pgDialect) newWaker(s *Store, onWake func(kind string)) waker {
	return newPGNotifier(s, onWake)
}

func (pgDialect) catalog() catalogReader { return pgCatalog{} }

// translateDriverError maps PostgreSQL errors by SQLSTATE.
func (pgDialect) translateDriverError(err error) (error, bool) {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "23505":
			return fmt.Errorf("%w: %w", ErrConflict, err), true
		case "40P01", "40001", "55P03", "57P01", "57P02", "57P03", "08000", "08003", "08006", "08001", "08004", "53300":
			return fmt.Errorf("%w: %w", ErrRetryable, err), true
		case "22P05", "22021":
			return fmt.Errorf("%w: %w", ErrInvalidInput, err), true
		}
		return err, true
	}
	var connErr *pgconn.ConnectError
	if errors.As(err, &connErr) || pgconn.SafeToRetry(err) {
		return fmt.Errorf("%w: %w", ErrRetryable, err), true
	}
	return nil, false
}
