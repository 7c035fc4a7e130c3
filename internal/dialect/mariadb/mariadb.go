// Package mariadb is agentstore's MariaDB dialect (MariaDB 10.6+, tested on
// 10.11; the SQL keeps to what MySQL 8.0.19+ also accepts where a choice
// exists): go-sql-driver/mysql through database/sql, GORM's mysql driver.
// See ARCHITECTURE.md ("What MySQL 8 / MariaDB 10.11 ... would need") and
// docs/mariadb.md.
package mariadb

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	gormmysql "gorm.io/driver/mysql"
	"gorm.io/gorm"

	"github.com/agentstore/agentstore/internal/dialect"
	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo"
)

// mdDialect implements dialect.Dialect for MariaDB.
type mdDialect struct{}

// New returns the MariaDB dialect.
func New() dialect.Dialect { return mdDialect{} }

func (mdDialect) Name() dialect.Name { return dialect.MariaDB }

func (mdDialect) Title() string { return "MariaDB" }

func (mdDialect) SemconvSystem() string { return "mariadb" }

// ColumnTypes: documents and message content are LONGTEXT (kept byte for
// byte; the migrations add a json_valid CHECK), money decimal text as on
// SQLite: DECIMAL(65,30) would pad the scale to 30 digits and cannot hold
// the documented bound (repo.MaxCostFractionDigits, thousands of digits).
func (mdDialect) ColumnTypes() models.ColumnTypes {
	return models.ColumnTypes{models.TypeJSON: "longtext", models.TypeVerbatimJSON: "longtext", models.TypeDecimal: "text"}
}

// Capabilities: row locks, SKIP LOCKED (10.6+), snapshot reads (InnoDB
// consistent reads), ALTER COLUMN, group commit and the change feed (V14's
// triggers; reads place the changes, feed.go). Absent, each for its
// reason:
//   - advisory locks: GET_LOCK is session-scoped, not transaction-scoped
//     (it survives COMMIT); Migrate uses it through ApplyNoTx instead.
//   - wake-up: no LISTEN/NOTIFY; fetches poll at WithPollInterval.
//   - async commit: no per-transaction synchronous_commit.
//   - validated JSON: LONGTEXT with a json_valid CHECK keeps content byte
//     for byte, but reads validate as on SQLite.
//   - partial indexes: none in MariaDB; full indexes, and a generated
//     column with a UNIQUE index for the one-active-plan rule.
//   - fast paths: they are data-modifying CTEs (ERROR 1064 here).
//   - UPDATE ... RETURNING: ERROR 1064; the engine's two-statement form.
func (mdDialect) Capabilities() dialect.Capability {
	return dialect.CapRowLocks | dialect.CapSkipLocked | dialect.CapSnapshotReads | dialect.CapAlterColumns | dialect.CapGroupCommit |
		dialect.CapChangeFeed
}

// nativeRE recognises go-sql-driver/mysql's own DSN form:
// [user[:password]@]net(addr)/dbname[?params], e.g.
// root:pw@tcp(127.0.0.1:3306)/test?parseTime=true.
var nativeRE = regexp.MustCompile(`^(?:[^@/]*(?::[^@]*)?@)?(?:tcp|unix|tcp6|tcp4)\([^)]*\)/`)

// MatchDSN accepts mysql://user:pw@host:port/db?params,
// mariadb://user:pw@host:port/db?params and the go-sql-driver form
// user:pw@tcp(host:port)/db?params. The target is the driver's DSN.
func (mdDialect) MatchDSN(dsn string) (string, bool, error) {
	for _, s := range []string{"mysql://", "mariadb://"} {
		if strings.HasPrefix(dsn, s) {
			t, err := urlToNative(dsn)
			if err != nil {
				return "", true, err
			}
			return t, true, nil
		}
	}
	if nativeRE.MatchString(dsn) {
		if _, err := mysql.ParseDSN(dsn); err != nil {
			return "", true, dialect.Configf("MariaDB DSN %s does not parse (user:password@tcp(host:port)/database?params)", dialect.RedactDSN(dsn))
		}
		return dsn, true, nil
	}
	return "", false, nil
}

