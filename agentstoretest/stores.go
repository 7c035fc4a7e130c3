package agentstoretest

// The harnesses of agentstore Stores: SQLite, Postgres and
// PostgresPgBouncer, their Backend, DatabaseOps and StoreBackend (and, in
// stores_tx.go, TxBackend). These two are the suite's only files with SQL
// of their own or knowledge of a database: everything else drives the
// public interfaces.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
	"gorm.io/gorm/schema"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/models"
)

// SQLite returns the harness of a SQLite file per test in t.TempDir(),
// opened with opts.
func SQLite(opts ...agentstore.Option) Harness { return sqliteHarness{opts: opts} }

type sqliteHarness struct{ opts []agentstore.Option }

// NewBackend returns a new SQLite file in t.TempDir().
func (h sqliteHarness) NewBackend(t testing.TB) Backend {
	return &storeBackend{dsn: "sqlite:" + filepath.Join(t.TempDir(), "agentstore.db"), opts: h.opts}
}

// Postgres returns the harness of a fresh schema per test on the
// PostgreSQL database at dsn (postgres://... or key=value), created through
// an admin connection on the same DSN and dropped with CASCADE at the end of
// the test. opts are applied to every Store (do not pass WithSchema: the
// harness selects the test's schema). The DSN's user must be allowed to
// create schemas. For a DSN through PgBouncer in transaction pooling use
// PostgresPgBouncer.
func Postgres(dsn string, opts ...agentstore.Option) Harness {
	return &pgHarness{dsn: dsn, opts: opts}
}

// PostgresPgBouncer returns the harness of a fresh schema per test on the
// PostgreSQL database behind a PgBouncer (or other pooler) in transaction
// or session pooling at dsn, whose server directDSN reaches directly.
// Schemas are created and dropped through dsn; every Store is opened on
// dsn with agentstore.WithPgBouncer() and agentstore.WithDirectDSN(directDSN)
// (LISTEN and Migrate's CONCURRENTLY steps go there) before opts; a handle
// that counts round trips opens its own driver handle configured for the
// pooler (pgx QueryExecModeExec, no statement cache).
func PostgresPgBouncer(dsn, directDSN string, opts ...agentstore.Option) Harness {
	all := append([]agentstore.Option{agentstore.WithPgBouncer(), agentstore.WithDirectDSN(directDSN)}, opts...)
	return &pgHarness{dsn: dsn, opts: all, pooled: true}
}

type pgHarness struct {
	dsn    string
	opts   []agentstore.Option
	pooled bool
	once   sync.Once
	db     *sql.DB
	err    error
}

func (h *pgHarness) admin() (*sql.DB, error) {
	h.once.Do(func() {
		dsn := strings.TrimPrefix(h.dsn, "postgresql:")
		if strings.HasPrefix(h.dsn, "postgresql:") {
			dsn = "postgres:" + dsn
		}
		h.db, h.err = openAdmin("pgx", dsn)
	})
	return h.db, h.err
}

// NewBackend creates a schema private to t.
func (h *pgHarness) NewBackend(t testing.TB) Backend {
	t.Helper()
	db, err := h.admin()
	if err != nil {
		t.Fatalf("agentstoretest: PostgreSQL at %s: %v", agentstore.RedactDSN(h.dsn), err)
	}
	schema := "t_" + strings.ReplaceAll(uuid.NewString(), "-", "")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = db.ExecContext(ctx, `DROP SCHEMA IF EXISTS "`+schema+`" CASCADE`)
	})
	opts := append([]agentstore.Option{agentstore.WithSchema(schema)}, h.opts...)
	return &storeBackend{dsn: h.dsn, opts: opts, pg: true, pooled: h.pooled}
}

// MariaDB returns the harness of a fresh database per test on the MariaDB
// server of dsn (mysql://user:pw@host:port/db, mariadb://... or the
// go-sql-driver form user:pw@tcp(host:port)/db): a database named
// maria_<random> is created through an admin connection on dsn and dropped
// at the end of the test. The DSN's user must be allowed to create
// databases. opts are applied to every Store.
func MariaDB(dsn string, opts ...agentstore.Option) Harness {
	return &mariaHarness{dsn: dsn, opts: opts}
}

type mariaHarness struct {
	dsn  string
	opts []agentstore.Option
	once sync.Once
	db   *sql.DB
	err  error
}

// withDatabase returns dsn with its database replaced by name.
func withDatabase(dsn, name string) (string, error) {
	if i := strings.Index(dsn, "://"); i >= 0 {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", err
		}
		u.Path = "/" + name
		return u.String(), nil
	}
	c, err := mysql.ParseDSN(dsn)
	if err != nil {
		return "", err
	}
	c.DBName = name
	return c.FormatDSN(), nil
}

func (h *mariaHarness) admin() (*sql.DB, error) {
	h.once.Do(func() {
		_, target, err := agentstore.ParseDSN(h.dsn)
		if err != nil {
			h.err = err
			return
		}
		h.db, h.err = openAdmin("mysql", target)
	})
	return h.db, h.err
}

// openAdmin opens a harness's admin connection with driver and checks it
// answers within 10 s.
func openAdmin(driver, dsn string) (*sql.DB, error) {
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, err
	}
	return db, nil
}

