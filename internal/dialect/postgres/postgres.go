package postgres

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/agentstore/agentstore/internal/dialect"
	"github.com/agentstore/agentstore/repo"

	"github.com/agentstore/agentstore/models"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
)

// The PostgreSQL dialect: pgx through database/sql, GORM's postgres
// driver. Its one-statement provider steps are in provider.go (the
// session append's, AppendOneSQL, below), its wake-up mechanism
// (LISTEN/NOTIFY) in notify.go, its catalog reader in catalog.go.

// pgDialect implements dialect for PostgreSQL.
type pgDialect struct{}

func (pgDialect) Title() string { return "PostgreSQL" }

// columnTypes: jsonb for documents that may be normalised, json for message
// content (validated, kept byte for byte), numeric without a scale for
// money (exact).
func (pgDialect) ColumnTypes() models.ColumnTypes {
	return models.ColumnTypes{models.TypeJSON: "jsonb", models.TypeVerbatimJSON: "json", models.TypeDecimal: "numeric"}
}

func (pgDialect) SemconvSystem() string { return "postgresql" }

func (pgDialect) Name() dialect.Name { return dialect.Postgres }

func (pgDialect) Capabilities() dialect.Capability {
	return dialect.CapRowLocks | dialect.CapSkipLocked | dialect.CapAsyncCommit | dialect.CapAdvisoryLocks | dialect.CapWakeup | dialect.CapSnapshotReads |
		dialect.CapValidatedJSON | dialect.CapPartialIndexes | dialect.CapAlterColumns | dialect.CapFastPaths | dialect.CapGroupCommit |
		dialect.CapUpdateReturning | dialect.CapLockOf | dialect.CapMaterializedCTE | dialect.CapChangeFeed
}

// matchDSN accepts URLs (postgres://, postgresql://) and libpq key=value
// DSNs ("host=db user=app dbname=agents sslmode=disable", GORM's form).
func (pgDialect) MatchDSN(dsn string) (string, bool, error) {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") || pgKeyValueRE.MatchString(dsn) {
		return dsn, true, nil
	}
	return "", false, nil
}

// pgKeyValueRE recognises a libpq key=value DSN by its first keyword.
var pgKeyValueRE = regexp.MustCompile(`^\s*(host|hostaddr|port|dbname|user|password|passfile|sslmode|sslrootcert|connect_timeout|application_name|options|target_session_attrs|service)\s*=`)

func (pgDialect) OwnsGorm(name string) bool { return name == "postgres" }

// checkConfig refuses WithReadOnly behind PgBouncer (it is a startup
// parameter, which PgBouncer refuses) and a WithDirectDSN that does not
// parse.
func (pgDialect) CheckConfig(cfg *dialect.Config) error {
	if cfg.PgBouncer && cfg.ReadOnly {
		return dialect.Configf("WithReadOnly cannot be used with WithPgBouncer: PgBouncer refuses the startup parameter default_transaction_read_only")
	}
	if cfg.DirectDSN != "" {
		if _, err := parseDirectDSN(cfg.DirectDSN); err != nil {
			return err
		}
	}
	return nil
}

// parseDirectDSN parses WithDirectDSN's DSN (never sent through a
// pooler: it keeps pgx's default statement mode).
func parseDirectDSN(dsn string) (*pgx.ConnConfig, error) {
	if _, ok, _ := (pgDialect{}).MatchDSN(dsn); !ok {
		return nil, dialect.Configf("direct DSN %s is not a PostgreSQL DSN (postgres://... or key=value)", dialect.RedactDSN(dsn))
	}
	pc, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, pgParseError("direct DSN", dsn, err)
	}
	return pc, nil
}