// urlToNative converts a mysql:// or mariadb:// URL into the driver's DSN.
func urlToNative(dsn string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return "", dialect.Configf("MariaDB DSN %s is not a URL (mysql://user:password@host:port/database)", dialect.RedactDSN(dsn))
	}
	c := mysql.NewConfig()
	if u.User != nil {
		c.User = u.User.Username()
		c.Passwd, _ = u.User.Password()
	}
	host := u.Host
	if host == "" {
		host = "127.0.0.1"
	}
	if u.Port() == "" {
		host = net.JoinHostPort(strings.Trim(host, "[]"), "3306")
	}
	c.Net, c.Addr = "tcp", host
	c.DBName = strings.TrimPrefix(u.Path, "/")
	if c.DBName == "" || strings.Contains(c.DBName, "/") {
		return "", dialect.Configf("MariaDB DSN %s names no database (mysql://user:password@host:port/database)", dialect.RedactDSN(dsn))
	}
	native := c.FormatDSN()
	if q := u.RawQuery; q != "" {
		if strings.Contains(native, "?") {
			native += "&" + q
		} else {
			native += "?" + q
		}
	}
	if _, err := mysql.ParseDSN(native); err != nil {
		return "", dialect.Configf("MariaDB DSN %s has a parameter the driver refuses", dialect.RedactDSN(dsn))
	}
	return native, nil
}

// OwnsGorm: GORM's mysql driver calls itself "mysql" (MariaDB too).
func (mdDialect) OwnsGorm(name string) bool { return name == "mysql" }

// CheckConfig refuses the options that have no meaning here.
func (mdDialect) CheckConfig(cfg *dialect.Config) error {
	if cfg.Schema != "" {
		return dialect.Configf("WithSchema is not supported on MariaDB: a MariaDB schema is a database; name it in the DSN (and use WithTablePrefix to share one)")
	}
	if cfg.PgBouncer || cfg.DirectDSN != "" {
		return dialect.Configf("WithPgBouncer and WithDirectDSN are PostgreSQL options")
	}
	return nil
}

// sqlMode is every connection's sql_mode, whatever the server's default:
// ANSI_QUOTES (double-quoted identifiers, as the engine writes them),
// PIPES_AS_CONCAT, NO_BACKSLASH_ESCAPES (string literals as in standard
// SQL), strict tables (an over-long or invalid value is an error, not
// truncated) and no zero dates.
const sqlMode = "'ANSI_QUOTES,PIPES_AS_CONCAT,NO_BACKSLASH_ESCAPES,STRICT_ALL_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION'"

// configure sets what every connection of a Store needs on c.
func configure(c *mysql.Config, cfg *dialect.Config) {
	if c.Params == nil {
		c.Params = map[string]string{}
	}
	c.ParseTime = true
	c.Loc = time.UTC
	// RowsAffected counts matched rows, as PostgreSQL and SQLite do (an
	// UPDATE that sets the values a row already has still reports it).
	c.ClientFoundRows = true
	// one round trip per statement (no server-side prepare/close)
	c.InterpolateParams = true
	c.Collation = "utf8mb4_bin"
	c.Params["sql_mode"] = sqlMode
	c.Params["time_zone"] = "'+00:00'"
	// READ COMMITTED as on PostgreSQL: locking reads take no gap locks,
	// and a plain read in a transaction sees the latest commit.
	c.Params["tx_isolation"] = "'READ-COMMITTED'"
	if cfg.LockTimeout > 0 {
		// whole seconds, at least 1 (InnoDB's granularity)
		c.Params["innodb_lock_wait_timeout"] = strconv.FormatInt(max(1, int64((cfg.LockTimeout+time.Second-1)/time.Second)), 10)
	}
	if cfg.StmtTimeout > 0 {
		c.Params["max_statement_time"] = strconv.FormatFloat(cfg.StmtTimeout.Seconds(), 'f', 3, 64)
	}
	if cfg.ReadOnly {
		c.Params["tx_read_only"] = "1"
	}
	if cfg.Pool.ConnectTimeout > 0 {
		c.Timeout = cfg.Pool.ConnectTimeout
	}
}