// NewBackend creates a database private to t.
func (h *mariaHarness) NewBackend(t testing.TB) Backend {
	t.Helper()
	db, err := h.admin()
	if err != nil {
		t.Fatalf("agentstoretest: MariaDB at %s: %v", agentstore.RedactDSN(h.dsn), err)
	}
	name := "maria_" + strings.ReplaceAll(uuid.NewString(), "-", "")[:24]
	if _, err := db.Exec("CREATE DATABASE `" + name + "` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"); err != nil {
		t.Fatalf("agentstoretest: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		_, _ = db.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+name+"`")
	})
	dsn, err := withDatabase(h.dsn, name)
	if err != nil {
		t.Fatalf("agentstoretest: MariaDB DSN %s: %v", agentstore.RedactDSN(h.dsn), err)
	}
	return &storeBackend{dsn: dsn, opts: h.opts, jsonCheck: true}
}

// storeBackend is one test's database: Stores opened on dsn with opts.
type storeBackend struct {
	dsn       string
	opts      []agentstore.Option
	jsonCheck bool // MariaDB: the JSON columns' CHECK (json_valid) refuses invalid JSON
	pg        bool // PostgreSQL (pgx): JSON columns validate, round trips can be counted
	pooled    bool // dsn goes through a transaction pooler

	mu        sync.Mutex
	migrated  map[string]bool // table prefixes migrated on this database
	appTables map[string]bool // table prefixes whose application table exists (stores_tx.go)
}

// storeHandle is an agentstore Store as a handle of the suite.
type storeHandle struct{ *agentstore.Store }

// ForTenant returns the Store's tenant view.
func (s storeHandle) ForTenant(tenant string) TenantView { return s.Store.ForTenant(tenant) }

// storeOf returns the agentstore Store behind a handle this file made.
func storeOf(st Store) (*agentstore.Store, error) {
	if h, ok := st.(storeHandle); ok {
		return h.Store, nil
	}
	return nil, fmt.Errorf("%w: %T is not a handle of an agentstore harness", ErrNotSupported, st)
}

// options returns the Store options of cfg (after the backend's own); sl
// is cfg's statement logger (nil without OnStatement).
func (b *storeBackend) options(cfg Config, sl *stmtLogger) []agentstore.Option {
	opts := append([]agentstore.Option(nil), b.opts...)
	if cfg.TablePrefix != "" {
		opts = append(opts, agentstore.WithTablePrefix(cfg.TablePrefix))
	}
	if cfg.Clock != nil {
		opts = append(opts, agentstore.WithClock(cfg.Clock))
	}
	if cfg.PollInterval != 0 {
		opts = append(opts, agentstore.WithPollInterval(cfg.PollInterval))
	}
	if cfg.LockTimeout != 0 {
		opts = append(opts, agentstore.WithLockTimeout(cfg.LockTimeout))
	}
	if cfg.StatementTimeout != 0 {
		opts = append(opts, agentstore.WithStatementTimeout(cfg.StatementTimeout))
	}
	if cfg.MaxContentBytes != 0 {
		opts = append(opts, agentstore.WithMaxContentBytes(cfg.MaxContentBytes))
	}
	if cfg.MaxConns != 0 {
		opts = append(opts, agentstore.WithPool(agentstore.PoolConfig{MaxOpenConns: cfg.MaxConns, MinIdleConns: 1}))
	}
	if sl != nil {
		opts = append(opts, agentstore.WithLogger(sl))
	}
	if cfg.ContentCodec != nil {
		opts = append(opts, agentstore.WithContentCodec(cfg.ContentCodec))
	}
	return opts
}

// Open opens a Store configured by cfg and migrates its tables (once per
// table prefix and database).
func (b *storeBackend) Open(t testing.TB, cfg Config) (Store, error) {
	t.Helper()
	var sl *stmtLogger
	if cfg.OnStatement != nil {
		sl = &stmtLogger{on: cfg.OnStatement}
	}
	var st *agentstore.Store
	var err error
	if cfg.OnRoundTrip != nil {
		st, err = b.openCounted(t, cfg, sl)
	} else {
		st, err = agentstore.Open(context.Background(), b.dsn, b.options(cfg, sl)...)
	}
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = st.Close() })
	if sl != nil {
		sl.setPrefix(st.TablePrefix())
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.migrated[st.TablePrefix()] {
		if err := st.Migrate(context.Background()); err != nil {
			return nil, fmt.Errorf("migrate: %w", err)
		}
		if b.migrated == nil {
			b.migrated = map[string]bool{}
		}
		b.migrated[st.TablePrefix()] = true
	}
	return storeHandle{st}, nil
}

// openCounted opens a PostgreSQL Store (with New, on its own pgx handle)
// whose connections report every statement to cfg.OnRoundTrip.
func (b *storeBackend) openCounted(t testing.TB, cfg Config, sl *stmtLogger) (*agentstore.Store, error) {
	if !b.pg {
		return nil, fmt.Errorf("%w: counting round trips needs the pgx driver (PostgreSQL)", ErrNotSupported)
	}
	pc, err := pgx.ParseConfig(b.dsn)
	if err != nil {
		return nil, err
	}
	if b.pooled { // as agentstore.WithPgBouncer configures its own handles
		pc.DefaultQueryExecMode = pgx.QueryExecModeExec
		pc.StatementCacheCapacity, pc.DescriptionCacheCapacity = 0, 0
	}
	pc.Tracer = roundTripTracer(cfg.OnRoundTrip)
	sqlDB := stdlib.OpenDB(*pc)
	t.Cleanup(func() { _ = sqlDB.Close() })
	gdb, err := gorm.Open(postgres.New(postgres.Config{Conn: sqlDB}), &gorm.Config{})
	if err != nil {
		return nil, err
	}
	st, err := agentstore.New(gdb, b.options(cfg, sl)...)
	if errors.Is(err, agentstore.ErrInvalidConfig) {
		return nil, fmt.Errorf("%w: counting round trips needs agentstore.New, which refuses this harness's options: %v", ErrNotSupported, err)
	}
	return st, err
}

// roundTripTracer is a pgx query tracer: it reports every statement sent
// on the wire, BEGIN and COMMIT included (pgx sends them as statements),
// except the coalesced LISTEN/NOTIFY publisher's (its NOTIFY and its
// presence query on pg_stat_activity), which runs in the background off
// the calls' paths.
type roundTripTracer func(Statement)

// TraceQueryStart implements pgx.QueryTracer.
func (f roundTripTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if !strings.Contains(d.SQL, "pg_notify") && !strings.Contains(d.SQL, "pg_stat_activity") {
		up := strings.ToUpper(strings.TrimSpace(d.SQL))
		f(Statement{Text: d.SQL,
			TxControl: up == "BEGIN" || strings.HasPrefix(up, "BEGIN ") || up == "COMMIT" || strings.HasPrefix(up, "SET LOCAL")})
	}
	return ctx
}

// TraceQueryEnd implements pgx.QueryTracer.
func (roundTripTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// OpenStore opens an agentstore Store on the database, not migrated.
func (b *storeBackend) OpenStore(t testing.TB, opts ...agentstore.Option) (*agentstore.Store, Store, error) {
	t.Helper()
	st, err := agentstore.Open(context.Background(), b.dsn, append(append([]agentstore.Option(nil), b.opts...), opts...)...)
	if err != nil {
		return nil, nil, err
	}
	t.Cleanup(func() { _ = st.Close() })
	return st, storeHandle{st}, nil
}

// stmtLogger is a GORM logger that reports every statement as a Statement.
type stmtLogger struct {
	on     func(Statement)
	mu     sync.Mutex
	prefix string
}

func (l *stmtLogger) setPrefix(p string) {
	l.mu.Lock()
	l.prefix = p
	l.mu.Unlock()
}

func (l *stmtLogger) LogMode(logger.LogLevel) logger.Interface { return l }
func (l *stmtLogger) Info(context.Context, string, ...any)     {}
func (l *stmtLogger) Warn(context.Context, string, ...any)     {}
func (l *stmtLogger) Error(context.Context, string, ...any)    {}

// Trace reports the statement.
func (l *stmtLogger) Trace(_ context.Context, _ time.Time, fc func() (string, int64), _ error) {
	text, rows := fc()
	l.mu.Lock()
	prefix := l.prefix
	l.mu.Unlock()
	up := strings.ToUpper(strings.TrimSpace(text))
	l.on(Statement{Text: text, Rows: rows, Writes: writeTargets(text, prefix),
		Query:  strings.HasPrefix(up, "SELECT") || strings.HasPrefix(up, "WITH"),
		Delete: strings.HasPrefix(up, "DELETE")})
}

// writeTargets returns the base names (without prefix, schema or quotes)
// of the store's tables statement q writes: the table after each INSERT
// INTO, UPDATE and DELETE FROM, in WITH items too. A table it only reads
// (FROM, JOIN, a subquery, FOR UPDATE) is not one.
func writeTargets(q, prefix string) []string {
	up := strings.ToUpper(q)
	var out []string
	for _, kw := range []string{"INSERT INTO ", "UPDATE ", "DELETE FROM "} {
		for i := 0; ; {
			j := strings.Index(up[i:], kw)
			if j < 0 {
				break
			}
			at := i + j
			i = at + len(kw)
			if at > 0 && (up[at-1] == '_' || up[at-1] >= 'A' && up[at-1] <= 'Z' || up[at-1] >= '0' && up[at-1] <= '9') {
				continue // part of a longer word
			}
			name := strings.TrimLeft(q[i:], " ")
			if e := strings.IndexAny(name, " (\n\t"); e >= 0 {
				name = name[:e]
			}
			if d := strings.LastIndexByte(name, '.'); d >= 0 {
				name = name[d+1:]
			}
			name = strings.Trim(name, "\"`")
			if strings.HasPrefix(name, prefix) {
				out = append(out, strings.TrimPrefix(name, prefix))
			}
		}
	}
	return out
}