func (pgDialect) Open(_ context.Context, target string, cfg *dialect.Config) (*dialect.Conn, error) {
	pc, err := pgx.ParseConfig(target)
	if err != nil {
		return nil, pgParseError("PostgreSQL DSN", target, err)
	}
	if cfg.Pool.ConnectTimeout > 0 {
		pc.ConnectTimeout = cfg.Pool.ConnectTimeout
	}
	if cfg.PgBouncer {
		// One round trip per statement with an unnamed statement, no
		// caches: nothing prepared outlives a pooled transaction.
		pc.DefaultQueryExecMode = pgx.QueryExecModeExec
		pc.StatementCacheCapacity = 0
		pc.DescriptionCacheCapacity = 0
	}
	if cfg.ReadOnly {
		if pc.RuntimeParams == nil {
			pc.RuntimeParams = map[string]string{}
		}
		pc.RuntimeParams["default_transaction_read_only"] = "on"
	}
	var db *sql.DB
	if set := pgTimeoutSQL(cfg); set != "" {
		// WithStatementTimeout, WithLockTimeout: see dialect_postgres_timeout.go.
		db = sql.OpenDB(&pgTimeoutConnector{inner: stdlib.GetConnector(*pc), set: set})
	} else {
		db = stdlib.OpenDB(*pc)
	}
	dialect.ApplyPool(db, cfg.Pool)
	return &dialect.Conn{Gorm: postgres.New(postgres.Config{Conn: cfg.Pooled(db)}), SQLDB: db}, nil
}

func (pgDialect) Wrap(db *gorm.DB, cfg *dialect.Config) (*dialect.Conn, error) {
	if cfg.StmtTimeout > 0 || cfg.LockTimeout > 0 {
		return nil, dialect.Configf("WithStatementTimeout and WithLockTimeout need a PostgreSQL Store made by Open (New does not own its connections): set statement_timeout and lock_timeout on the handle's connections instead")
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, dialect.Configf("gorm handle has no *sql.DB: %v", err)
	}
	return &dialect.Conn{Gorm: postgres.New(postgres.Config{Conn: cfg.Pooled(sqlDB)}), SQLDB: sqlDB}, nil
}

func (pgDialect) Offline() (gorm.Dialector, func() error, error) {
	pc, err := pgx.ParseConfig("postgres://ddl-export.invalid/none")
	if err != nil {
		return nil, nil, err
	}
	db := stdlib.OpenDB(*pc) // never connected: DryRun executes nothing
	return postgres.New(postgres.Config{Conn: db}), db.Close, nil
}

// castParam: a parameter in a SELECT list would otherwise be typed text.
func (pgDialect) CastParam(typ string) string { return "CAST(? AS " + typ + ")" }

// migrateLock takes a transaction-scoped advisory lock keyed by schema and
// prefix (dialect.CapAdvisoryLocks) and creates the schema if missing.
func (pgDialect) MigrateLock(tx *gorm.DB, env *dialect.Env) error {
	if env.Has(dialect.CapAdvisoryLocks) {
		if err := tx.Exec("SELECT pg_advisory_xact_lock(?)", env.MigrateLockKey).Error; err != nil {
			return fmt.Errorf("take migration lock: %w", err)
		}
	}
	if env.Config.Schema != "" {
		if err := tx.Exec(`CREATE SCHEMA IF NOT EXISTS "` + env.Config.Schema + `"`).Error; err != nil {
			return fmt.Errorf("create schema %s: %w", env.Config.Schema, err)
		}
	}
	return nil
}

func (pgDialect) NewWaker(env *dialect.Env, onWake func(kind string)) dialect.Waker {
	return newPGNotifier(env, onWake)
}

func (pgDialect) Catalog() dialect.Catalog { return pgCatalog{} }

// isConnectFailure: pgconn wraps a failed connection attempt (including
// one that ran out of the pool's ConnectTimeout) in *pgconn.ConnectError.
func (pgDialect) IsConnectFailure(err error) bool {
	var connErr *pgconn.ConnectError
	return errors.As(err, &connErr)
}