// gormDialector is GORM's mysql driver configured for MariaDB: no
// version probe (it would switch on UPDATE ... RETURNING, which MariaDB
// refuses), DATETIME(6), the chain's column types (mdGorm, verify.go).
func gormDialector(pool gorm.ConnPool) gorm.Dialector {
	prec := 6
	return mdGorm{gormmysql.New(gormmysql.Config{Conn: pool, SkipInitializeWithVersion: true, DisableWithReturning: true,
		ServerVersion: "10.11.0-MariaDB", DefaultStringSize: 255, DefaultDatetimePrecision: &prec}).(*gormmysql.Dialector)}
}

func (mdDialect) Open(_ context.Context, target string, cfg *dialect.Config) (*dialect.Conn, error) {
	c, err := mysql.ParseDSN(target)
	if err != nil {
		return nil, dialect.Configf("MariaDB DSN %s does not parse", dialect.RedactDSN(target))
	}
	configure(c, cfg)
	conn, err := mysql.NewConnector(c)
	if err != nil {
		return nil, dialect.Configf("MariaDB DSN %s: the driver refuses its settings", dialect.RedactDSN(target))
	}
	db := sql.OpenDB(conn)
	dialect.ApplyPool(db, cfg.Pool)
	return &dialect.Conn{Gorm: gormDialector(cfg.Pooled(db)), SQLDB: db}, nil
}