// quoted returns the quoted, qualified name of table base of st.
func quoted(st *agentstore.Store, base string) string {
	name := `"` + st.TablePrefix() + base + `"`
	if st.Schema() != "" {
		return `"` + st.Schema() + `".` + name
	}
	return name
}

// quoteColumn quotes a column name (they are the models' own).
func quoteColumn(c string) string { return `"` + c + `"` }

// where renders w as a condition and its arguments ("1 = 1" when empty).
func where(w Row) (string, []any) {
	if len(w) == 0 {
		return "1 = 1", nil
	}
	cols := make([]string, 0, len(w))
	for c := range w {
		cols = append(cols, c)
	}
	sort.Strings(cols)
	var conds []string
	var args []any
	for _, c := range cols {
		conds = append(conds, quoteColumn(c)+" = ?")
		args = append(args, w[c])
	}
	return strings.Join(conds, " AND "), args
}

// execOn runs the statement q builds on st's database.
func execOn(ctx context.Context, st Store, q func(s *agentstore.Store) (string, []any)) error {
	s, err := storeOf(st)
	if err != nil {
		return err
	}
	text, args := q(s)
	return s.DB(ctx).Exec(text, args...).Error
}

// Insert stores row in table.
func (b *storeBackend) Insert(ctx context.Context, st Store, table string, row Row) error {
	return execOn(ctx, st, func(s *agentstore.Store) (string, []any) {
		cols := make([]string, 0, len(row))
		for c := range row {
			cols = append(cols, c)
		}
		sort.Strings(cols)
		var names, marks []string
		var args []any
		for _, c := range cols {
			names, marks, args = append(names, quoteColumn(c)), append(marks, "?"), append(args, row[c])
		}
		return "INSERT INTO " + quoted(s, table) + " (" + strings.Join(names, ", ") + ") VALUES (" + strings.Join(marks, ", ") + ")", args
	})
}