// translateDriverError maps PostgreSQL errors by SQLSTATE.
func (pgDialect) TranslateDriverError(err error) (error, bool) {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "23505":
			return &dialect.Fault{Kind: repo.ErrConflict, Cause: err}, true
		case "XX000":
			// Citus reports a unique violation raised on a worker as an
			// internal error with PostgreSQL's text (docs/distributed.md);
			// any other XX000 stays unclassified.
			if strings.HasPrefix(pgErr.Message, "duplicate key value violates unique constraint") {
				return &dialect.Fault{Kind: repo.ErrConflict, Cause: err}, true
			}
			return err, true
		case "55P03":
			// lock_not_available: lock_timeout (WithLockTimeout) expired
			return &dialect.Fault{Kind: repo.ErrLockTimeout, Cause: err}, true
		case "57014":
			// query_canceled: by statement_timeout (WithStatementTimeout), or
			// by the server or an administrator (pg_cancel_backend). Only
			// the message tells them apart (with English lc_messages); the
			// caller's own cancellation never gets here (translateError
			// returns its context error first).
			if strings.Contains(pgErr.Message, "statement timeout") {
				return &dialect.Fault{Kind: repo.ErrStatementTimeout, Cause: err}, true
			}
			return &dialect.Fault{Kind: repo.ErrRetryable, Cause: err}, true
		case "40P01", "40001", "57P01", "57P02", "57P03", "08000", "08003", "08006", "08001", "08004", "53300":
			return &dialect.Fault{Kind: repo.ErrRetryable, Cause: err}, true
		case "22P05", "22021", "22003", "21000":
			// untranslatable/invalid text, numeric overflow, one row affected twice
			return &dialect.Fault{Kind: repo.ErrInvalidInput, Cause: err}, true
		case "25P02":
			// in_failed_sql_transaction: an application's transaction
			// (Store.InTx) in which an earlier statement failed
			return &dialect.Fault{Kind: repo.ErrInvalidInput, Cause: err}, true
		case "23503":
			// a referenced row is gone (deleted concurrently)
			return &dialect.Fault{Kind: repo.ErrNotFound, Cause: err}, true
		case "42P01", "42703", "42883":
			// undefined table, column or function (the search functions of V8)
			return &dialect.Fault{Kind: dialect.ErrSchemaBehind, Cause: err}, true
		case "42P05", "26000":
			// duplicate_prepared_statement, invalid_sql_statement_name: a
			// named statement pgx prepared met another client's session
			// (or lost its own) — a transaction pooler in front of the
			// server, without WithPgBouncer.
			return &dialect.ConfigError{Msg: "prepared statements do not survive the connection's pooler: the server is reached through " +
				"PgBouncer (or another transaction pooler) but the Store was opened without WithPgBouncer; open it with " +
				"WithPgBouncer() (and WithDirectDSN for LISTEN and Migrate)", Cause: err}, true
		}
		return err, true
	}
	var connErr *pgconn.ConnectError
	if errors.As(err, &connErr) || pgconn.SafeToRetry(err) {
		return &dialect.Fault{Kind: repo.ErrRetryable, Cause: err}, true
	}
	return nil, false
}

// normalizeDDL: GORM's PostgreSQL DDL is already canonical.
func (pgDialect) NormalizeDDL(stmt string) string { return stmt }