// Wrap adopts a GORM handle the caller opened. Its connections must have
// ANSI_QUOTES in sql_mode (the DSN's sql_mode parameter), which is checked
// on one connection; the other settings Open makes (READ COMMITTED, UTC,
// clientFoundRows, utf8mb4_bin) are the caller's to make (docs/mariadb.md).
func (mdDialect) Wrap(db *gorm.DB, cfg *dialect.Config) (*dialect.Conn, error) {
	if cfg.StmtTimeout > 0 || cfg.LockTimeout > 0 {
		return nil, dialect.Configf("WithStatementTimeout and WithLockTimeout need a MariaDB Store made by Open (New does not own its connections)")
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, dialect.Configf("gorm handle has no *sql.DB: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var mode string
	if err := sqlDB.QueryRowContext(ctx, "SELECT @@SESSION.sql_mode").Scan(&mode); err != nil {
		return nil, dialect.Configf("cannot read the handle's sql_mode: %v", err)
	}
	if !strings.Contains(mode, "ANSI_QUOTES") {
		return nil, dialect.Configf("the handle's connections lack ANSI_QUOTES in sql_mode: open it with sql_mode=%s in the DSN (see docs/mariadb.md)", url.QueryEscape(sqlMode))
	}
	return &dialect.Conn{Gorm: gormDialector(cfg.Pooled(sqlDB)), SQLDB: sqlDB}, nil
}

func (mdDialect) Offline() (gorm.Dialector, func() error, error) {
	c := mysql.NewConfig()
	c.Net, c.Addr, c.DBName = "tcp", "ddl-export.invalid:3306", "none"
	conn, err := mysql.NewConnector(c)
	if err != nil {
		return nil, nil, err
	}
	db := sql.OpenDB(conn) // never connected: DryRun executes nothing
	return gormDialector(db), db.Close, nil
}

// CastParam: MariaDB infers a parameter's type; CAST(? AS bigint) is a
// syntax error here (SIGNED, CHAR work), so the plain placeholder is
// used except where a type must be fixed.
func (mdDialect) CastParam(typ string) string {
	switch typ {
	case "bigint", "integer", "int":
		return "CAST(? AS SIGNED)"
	}
	return "?"
}

// lockName is the GET_LOCK name of this database and table prefix.
func lockName(env *dialect.Env) string {
	return "agentstore_migrate:" + strconv.FormatInt(env.MigrateLockKey, 16)
}

// MigrateLock: every MariaDB migration runs through ApplyNoTx (DDL
// commits implicitly), which takes GET_LOCK itself; inside a transaction
// (the index repair at head) GET_LOCK is taken on the transaction's
// connection and released by RELEASE_ALL_LOCKS at the next ApplyNoTx or
// when the connection closes. Here it is only a bounded wait for a
// concurrent migrator.
func (mdDialect) MigrateLock(tx *gorm.DB, env *dialect.Env) error {
	var got *int64
	if err := tx.Raw("SELECT GET_LOCK(?, 600)", lockName(env)).Scan(&got).Error; err != nil {
		return fmt.Errorf("take migration lock: %w", err)
	}
	if got == nil || *got != 1 {
		return &dialect.Fault{Kind: repo.ErrRetryable, Cause: errors.New("migration lock (GET_LOCK) not granted within 600 s")}
	}
	if err := tx.Exec("SELECT RELEASE_LOCK(?)", lockName(env)).Error; err != nil {
		return fmt.Errorf("release migration lock: %w", err)
	}
	return nil
}

// ClaimWaitSQL bounds the lock waits of a provider fetch's transaction
// (dialect.ClaimLockWaitSession): innodb_lock_wait_timeout is whole
// seconds (waitMS rounded up, at least 1) and a session setting that no
// SELECT can make, so set keeps the session's value (the DSN's, from
// WithLockTimeout, or the server's) in a user variable and reset restores
// it. A wait beyond the bound fails the statement (error 1205,
// ErrLockTimeout) and leaves the transaction open, as the fetch's
// savepoint-bounded claim steps expect.
func (mdDialect) ClaimWaitSQL(waitMS int64) (set, reset string) {
	secs := max(1, (waitMS+999)/1000)
	return "SET @agentstore_claim_wait = @@SESSION.innodb_lock_wait_timeout, @@SESSION.innodb_lock_wait_timeout = " + strconv.FormatInt(secs, 10),
		"SET @@SESSION.innodb_lock_wait_timeout = @agentstore_claim_wait"
}

// NewWaker: MariaDB has no LISTEN/NOTIFY.
func (mdDialect) NewWaker(*dialect.Env, func(string)) dialect.Waker { return nil }

// ApplyNoTx applies one migration on one connection under GET_LOCK (DDL
// commits implicitly in MariaDB, so no migration is a transaction): it
// re-reads the recorded version, then runs the statements in order; the
// last records the version. Every statement of the MariaDB chain can run
// again (IF NOT EXISTS / IF EXISTS forms, INSERT IGNORE of the version), so a
// step interrupted half-way is finished by the next Migrate.
func (mdDialect) ApplyNoTx(ctx context.Context, env *dialect.Env, version int64, stmts []string) error {
	conn, err := env.SQLDB.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, 600)", lockName(env)).Scan(&got); err != nil {
		return fmt.Errorf("take migration lock: %w", err)
	}
	if !got.Valid || got.Int64 != 1 {
		return &dialect.Fault{Kind: repo.ErrRetryable, Cause: errors.New("migration lock (GET_LOCK) not granted within 600 s")}
	}
	defer func() {
		_, _ = conn.ExecContext(context.WithoutCancel(ctx), "SELECT RELEASE_LOCK(?)", lockName(env))
	}()
	var exists int
	if err := conn.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?",
		env.Config.Prefix+models.TableSchemaVersion).Scan(&exists); err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	if exists > 0 {
		var cur sql.NullInt64
		if err := conn.QueryRowContext(ctx, "SELECT MAX(version) FROM "+env.Quote(models.TableSchemaVersion)).Scan(&cur); err != nil {
			return fmt.Errorf("read schema version: %w", err)
		}
		if cur.Valid && cur.Int64 >= version {
			return nil
		}
	}
	for _, st := range stmts {
		if _, err := conn.ExecContext(ctx, st); err != nil {
			return &dialect.StmtError{Stmt: st, Err: err}
		}
	}
	return nil
}