// Update sets the columns of set on the selected rows.
func (b *storeBackend) Update(ctx context.Context, st Store, table string, w, set Row) error {
	return execOn(ctx, st, func(s *agentstore.Store) (string, []any) {
		cols := make([]string, 0, len(set))
		for c := range set {
			cols = append(cols, c)
		}
		sort.Strings(cols)
		var sets []string
		var args []any
		for _, c := range cols {
			sets, args = append(sets, quoteColumn(c)+" = ?"), append(args, set[c])
		}
		cond, wargs := where(w)
		return "UPDATE " + quoted(s, table) + " SET " + strings.Join(sets, ", ") + " WHERE " + cond, append(args, wargs...)
	})
}

// Delete deletes the selected rows.
func (b *storeBackend) Delete(ctx context.Context, st Store, table string, w Row) error {
	return execOn(ctx, st, func(s *agentstore.Store) (string, []any) {
		cond, args := where(w)
		return "DELETE FROM " + quoted(s, table) + " WHERE " + cond, args
	})
}

// Count counts the selected rows.
func (b *storeBackend) Count(ctx context.Context, st Store, table string, w Row) (int64, error) {
	s, err := storeOf(st)
	if err != nil {
		return 0, err
	}
	cond, args := where(w)
	var n int64
	err = s.DB(ctx).Raw("SELECT COUNT(*) FROM "+quoted(s, table)+" WHERE "+cond, args...).Scan(&n).Error
	return n, err
}

// primaryKeyOrder returns the ORDER BY list of the primary key of the
// model whose table is base.
func primaryKeyOrder(base string) (string, error) {
	for _, m := range models.All() {
		sch, err := modelInfo(m, "")
		if err != nil {
			return "", err
		}
		if sch.Table != base {
			continue
		}
		var cols []string
		for _, f := range sch.PrimaryFields {
			cols = append(cols, quoteColumn(f.DBName))
		}
		if len(cols) == 0 {
			return "", fmt.Errorf("table %s has no primary key", base)
		}
		return strings.Join(cols, ", "), nil
	}
	return "", fmt.Errorf("no model has the table %s", base)
}

// Values reads column of the selected rows as text, in primary-key order.
func (b *storeBackend) Values(ctx context.Context, st Store, table string, w Row, column string) ([]string, error) {
	s, err := storeOf(st)
	if err != nil {
		return nil, err
	}
	order, err := primaryKeyOrder(table)
	if err != nil {
		return nil, err
	}
	cond, args := where(w)
	rows, err := s.DB(ctx).Raw("SELECT "+quoteColumn(column)+" FROM "+quoted(s, table)+" WHERE "+cond+" ORDER BY "+order, args...).Rows()
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v sql.NullString
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v.String)
	}
	return out, rows.Err()
}

// DropTable drops table.
func (b *storeBackend) DropTable(ctx context.Context, st Store, table string) error {
	return execOn(ctx, st, func(s *agentstore.Store) (string, []any) { return "DROP TABLE " + quoted(s, table), nil })
}

// RefreshStatistics runs ANALYZE on each table.
func (b *storeBackend) RefreshStatistics(ctx context.Context, st Store, tables ...string) error {
	for _, table := range tables {
		if err := execOn(ctx, st, func(s *agentstore.Store) (string, []any) {
			if s.Dialect() == agentstore.MariaDB {
				return "ANALYZE TABLE " + quoted(s, table), nil
			}
			return "ANALYZE " + quoted(s, table), nil
		}); err != nil {
			return err
		}
	}
	return nil
}