// applyNoTx runs a migration outside a transaction on one connection that
// holds a session-level advisory lock (with dialect.CapAdvisoryLocks): it re-reads
// the recorded version, drops the INVALID indexes an interrupted CREATE
// INDEX CONCURRENTLY of this step left, and runs the statements in order
// (the last records the version). Behind a pooler (WithPgBouncer) the
// connection is a direct one to WithDirectDSN's server, opened for the
// step and closed after it; without that option the step is refused with
// dialect.ErrInvalidConfig (a session lock through a transaction pooler may be
// taken and released on different server connections, and leak).
func (pgDialect) ApplyNoTx(ctx context.Context, env *dialect.Env, version int64, stmts []string) error {
	pool := env.SQLDB
	if env.Config.PgBouncer {
		if env.Config.DirectDSN == "" {
			return dialect.Configf("migration V%d (CREATE INDEX CONCURRENTLY) needs a session: behind PgBouncer pass WithDirectDSN or run Migrate on a direct connection", version)
		}
		pc, err := parseDirectDSN(env.Config.DirectDSN)
		if err != nil {
			return err
		}
		if env.Config.Pool.ConnectTimeout > 0 {
			pc.ConnectTimeout = env.Config.Pool.ConnectTimeout
		}
		pool = stdlib.OpenDB(*pc)
		defer pool.Close()
	}
	// Not bounded by WithStatementTimeout/WithLockTimeout: CREATE INDEX
	// CONCURRENTLY cannot run in the transaction that would carry them.
	ctx = withoutTimeouts(ctx)
	conn, err := pool.Conn(ctx)
	if err != nil {
		if env.Config.PgBouncer && ctx.Err() == nil {
			// The direct server of WithDirectDSN, in the Store's words.
			return dialect.OpenFailure(ctx, pgDialect{}, env.Config.DirectDSN, env.Config.DirectDSN, env.Config, err)
		}
		return err
	}
	defer conn.Close()
	if env.Config.Schema != "" {
		if _, err := conn.ExecContext(ctx, `CREATE SCHEMA IF NOT EXISTS "`+env.Config.Schema+`"`); err != nil {
			return err
		}
	}
	if env.Has(dialect.CapAdvisoryLocks) {
		// Poll with pg_try_advisory_lock: a session blocked inside
		// pg_advisory_lock holds a snapshot, and CREATE INDEX CONCURRENTLY
		// waits for every snapshot, so a blocking wait would deadlock with
		// the holder's index build.
		for {
			var got bool
			if err := conn.QueryRowContext(ctx, "SELECT pg_try_advisory_lock($1)", env.MigrateLockKey).Scan(&got); err != nil {
				return fmt.Errorf("take migration lock: %w", err)
			}
			if got {
				break
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
		defer func() {
			_, _ = conn.ExecContext(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", env.MigrateLockKey)
		}()
	}
	var cur *int64
	if err := conn.QueryRowContext(ctx, "SELECT MAX(version) FROM "+env.Quote(models.TableSchemaVersion)).Scan(&cur); err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	if cur != nil && *cur >= version {
		return nil
	}
	nsp := env.Config.Schema
	for _, st := range stmts {
		if name := concurrentIndexName(st); name != "" {
			// An interrupted CONCURRENTLY build leaves an INVALID index that
			// IF NOT EXISTS would keep: drop it so the build runs again.
			var invalid bool
			err := conn.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
				JOIN pg_namespace n ON n.oid = c.relnamespace
				WHERE c.relname = $1 AND n.nspname = COALESCE(NULLIF($2, ''), current_schema()) AND NOT i.indisvalid)`, name, nsp).Scan(&invalid)
			if err != nil {
				return fmt.Errorf("check index %s: %w", name, err)
			}
			if invalid {
				q := `"` + name + `"`
				if nsp != "" {
					q = `"` + nsp + `".` + q
				}
				if _, err := conn.ExecContext(ctx, "DROP INDEX CONCURRENTLY IF EXISTS "+q); err != nil {
					return fmt.Errorf("drop invalid index %s: %w", name, err)
				}
			}
		}
		if _, err := conn.ExecContext(ctx, st); err != nil {
			return &dialect.StmtError{Stmt: st, Err: err}
		}
	}
	return nil
}

var concurrentIndexRE = regexp.MustCompile(`(?i)CREATE (?:UNIQUE )?INDEX CONCURRENTLY (?:IF NOT EXISTS )?"([^"]+)"`)

// concurrentIndexName returns the index a CREATE INDEX CONCURRENTLY builds.
func concurrentIndexName(stmt string) string {
	if m := concurrentIndexRE.FindStringSubmatch(stmt); m != nil {
		return m[1]
	}
	return ""
}

// New returns the PostgreSQL dialect.
func New() dialect.Dialect { return pgDialect{} }

// ChainsUpdates: PostgreSQL runs data-modifying CTEs (dialect.UpdateChain).
func (pgDialect) ChainsUpdates() bool { return true }

// AppendOneSQL: the FOR UPDATE subquery waits for a concurrent appender's
// commit and then reads the row's newest version (read committed), so the
// old head it returns, and the seqs the INSERT derives from it, follow
// that appender's; the UPDATE re-checks the same row. The data-modifying
// CTE a runs once whether or not the final SELECT reads it, and i inserts
// nothing when a returns no row.
func (pgDialect) AppendOneSQL(vals, st, set, tc, ins string) string {
	return "WITH " + vals + ", a AS (UPDATE " + st + " AS s SET last_seq = o.last_seq + ?," + set +
		" FROM (SELECT id, last_seq, current_leaf_id FROM " + st + " WHERE id = ?" + tc + " FOR UPDATE) AS o" +
		" WHERE s.id = o.id RETURNING s.id, o.last_seq, o.current_leaf_id), i AS (" + ins + "a, v)" +
		" SELECT last_seq, current_leaf_id FROM a"
}

// ClaimSettingsSQL sets lock_timeout (whole milliseconds, at least 1)
// and, with async, synchronous_commit off, both with set_config(...,
// is_local = true): for the current transaction only. A lock wait of the
// same statement that starts after the list is evaluated is bounded too
// (lock_timeout is read when a wait begins); the table locks a statement
// takes before it runs are not.
func (pgDialect) ClaimSettingsSQL(async bool, waitMS int64) string {
	s := `set_config('lock_timeout', '` + strconv.FormatInt(max(waitMS, 1), 10) + `', true) AS w`
	if async {
		s = `set_config('synchronous_commit', 'off', true) AS v, ` + s
	}
	return s
}

// The optional parts of the contract PostgreSQL implements.
var (
	_ dialect.ClaimLockWait            = pgDialect{}
	_ dialect.DriverErrorTranslator    = pgDialect{}
	_ dialect.ConnectFailureClassifier = pgDialect{}
	_ dialect.AppendStatement          = pgDialect{}
	_ dialect.OpenFailureDescriber     = pgDialect{}
	_ dialect.HealthReporter           = (*pgNotifier)(nil)
)

// pgParseError is dialect.ErrInvalidConfig for a DSN pgx cannot parse, in the
// Store's words: pgx's and net/url's messages may quote part of a
// malformed password, so only the kind of mistake is named (a file it
// cannot read is named by its path).
func pgParseError(what, dsn string, err error) error {
	reason := "check its syntax (postgres://user:password@host:port/dbname?param=value, or host=... dbname=...) and parameter values (sslmode, port, connect_timeout, target_session_attrs...)"
	var (
		pathErr *fs.PathError
		numErr  *strconv.NumError
		urlErr  *url.Error
	)
	switch {
	case errors.As(err, &pathErr):
		reason = fmt.Sprintf("cannot read file %s (sslrootcert, sslcert, sslkey, passfile or servicefile)", pathErr.Path)
	case errors.As(err, &numErr):
		reason = "a numeric parameter (port, connect_timeout...) is not a number"
	case errors.As(err, &urlErr):
		reason = "it is not a valid URL (percent-encode '@', ':', '/', '?', '#' and spaces in the user name and password)"
	}
	return &dialect.ConfigError{Msg: fmt.Sprintf("cannot parse the %s %s: %s", what, dialect.RedactDSN(dsn), reason), Cause: dialect.Scrub(err, dsn)}
}

// DescribeOpenFailure explains why Open could not connect (see OpenError):
// the server's refusal by SQLSTATE, the network failure by its system
// error, a TLS certificate the client refused; the user and database it
// names come from the DSN (never the password).
func (pgDialect) DescribeOpenFailure(dsn, target string, cfg *dialect.Config, err error) (string, string, error) {
	redacted := dialect.RedactDSN(dsn)
	subject := "connect to " + redacted
	// A name pgx read from the DSN is shown only when the redacted DSN
	// shows it too: from a malformed DSN pgx may read part of a password
	// as a user, database or host name.
	shown := func(v string) string {
		if v != "" && strings.Contains(redacted, v) {
			return strconv.Quote(v)
		}
		return "(name not shown)"
	}
	user, db := "", ""
	var connErr *pgconn.ConnectError
	if errors.As(err, &connErr) && connErr.Config != nil {
		user, db = connErr.Config.User, connErr.Config.Database
	} else if pc, perr := pgx.ParseConfig(target); perr == nil {
		user, db = pc.User, pc.Database
	}
	user, db = shown(user), shown(db)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch code := pgErr.Code; {
		case code == "28P01":
			return subject, fmt.Sprintf("authentication failed for user %s (wrong password?)", user), dialect.ErrInvalidConfig
		case code == "28000":
			return subject, fmt.Sprintf("the server refused user %s (no such role, the role may not log in, or no pg_hba.conf entry allows this connection)", user), dialect.ErrInvalidConfig
		case code == "3D000":
			return subject, fmt.Sprintf("database %s does not exist", db), dialect.ErrInvalidConfig
		case code == "42501":
			return subject, fmt.Sprintf("user %s may not connect to database %s (permission denied)", user, db), dialect.ErrInvalidConfig
		case code == "53300":
			return subject, "the server has no free connection slots (too many connections)", repo.ErrRetryable
		case code == "57P03":
			return subject, "the server is starting up, shutting down or in recovery", repo.ErrRetryable
		case code == "08P01":
			return subject, "the server or pooler refused the connection (a PgBouncer that does not know the database or user?)", dialect.ErrInvalidConfig
		case strings.HasPrefix(code, "28"), strings.HasPrefix(code, "3D"), strings.HasPrefix(code, "42"), strings.HasPrefix(code, "0A"):
			return subject, fmt.Sprintf("the server refused the connection of user %s to database %s", user, db), dialect.ErrInvalidConfig
		}
		return subject, "the server refused the connection", repo.ErrRetryable
	}
	var (
		dnsErr   *net.DNSError
		certErr  *tls.CertificateVerificationError
		authErr  x509.UnknownAuthorityError
		hostErr  x509.HostnameError
		invalErr x509.CertificateInvalidError
		recErr   tls.RecordHeaderError
		netErr   net.Error
	)
	switch {
	case errors.As(err, &certErr), errors.As(err, &authErr), errors.As(err, &hostErr), errors.As(err, &invalErr):
		return subject, "the server's TLS certificate was not accepted (check sslmode and sslrootcert)", dialect.ErrInvalidConfig
	case errors.As(err, &recErr):
		return subject, "the TLS handshake failed: the server did not answer in TLS (check sslmode)", dialect.ErrInvalidConfig
	case errors.As(err, &dnsErr):
		return subject, fmt.Sprintf("host %s not found", shown(dnsErr.Name)), repo.ErrRetryable
	case errors.Is(err, syscall.ECONNREFUSED):
		return subject, "connection refused (is the server running and accepting connections on that host and port?)", repo.ErrRetryable
	case errors.Is(err, syscall.ENOENT):
		return subject, "no server socket at that path (is the server running?)", repo.ErrRetryable
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return subject, "host unreachable", repo.ErrRetryable
	case errors.Is(err, context.DeadlineExceeded), pgconn.Timeout(err):
		return subject, fmt.Sprintf("timed out (connect timeout %v)", cfg.Pool.ConnectTimeout), repo.ErrRetryable
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return subject, "the server closed the connection during start-up", repo.ErrRetryable
	case errors.As(err, &netErr):
		return subject, "network error", repo.ErrRetryable
	}
	if pc, perr := pgx.ParseConfig(target); perr == nil && pc.TLSConfig != nil && !hasPlainFallback(pc) {
		// sslmode=require or verify-*: pgx reports a server that refuses
		// TLS by text only.
		return subject, "the TLS connection failed (sslmode requires TLS: does the server accept it?)", dialect.ErrInvalidConfig
	}
	return subject, "the connection failed", repo.ErrRetryable
}

// hasPlainFallback reports whether pgx falls back to an unencrypted
// connection when TLS fails (sslmode=prefer or allow).
func hasPlainFallback(pc *pgx.ConnConfig) bool {
	for _, f := range pc.Fallbacks {
		if f.TLSConfig == nil {
			return true
		}
	}
	return false
}

// IdentitySQL implements dialect.TxIdentity: the database's name, the
// server's start time and the oid the Store's sessions table resolves to
// in the transaction (empty when it does not resolve there).
func (pgDialect) IdentitySQL(sessionsTable string) string {
	return `SELECT current_database() || '/' || pg_postmaster_start_time()::text || '/' || ` +
		`COALESCE(to_regclass('` + strings.ReplaceAll(sessionsTable, "'", "''") + `')::oid::text, '')`
}