// IsConnectFailure: a failed dial is a *net.OpError (or the driver's
// invalid-connection error before any statement ran).
func (mdDialect) IsConnectFailure(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// TranslateDriverError maps MariaDB's error numbers onto the sentinels.
func (mdDialect) TranslateDriverError(err error) (error, bool) {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case 1062, 1586:
			// duplicate entry for a key
			return &dialect.Fault{Kind: repo.ErrConflict, Cause: err}, true
		case 1205:
			// innodb_lock_wait_timeout (WithLockTimeout, default 50 s)
			return &dialect.Fault{Kind: repo.ErrLockTimeout, Cause: err}, true
		case 1969:
			// max_statement_time (WithStatementTimeout) exceeded
			return &dialect.Fault{Kind: repo.ErrStatementTimeout, Cause: err}, true
		case 1213, 1020, 1040, 1053, 1927, 2006, 2013, 1317, 1180, 1181, 4031:
			// deadlock, record changed since last read, too many connections,
			// server shutdown, connection killed, server gone / lost,
			// query interrupted, commit/rollback failed, client timed out
			return &dialect.Fault{Kind: repo.ErrRetryable, Cause: err}, true
		case 1366, 1406, 4025, 1264, 1265, 1292, 3140, 1411, 1690, 1367, 1048:
			// incorrect string / data too long / CHECK (json_valid) failed /
			// out of range / truncated / bad datetime / invalid JSON / NULL
			// into NOT NULL
			return &dialect.Fault{Kind: repo.ErrInvalidInput, Cause: err}, true
		case 1451, 1452:
			// a referenced row is gone (or still referenced)
			return &dialect.Fault{Kind: repo.ErrNotFound, Cause: err}, true
		case 1146, 1054, 1305, 1191:
			// unknown table, column or function; no FULLTEXT index for
			// MATCH (the search index is missing: Verify reports it)
			return &dialect.Fault{Kind: dialect.ErrSchemaBehind, Cause: err}, true
		}
		return err, true
	}
	if errors.Is(err, mysql.ErrInvalidConn) || errors.Is(err, driver.ErrBadConn) {
		return &dialect.Fault{Kind: repo.ErrRetryable, Cause: err}, true
	}
	var op *net.OpError
	if errors.As(err, &op) {
		return &dialect.Fault{Kind: repo.ErrRetryable, Cause: err}, true
	}
	return nil, false
}

// The optional parts of the contract MariaDB implements.
var (
	_ dialect.DriverErrorTranslator    = mdDialect{}
	_ dialect.ConnectFailureClassifier = mdDialect{}
)

// GuardedAssign: ON DUPLICATE KEY UPDATE "col" = IF(guard holds,
// VALUES("col"), "col"). MariaDB evaluates the assignments left to right
// against the row as updated so far, so the guard column is never among
// them (assigning it first would leave a half-updated row).
func (mdDialect) GuardedAssign(col, guard string) string {
	return `IF("` + guard + `" = VALUES("` + guard + `"), VALUES("` + col + `"), "` + col + `")`
}

// KeepExisting: ON DUPLICATE KEY UPDATE "col" = "col" (INSERT IGNORE
// would also turn every other error into a warning).
func (mdDialect) KeepExisting(col string) string {
	return ` ON DUPLICATE KEY UPDATE "` + col + `" = "` + col + `"`
}

var _ dialect.Upserter = mdDialect{}