// LockRows locks the selected rows in a transaction — SELECT ... FOR
// UPDATE on a database with row locks, an update of the rows to
// themselves (the database write lock) on SQLite — and holds the lock
// while hold runs.
func (b *storeBackend) LockRows(ctx context.Context, st Store, table string, w Row, hold func()) error {
	s, err := storeOf(st)
	if err != nil {
		return err
	}
	if len(w) == 0 {
		return fmt.Errorf("LockRows of %s: no column selects the rows", table)
	}
	cond, args := where(w)
	col := slices.Sorted(maps.Keys(w))[0]
	return s.DB(ctx).Transaction(func(tx *gorm.DB) error {
		var n int64
		if s.Capabilities().Has(agentstore.CapRowLocks) {
			var got []int
			if err := tx.Raw("SELECT 1 FROM "+quoted(s, table)+" WHERE "+cond+" FOR UPDATE", args...).Scan(&got).Error; err != nil {
				return err
			}
			n = int64(len(got))
		} else {
			res := tx.Exec("UPDATE "+quoted(s, table)+" SET "+quoteColumn(col)+" = "+quoteColumn(col)+" WHERE "+cond, args...)
			if res.Error != nil {
				return res.Error
			}
			n = res.RowsAffected
		}
		if n == 0 {
			return fmt.Errorf("LockRows of %s: no row %v", table, w)
		}
		hold()
		return nil
	})
}

// LockTable locks table against other transactions' writes in a
// transaction (PostgreSQL: LOCK TABLE ... IN EXCLUSIVE MODE; SQLite: an
// empty DELETE, which takes the database write lock; other dialects: every
// row FOR UPDATE), holds the lock while hold runs, then rolls back.
func (b *storeBackend) LockTable(ctx context.Context, st Store, table string, hold func()) error {
	s, err := storeOf(st)
	if err != nil {
		return err
	}
	errRollback := errors.New("agentstoretest: roll back")
	err = s.DB(ctx).Transaction(func(tx *gorm.DB) error {
		var err error
		switch s.Dialect() {
		case agentstore.Postgres:
			err = tx.Exec("LOCK TABLE " + quoted(s, table) + " IN EXCLUSIVE MODE").Error
		case agentstore.SQLite:
			err = tx.Exec("DELETE FROM " + quoted(s, table) + " WHERE 1 = 0").Error
		default:
			err = tx.Exec("SELECT * FROM " + quoted(s, table) + " FOR UPDATE").Error
		}
		if err != nil {
			return err
		}
		hold()
		return errRollback
	}, lockTableTxOptions(s))
	if errors.Is(err, errRollback) {
		return nil
	}
	return err
}

// lockTableTxOptions: on MariaDB the holding transaction is REPEATABLE
// READ, whose FOR UPDATE takes next-key locks (the gaps and the end of the
// index too), so it holds inserts as well as updates; under the Store's
// READ COMMITTED it would lock only the rows that exist (none in an empty
// table).
func lockTableTxOptions(s *agentstore.Store) *sql.TxOptions {
	if s.Dialect() == agentstore.MariaDB {
		return &sql.TxOptions{Isolation: sql.LevelRepeatableRead}
	}
	return nil
}

// BeforeStatement registers GORM callbacks before every raw statement,
// row query and query of st that pass the statement's text to hook.
func (b *storeBackend) BeforeStatement(st Store, hook func(text string)) error {
	s, err := storeOf(st)
	if err != nil {
		return err
	}
	cb := s.DB(context.Background()).Callback()
	name := "agentstoretest:before:" + uuid.NewString()
	fn := func(tx *gorm.DB) { hook(tx.Statement.SQL.String()) }
	if err := cb.Row().Before("gorm:row").Register(name, fn); err != nil {
		return err
	}
	if err := cb.Raw().Before("gorm:raw").Register(name, fn); err != nil {
		return err
	}
	return cb.Query().Before("gorm:query").Register(name, fn)
}

// UnreadableTimestamp appends "x" to the stored text of column on SQLite,
// whose columns hold any type; other databases refuse it (false).
func (b *storeBackend) UnreadableTimestamp(ctx context.Context, st Store, table string, w Row, column string) (bool, error) {
	s, err := storeOf(st)
	if err != nil {
		return false, err
	}
	if s.Dialect() != agentstore.SQLite {
		return false, nil
	}
	cond, args := where(w)
	c := quoteColumn(column)
	return true, s.DB(ctx).Exec("UPDATE "+quoted(s, table)+" SET "+c+" = CAST("+c+" AS TEXT) || 'x' WHERE "+cond, args...).Error
}

// InjectFault registers a GORM callback before every row query of st.
func (b *storeBackend) InjectFault(st Store, fault func() error) error {
	s, err := storeOf(st)
	if err != nil {
		return err
	}
	return s.DB(context.Background()).Callback().Row().Before("gorm:row").Register("agentstoretest:fault:"+uuid.NewString(), func(tx *gorm.DB) {
		if err := fault(); err != nil {
			_ = tx.AddError(err)
		}
	})
}

// ValidatesJSON: PostgreSQL's json and jsonb columns and MariaDB's
// json_valid CHECKs refuse invalid JSON; SQLite stores text.
func (b *storeBackend) ValidatesJSON() bool { return b.pg || b.jsonCheck }

// ApplyFix runs fix on st's pool, one statement per call on every dialect
// (SchemaIssue.Fix ends each statement of a multi-statement fix with ";"
// at a line's end): MariaDB's driver (no multiStatements), PostgreSQL's
// extended protocol and Citus take one statement per call (execOne).
func (b *storeBackend) ApplyFix(ctx context.Context, st Store, fix string) error {
	s, err := storeOf(st)
	if err != nil {
		return err
	}
	for _, stmt := range strings.Split(strings.TrimSuffix(strings.TrimSpace(fix), ";"), ";\n") {
		if err := b.execOne(ctx, s, stmt); err != nil {
			return fmt.Errorf("%s: %w", stmt, err)
		}
	}
	return nil
}

// execOne runs one statement of a fix. On PostgreSQL it is prepared first
// (the extended protocol, which Citus and statement-caching drivers use and
// which refuses several commands in one statement; pgx sends a statement
// without arguments by the simple protocol), so a fix that packs two
// statements into one line fails here as it would there. Not behind a
// transaction pooler, where the prepare and the execution may reach two
// server connections.
func (b *storeBackend) execOne(ctx context.Context, s *agentstore.Store, stmt string) error {
	if s.Dialect() != agentstore.Postgres || b.pooled {
		_, err := s.SQLDB().ExecContext(ctx, stmt)
		return err
	}
	ps, err := s.SQLDB().PrepareContext(ctx, stmt)
	if err != nil {
		return err
	}
	defer ps.Close()
	_, err = ps.ExecContext(ctx)
	return err
}

// modelInfo parses a model with the naming of prefix (no schema).
func modelInfo(m any, prefix string) (*schema.Schema, error) {
	return schema.Parse(m, &sync.Map{}, models.NewNamer(prefix, ""))
}

// plainColumn returns the first column of sch that is not part of the
// primary key, an index (or an index predicate) or a foreign key and
// satisfies ok: a column a test may drop or alter without side effects.
func plainColumn(sch *schema.Schema, ok func(f *schema.Field) bool) (string, error) {
	busy := map[string]bool{}
	var preds []string
	for _, idx := range sch.ParseIndexes() {
		for _, f := range idx.Fields {
			busy[f.DBName] = true
		}
		preds = append(preds, idx.Where)
	}
	for _, rel := range sch.Relationships.Relations {
		for _, r := range rel.References {
			busy[r.ForeignKey.DBName] = true
		}
	}
	for _, name := range sch.DBNames {
		f := sch.FieldsByDBName[name]
		inPred := slices.ContainsFunc(preds, func(p string) bool { return strings.Contains(p, name) })
		if !f.PrimaryKey && !busy[name] && !inPred && ok(f) {
			return name, nil
		}
	}
	return "", fmt.Errorf("model %s has no plain column for this test", sch.Name)
}

// fkName returns the name of the first foreign key the model declares.
func fkName(sch *schema.Schema) (string, error) {
	for _, rel := range sch.Relationships.Relations {
		if c := rel.ParseConstraint(); c != nil && c.Schema == sch {
			return c.Name, nil
		}
	}
	return "", fmt.Errorf("model %s has no foreign key", sch.Name)
}

// rebuildSQLiteTable recreates table with the CREATE TABLE statement
// edited by edit, copying the rows and recreating its indexes: SQLite can
// alter a column's type or constraints only this way.
func rebuildSQLiteTable(ctx context.Context, db *sql.DB, table string, edit func(string) string) error {
	var create string
	if err := db.QueryRowContext(ctx, `SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?`, table).Scan(&create); err != nil {
		return err
	}
	edited := edit(create)
	if edited == create {
		return fmt.Errorf("rebuild of %s: edit changed nothing in %s", table, create)
	}
	tmp := table + "_rebuild"
	edited = regexp.MustCompile("^CREATE TABLE [`\"]?"+table+"[`\"]?").ReplaceAllString(edited, "CREATE TABLE `"+tmp+"`")
	rows, err := db.QueryContext(ctx, `SELECT sql FROM sqlite_master WHERE type = 'index' AND tbl_name = ? AND sql IS NOT NULL`, table)
	if err != nil {
		return err
	}
	var indexes []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			rows.Close()
			return err
		}
		indexes = append(indexes, s)
	}
	rows.Close()
	stmts := []string{edited,
		fmt.Sprintf("INSERT INTO `%s` SELECT * FROM `%s`", tmp, table),
		fmt.Sprintf("DROP TABLE `%s`", table),
		fmt.Sprintf("ALTER TABLE `%s` RENAME TO `%s`", tmp, table)}
	for _, s := range append(stmts, indexes...) {
		if _, err := db.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("rebuild %s: %s: %w", table, s, err)
		}
	}
	return nil
}