// upsertRE finds the parts of a PostgreSQL-style upsert RewriteUpsert
// rewrites.
var (
	insertAliasRE = regexp.MustCompile(`^(\s*INSERT INTO (?:"[^"]+"\.)?"[^"]+") AS (\w+) `)
	doNothingRE   = regexp.MustCompile(` ON CONFLICT \(\s*([A-Za-z_"]+)[^)]*\) DO NOTHING`)
	doUpdateRE    = regexp.MustCompile(` ON CONFLICT \([^)]*\) DO UPDATE SET `)
	excludedRE    = regexp.MustCompile(`\bexcluded\.("?\w+"?)`)
)

// RewriteUpsert rewrites the engine's INSERT ... ON CONFLICT (key) DO
// NOTHING / DO UPDATE SET c = excluded.c, ... (an unguarded upsert: no
// WHERE) as INSERT ... ON DUPLICATE KEY UPDATE: excluded.c becomes
// VALUES(c), the table's alias is dropped (its columns are the stored
// row's), DO NOTHING assigns the key's first column its inserted value
// (the same: it is the key; VALUES(c), not c, which an INSERT ... SELECT
// makes ambiguous). The
// engine's assignments read only columns they do not assign before, so
// MariaDB's left-to-right evaluation gives PostgreSQL's result.
func (mdDialect) RewriteUpsert(stmt string) string {
	if m := insertAliasRE.FindStringSubmatch(stmt); m != nil {
		stmt = m[1] + " " + stmt[len(m[0]):]
		stmt = regexp.MustCompile(`\b`+regexp.QuoteMeta(m[2])+`\.`).ReplaceAllString(stmt, "")
	}
	stmt = doNothingRE.ReplaceAllStringFunc(stmt, func(s string) string {
		c := doNothingRE.FindStringSubmatch(s)[1]
		if !strings.HasPrefix(c, `"`) {
			c = `"` + c + `"`
		}
		return ` ON DUPLICATE KEY UPDATE ` + c + ` = VALUES(` + c + `)`
	})
	if doUpdateRE.MatchString(stmt) {
		stmt = doUpdateRE.ReplaceAllString(stmt, ` ON DUPLICATE KEY UPDATE `)
		stmt = excludedRE.ReplaceAllString(stmt, `VALUES($1)`)
	}
	return stmt
}

// KeysetAfter implements dialect.KeysetExpander: MariaDB reads
// (a, b) > (x, y) as no range at all (the page after a cursor half-way
// scanned half the index: EXPLAIN ANALYZE r_rows 50,102 for 101 rows of
// 100,000 sessions), but a > x OR (a = x AND b > y) as two ranges of the
// (a, b) index (r_rows 101).
func (mdDialect) KeysetAfter(a, b string) string {
	return "(" + a + " > ? OR (" + a + " = ? AND " + b + " > ?))"
}

// ForceIndex implements dialect.PlanHinter. MariaDB 10.11 reads a page of
// one tenant's sessions after a cursor, tenant_id = ? AND (updated_at > ?
// OR (updated_at = ? AND id > ?)), as a ref access on tenant_id alone
// through the (tenant_id, updated_at) index, filtering the whole tenant
// before the cursor (EXPLAIN ANALYZE at 100,000 sessions: 448 pages for
// 101 rows, 25-60 ms); with the index forced it is a range over all three
// key parts (tenant_id, updated_at and the primary key id the index ends
// with): 0.3 ms.
func (mdDialect) ForceIndex(index string) string { return " FORCE INDEX (" + index + ")" }

// JoinInOrder implements dialect.PlanHinter: in a recursive CTE's step
// "FROM sessions c JOIN d ON c.parent_id = d.id" MariaDB 10.11 puts the
// sessions table first and reads all of it (an index scan, 100,020 rows at
// 100,000 sessions, for 20 expired ones); STRAIGHT_JOIN with d first reads
// the (parent_id, ...) index once per row of d.
func (mdDialect) JoinInOrder() string { return "STRAIGHT_JOIN" }

var _ dialect.PlanHinter = mdDialect{}