// DamageSchema damages st's migrated schema in every way Verify checks
// (dropped index, partial index without its predicate, descending index
// made ascending, unique index made plain, an auto-increment key without
// its sequence where keys have sequences, dropped column, changed column
// type, lost NOT NULL, missing foreign key, foreign key without ON DELETE
// CASCADE, dropped table) and returns the issues Verify must report. A
// database without ALTER COLUMN (CapAlterColumns) has its tables rebuilt.
func (b *storeBackend) DamageSchema(ctx context.Context, st Store) (want []string, err error) {
	s, err := storeOf(st)
	if err != nil {
		return nil, err
	}
	prefix := s.TablePrefix()
	db := s.SQLDB()
	var failed error
	exec := func(q string) {
		if failed != nil {
			return
		}
		if _, err := db.ExecContext(ctx, q); err != nil {
			failed = fmt.Errorf("%s: %w", q, err)
		}
	}
	q := func(base string) string { return quoted(s, base) }
	maria := s.Dialect() == agentstore.MariaDB
	dropIndex := func(base, name string) { // an index belongs to its table on MariaDB
		switch {
		case maria:
			exec(fmt.Sprintf(`DROP INDEX "%s" ON %s`, name, q(base)))
		case s.Schema() != "":
			exec(`DROP INDEX "` + s.Schema() + `"."` + name + `"`)
		default:
			exec(`DROP INDEX "` + name + `"`)
		}
	}
	// modify restates a MariaDB column's definition: its type (typ, or
	// the live one when ""), its DEFAULT kept, NOT NULL or not.
	modify := func(base, col, typ string, notNull bool) {
		if failed != nil {
			return
		}
		var live string
		var def *string
		if err := db.QueryRowContext(ctx, `SELECT column_type, column_default FROM information_schema.columns
			WHERE table_schema = DATABASE() AND table_name = ? AND column_name = ?`, prefix+base, col).Scan(&live, &def); err != nil {
			failed = fmt.Errorf("read column %s.%s: %w", base, col, err)
			return
		}
		if typ == "" {
			typ = live
		}
		stmt := fmt.Sprintf(`ALTER TABLE %s MODIFY COLUMN "%s" %s`, q(base), col, typ)
		if notNull {
			stmt += " NOT NULL"
		} else {
			stmt += " NULL"
		}
		if def != nil && *def != "NULL" {
			d := *def
			if !strings.HasPrefix(d, "'") {
				d = "'" + d + "'" // a number kept for a text column
			}
			stmt += " DEFAULT " + d
		}
		exec(stmt)
	}
	expect := func(kind agentstore.IssueKind, base, object string) {
		want = append(want, fmt.Sprintf("%s %s %s", kind, prefix+base, object))
	}
	schemas := map[string]*schema.Schema{}
	for _, m := range []any{&models.Session{}, &models.QueueItem{}, &models.Message{}, &models.OrchestratorQueueItem{},
		&models.Todo{}, &models.Compact{}, &models.Summary{}, &models.Plan{}} {
		sch, err := modelInfo(m, prefix)
		if err != nil {
			return nil, err
		}
		schemas[fmt.Sprintf("%T", m)] = sch
	}
	info := func(m any) *schema.Schema { return schemas[fmt.Sprintf("%T", m)] }

	// A dropped index.
	sess := info(&models.Session{})
	var plainIdx, partialIdx *schema.Index
	for _, idx := range sess.ParseIndexes() {
		if idx.Where == "" && idx.Class == "" && plainIdx == nil {
			plainIdx = idx
		}
		if idx.Where != "" && partialIdx == nil {
			partialIdx = idx
		}
	}
	dropIndex(models.TableSessions, plainIdx.Name)
	expect(agentstore.IssueMissingIndex, models.TableSessions, plainIdx.Name)

	// A partial index recreated without its predicate (where the database
	// has partial indexes: MariaDB's are full indexes).
	if partialIdx != nil && s.Capabilities().Has(agentstore.CapPartialIndexes) {
		dropIndex(models.TableSessions, partialIdx.Name)
		exec(fmt.Sprintf(`CREATE INDEX "%s" ON %s ("%s")`, partialIdx.Name, q(models.TableSessions), partialIdx.Fields[0].DBName))
		expect(agentstore.IssueIndexMismatch, models.TableSessions, partialIdx.Name)
	}

	// An index with a descending column recreated all ascending.
	for _, idx := range info(&models.QueueItem{}).ParseIndexes() {
		var cols []string
		desc := false
		for _, f := range idx.Fields {
			cols = append(cols, `"`+f.DBName+`"`)
			desc = desc || strings.EqualFold(f.Sort, "desc")
		}
		if desc {
			dropIndex(models.TableQueue, idx.Name)
			exec(fmt.Sprintf(`CREATE INDEX "%s" ON %s (%s)`, idx.Name, q(models.TableQueue), strings.Join(cols, ", ")))
			expect(agentstore.IssueIndexMismatch, models.TableQueue, idx.Name)
			break
		}
	}

	// A unique index recreated without UNIQUE.
	for _, idx := range info(&models.Message{}).ParseIndexes() {
		if idx.Class != "UNIQUE" {
			continue
		}
		var cols []string
		for _, f := range idx.Fields {
			cols = append(cols, `"`+f.DBName+`"`)
		}
		dropIndex(models.TableMessages, idx.Name)
		exec(fmt.Sprintf(`CREATE INDEX "%s" ON %s (%s)`, idx.Name, q(models.TableMessages), strings.Join(cols, ", ")))
		expect(agentstore.IssueIndexMismatch, models.TableMessages, idx.Name)
		break
	}

	// An auto-increment key that lost its sequence (PostgreSQL keys have
	// one, MariaDB's AUTO_INCREMENT; SQLite's are the rowid).
	if oq := info(&models.OrchestratorQueueItem{}); s.Dialect() == agentstore.Postgres {
		exec(fmt.Sprintf(`ALTER TABLE %s ALTER COLUMN "%s" DROP DEFAULT`, q(models.TableOrchestratorQueue), oq.PrioritizedPrimaryField.DBName))
		expect(agentstore.IssueColumnTypeMismatch, models.TableOrchestratorQueue, oq.PrioritizedPrimaryField.DBName)
	} else if maria {
		modify(models.TableOrchestratorQueue, oq.PrioritizedPrimaryField.DBName, "", true)
		expect(agentstore.IssueColumnTypeMismatch, models.TableOrchestratorQueue, oq.PrioritizedPrimaryField.DBName)
	}

	// A dropped column (SQLite >= 3.35 drops plain columns in place).
	dropCol, err := plainColumn(info(&models.Message{}), func(f *schema.Field) bool { return !f.NotNull })
	if err != nil {
		return nil, err
	}
	exec(fmt.Sprintf(`ALTER TABLE %s DROP COLUMN "%s"`, q(models.TableMessages), dropCol))
	expect(agentstore.IssueMissingColumn, models.TableMessages, dropCol)

	// A changed column type: an integer column becomes text.
	typeCol, err := plainColumn(info(&models.Todo{}), func(f *schema.Field) bool { return f.DataType == schema.Int })
	if err != nil {
		return nil, err
	}
	// A column that lost NOT NULL.
	nullCol, err := plainColumn(info(&models.Compact{}), func(f *schema.Field) bool { return f.NotNull })
	if err != nil {
		return nil, err
	}
	// A missing foreign key, and one without ON DELETE CASCADE.
	dropFK, err := fkName(info(&models.Summary{}))
	if err != nil {
		return nil, err
	}
	weakFK, err := fkName(info(&models.Plan{}))
	if err != nil {
		return nil, err
	}
	if maria {
		modify(models.TableTodos, typeCol, "text", true)
		modify(models.TableCompacts, nullCol, "", false)
		exec(fmt.Sprintf(`ALTER TABLE %s DROP FOREIGN KEY "%s"`, q(models.TableSummaries), dropFK))
		exec(fmt.Sprintf(`ALTER TABLE %s DROP FOREIGN KEY "%s"`, q(models.TablePlans), weakFK))
		exec(fmt.Sprintf(`ALTER TABLE %s ADD CONSTRAINT "%s" FOREIGN KEY ("session_id") REFERENCES %s ("id")`,
			q(models.TablePlans), weakFK, q(models.TableSessions)))
	} else if s.Capabilities().Has(agentstore.CapAlterColumns) {
		exec(fmt.Sprintf(`ALTER TABLE %s ALTER COLUMN "%s" TYPE text`, q(models.TableTodos), typeCol))
		exec(fmt.Sprintf(`ALTER TABLE %s ALTER COLUMN "%s" DROP NOT NULL`, q(models.TableCompacts), nullCol))
		exec(fmt.Sprintf(`ALTER TABLE %s DROP CONSTRAINT "%s"`, q(models.TableSummaries), dropFK))
		exec(fmt.Sprintf(`ALTER TABLE %s DROP CONSTRAINT "%s"`, q(models.TablePlans), weakFK))
		exec(fmt.Sprintf(`ALTER TABLE %s ADD CONSTRAINT "%s" FOREIGN KEY ("session_id") REFERENCES %s ("id")`,
			q(models.TablePlans), weakFK, q(models.TableSessions)))
	} else {
		for _, r := range []struct {
			base string
			edit func(string) string
		}{
			{models.TableTodos, func(s string) string {
				return regexp.MustCompile("([`\"]"+typeCol+"[`\"]) integer").ReplaceAllString(s, "$1 text")
			}},
			{models.TableCompacts, func(s string) string {
				return regexp.MustCompile("([`\"]"+nullCol+"[`\"] [a-z0-9()]+) NOT NULL").ReplaceAllString(s, "$1")
			}},
			{models.TableSummaries, func(s string) string {
				return regexp.MustCompile(",CONSTRAINT [`\"]"+dropFK+"[`\"] FOREIGN KEY [^)]*\\)[^)]*\\)( ON DELETE CASCADE)?").ReplaceAllString(s, "")
			}},
			{models.TablePlans, func(s string) string { return strings.Replace(s, " ON DELETE CASCADE", "", 1) }},
		} {
			if failed == nil {
				failed = rebuildSQLiteTable(ctx, db, prefix+r.base, r.edit)
			}
		}
	}
	expect(agentstore.IssueColumnTypeMismatch, models.TableTodos, typeCol)
	expect(agentstore.IssueNullabilityMismatch, models.TableCompacts, nullCol)
	expect(agentstore.IssueMissingForeignKey, models.TableSummaries, dropFK)
	expect(agentstore.IssueForeignKeyMismatch, models.TablePlans, weakFK)

	// A missing table.
	exec("DROP TABLE " + q(models.TableActivitySessions))
	expect(agentstore.IssueMissingTable, models.TableActivitySessions, "")
	sort.Strings(want)
	return want, failed
}
