package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/agentstore/agentstore/internal/dialect"
	"github.com/agentstore/agentstore/migrations"
	"github.com/agentstore/agentstore/models"
)

// Versioned migrations. The chain of each dialect is the embedded files
// of package migrations (V1__agentstore_baseline.sql, V2__...); Migrate
// applies them in order, each recording its version, and DDL, WriteFlyway
// and ExportMigrations hand the same files to other tools.

// ErrSchemaAhead is returned by Migrate, MigrateTo and (as an issue) Verify
// when the database records a schema version newer than this build knows:
// it was migrated by a newer agentstore. Nothing was changed. The error is
// a *SchemaVersionError.
var ErrSchemaAhead = errors.New("agentstore: database schema is newer than this build")

// SchemaVersionError reports a database whose recorded schema version is
// ahead of the version this build (or MigrateTo's target) expects. It
// matches ErrSchemaAhead.
type SchemaVersionError struct {
	Database int64 // the version the database records
	Expected int64 // the version this build or MigrateTo's target expects
}

// Error implements error.
func (e *SchemaVersionError) Error() string {
	return fmt.Sprintf("agentstore: database schema version %d is newer than %d: upgrade this program to the agentstore release that wrote it (migrations are forward-only)",
		e.Database, e.Expected)
}

// Unwrap returns ErrSchemaAhead.
func (e *SchemaVersionError) Unwrap() error { return ErrSchemaAhead }

// ErrMigrationFailed is in the chain of the error Migrate and MigrateTo
// return when a migration step, the index repair at head or the reading of
// the recorded version fails; that error is a *MigrationError. (A refused
// call, ErrSchemaAhead or ErrInvalidInput, is not one: nothing was tried.)
var ErrMigrationFailed = errors.New("agentstore: migration failed")

// MigrationError reports a failed migration step. Its message names the
// step, the failing statement (its first 80 characters) and the class of
// the failure, never the database's own text, which DatabaseMessage
// carries for the operator (the CLI prints it on a line of its own).
// errors.Is matches ErrMigrationFailed and whatever the cause matches
// (ErrRetryable for a transient failure, ErrConflict for an object that
// already exists, context.Canceled, ...); errors.As reaches the driver's
// error. A failed step recorded nothing: Migrate applies it again next
// time.
type MigrationError struct {
	Version         int64  // the step's version; 0 for the index repair or reading the recorded version
	Description     string // the step's description ("index repair", "read schema version" for version 0)
	Statement       string // the first 80 characters of the failing statement; "" when no statement failed
	DatabaseMessage string // the database's (or driver's) own message, for operators; "" if none
	Err             error  // the cause, with agentstore's sentinels in its chain
}

// Error implements error.
func (e *MigrationError) Error() string {
	var b strings.Builder
	b.WriteString("agentstore: migrate")
	if e.Version > 0 {
		fmt.Fprintf(&b, " V%d", e.Version)
	}
	if e.Description != "" {
		fmt.Fprintf(&b, " (%s)", e.Description)
	}
	if e.Statement != "" {
		fmt.Fprintf(&b, ": statement %q", e.Statement)
	}
	b.WriteString(": ")
	b.WriteString(failureClass(e.Err))
	return b.String()
}

// Unwrap returns ErrMigrationFailed and the cause.
func (e *MigrationError) Unwrap() []error { return []error{ErrMigrationFailed, e.Err} }

// failureClass names the class of err by the sentinel it matches, without
// the driver's text.
func failureClass(err error) string {
	switch {
	case err == nil:
		return "failed"
	case errors.Is(err, context.Canceled):
		return "cancelled (context canceled)"
	case errors.Is(err, context.DeadlineExceeded):
		return "the caller's deadline passed (context deadline exceeded)"
	case errors.Is(err, ErrInvalidConfig):
		return err.Error() // agentstore's own text (configf), no driver text
	case errors.Is(err, ErrRetryable):
		return "transient database failure (retry)"
	case errors.Is(err, ErrConflict):
		return "conflict: an object the step creates already exists or a concurrent migrator collided"
	case errors.Is(err, ErrNotFound):
		return "an object the step needs does not exist"
	case errors.Is(err, ErrInvalidInput):
		return "the database refused the statement as invalid"
	}
	return "the database refused the statement"
}

// migrationError builds the *MigrationError of a failed step.
func migrationError(version int64, desc string, err error) error {
	if err == nil {
		return nil
	}
	me := &MigrationError{Version: version, Description: desc, Err: translateError(err)}
	var se *dialect.StmtError
	if errors.As(err, &se) {
		me.Statement = se.Stmt
		if len(me.Statement) > 80 {
			me.Statement = me.Statement[:80]
		}
		err = se.Err
	}
	if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		if !errors.Is(err, ErrInvalidConfig) {
			me.DatabaseMessage = err.Error()
		}
	}
	return me
}

// Migrate brings the database to SchemaVersion: an empty database gets
// the whole chain, a database at any released version the migrations after
// it, each in order and each recording its version in the schema_version
// table. It is MigrateTo(ctx, SchemaVersion); see there.
func (s *Store) Migrate(ctx context.Context) error { return s.MigrateTo(ctx, SchemaVersion) }

// MigrateTo applies the dialect's migrations (the embedded files of
// package migrations, rendered for the Store's table prefix and schema) up
// to version target, in order, each recording its version.
//
// An empty database (no version recorded) gets the whole chain up to
// target in one transaction, all or nothing: V1 creates every table, so
// the indexes later steps build CONCURRENTLY elsewhere are built on empty
// tables inside the transaction (through a transaction pooler too:
// WithPgBouncer needs no WithDirectDSN for it). A database at an older
// version gets each later step in its own transaction (a migration marked
// executeInTransaction=false, such as a PostgreSQL CREATE INDEX
// CONCURRENTLY, runs statement by statement instead, so a populated table
// stays writable). Each step takes the migration lock (a PostgreSQL
// advisory lock keyed by schema and prefix, SQLite's write lock), re-reads
// the recorded version and skips a step another process applied
// meanwhile, so concurrent callers are safe. A step interrupted part-way
// (a crash, a cancelled context) left nothing recorded: the next call
// applies it again, first dropping the INVALID indexes an interrupted
// CONCURRENTLY build leaves. It creates the PostgreSQL schema if missing.
//
// At SchemaVersion it then repairs index drift (see Verify), reading only
// the index catalog of agentstore's tables, so on an up-to-date database
// it is a handful of SELECTs and changes nothing: missing, differently
// defined and INVALID indexes are rebuilt, and indexes agentstore no
// longer declares (named idx_<prefix>...) dropped; indexes hold no data,
// rows are never touched. (Right after migrating an empty database there
// is nothing to repair, and it does not look.)
//
// It refuses a database whose recorded version is ahead of target or of
// SchemaVersion with a *SchemaVersionError (ErrSchemaAhead) and a target
// outside 1..SchemaVersion with ErrInvalidInput, changing nothing.
// Migrations are forward-only. Without advisory locks
// (WithoutCapabilities(CapAdvisoryLocks)) a step that collided with a
// concurrent one is retried, up to 5 times, and a CONCURRENTLY step builds
// its indexes in a transaction instead (concurrent CONCURRENTLY builds of
// one index would leave it INVALID).
func (s *Store) MigrateTo(ctx context.Context, target int64) error {
	if target < 1 || target > SchemaVersion {
		return fmt.Errorf("migrate: %w: target version %d is not between 1 and %d", ErrInvalidInput, target, SchemaVersion)
	}
	chain, err := migrations.Chain(string(s.d.Name()))
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if int64(len(chain)) < SchemaVersion {
		return fmt.Errorf("migrate: the %s chain ends at V%d, this build expects V%d", s.d.Name(), len(chain), SchemaVersion)
	}
	for {
		cur, err := s.recordedVersion(s.db.WithContext(ctx))
		if err != nil {
			return migrationError(0, "read schema version", err)
		}
		if cur > SchemaVersion || cur > target {
			return fmt.Errorf("migrate: %w", &SchemaVersionError{Database: cur, Expected: min(target, SchemaVersion)})
		}
		if cur == 0 && !chain[0].NoTransaction {
			// An empty database: the whole chain up to target in one
			// transaction (V1 creates every table, so every later step
			// runs on empty tables and needs no CONCURRENTLY build).
			if m, err := s.applyWithRetry(ctx, func() (migrations.Migration, error) { return s.applyFresh(ctx, chain[:target]) }); err != nil {
				return migrationError(m.Version, m.Description, err)
			}
			if fresh, err := s.recordedVersion(s.db.WithContext(ctx)); err == nil && fresh == target {
				return nil // the chain is the head's catalog: nothing to repair
			}
			continue
		}
		if cur >= target {
			if target == SchemaVersion {
				err := s.repairIndexes(ctx)
				for i := 1; i <= 5 && err != nil && !s.has(CapAdvisoryLocks) && !s.has(CapSingleWriter) && ctx.Err() == nil; i++ {
					// no lock: a concurrent migrator repaired the same index
					time.Sleep(time.Duration(i*20+rand.IntN(40)) * time.Millisecond)
					err = s.repairIndexes(ctx)
				}
				if err != nil {
					return migrationError(0, "index repair", err)
				}
			}
			return nil
		}
		m := chain[cur]
		if _, err := s.applyWithRetry(ctx, func() (migrations.Migration, error) { return m, s.applyMigration(ctx, m) }); err != nil {
			return migrationError(m.Version, m.Description, err)
		}
	}
}

// applyWithRetry runs apply (which returns the migration it failed in),
// retrying (up to 5 times) a transient failure (a deadlock between a
// concurrent migrator's transaction and a CONCURRENTLY index build) and,
// when no advisory lock serialises migrators, a collision with a
// concurrent one.
func (s *Store) applyWithRetry(ctx context.Context, apply func() (migrations.Migration, error)) (migrations.Migration, error) {
	m, err := apply()
	unlocked := !s.has(CapAdvisoryLocks) && !s.has(CapSingleWriter)
	retry := func(err error) bool {
		if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return false
		}
		// Without a lock, concurrent migrators of a step collide in many
		// ways (duplicate objects, "tuple concurrently updated" in the
		// catalog); the retry re-reads the recorded version and finds the
		// step applied or applies it alone.
		return errors.Is(err, ErrRetryable) || unlocked
	}
	for i := 1; i <= 5 && retry(err) && ctx.Err() == nil; i++ {
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(i*20+rand.IntN(40)) * time.Millisecond):
		}
		m, err = apply()
	}
	return m, err
}

// freshStatement is one statement of the chain applied to an empty
// database, with the migration it belongs to.
type freshStatement struct {
	m    migrations.Migration
	sql  string
	skip bool
}

var (
	createIndexRE = regexp.MustCompile("(?i)^CREATE (?:UNIQUE )?INDEX (?:CONCURRENTLY )?(?:IF NOT EXISTS )?[\"`]([^\"`]+)[\"`]")
	dropIndexRE   = regexp.MustCompile(`(?i)^DROP INDEX (?:CONCURRENTLY )?(?:IF EXISTS )?(?:"[^"]+"\.)?"([^"]+)"$`)
)

// freshStatements renders chain's statements for an empty database: a
// CONCURRENTLY index build or drop runs without CONCURRENTLY (inside the
// transaction), and an index a later step drops is neither created nor
// dropped, unless a statement in between names it (the catalog is the
// same; the V7 chain has six such pairs).
func (s *Store) freshStatements(chain []migrations.Migration) []freshStatement {
	var out []freshStatement
	for _, m := range chain {
		for _, st := range migrations.Statements(s.renderMigration(m)) {
			if m.NoTransaction {
				st = concurrentlyRE.ReplaceAllString(st, "${1}INDEX ")
			}
			out = append(out, freshStatement{m: m, sql: st})
		}
	}
	for j := range out {
		d := dropIndexRE.FindStringSubmatch(out[j].sql)
		if d == nil {
			continue
		}
		for i := j - 1; i >= 0; i-- {
			if out[i].skip {
				continue
			}
			if c := createIndexRE.FindStringSubmatch(out[i].sql); c != nil && c[1] == d[1] {
				out[i].skip, out[j].skip = true, true
				break
			}
			if strings.Contains(out[i].sql, `"`+d[1]+`"`) || strings.Contains(out[i].sql, "`"+d[1]+"`") {
				break // named in between: keep both
			}
		}
	}
	return out
}

// applyFresh applies chain, which starts at V1, to an empty database in
// one transaction under the migration lock, all or nothing (the statements
// of freshStatements): V1 creates every table, so the indexes of later
// steps are built on empty tables, by a plain CREATE INDEX inside the
// transaction. If another migrator recorded a version meanwhile, it does
// nothing (Migrate continues from that version). On failure it returns the
// migration whose statement failed.
func (s *Store) applyFresh(ctx context.Context, chain []migrations.Migration) (migrations.Migration, error) {
	var failed migrations.Migration
	if len(chain) > 0 {
		failed = chain[0]
	}
	stmts := s.freshStatements(chain)
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := s.d.MigrateLock(tx, s.env()); err != nil {
			return err
		}
		cur, err := s.recordedVersion(tx)
		if err != nil {
			return err
		}
		if cur > 0 {
			return nil // a concurrent migrator got there first
		}
		for _, st := range stmts {
			if st.skip {
				continue
			}
			failed = st.m
			if err := tx.Exec(st.sql).Error; err != nil {
				return &dialect.StmtError{Stmt: st.sql, Err: err}
			}
		}
		return nil
	})
	return failed, translateError(err)
}

// renderMigration renders committed migration m for the Store's prefix
// and schema, as its dialect runs it (dialect.MigrationRewriter).
func (s *Store) renderMigration(m migrations.Migration) string {
	return renderMigration(s.d, m, s.cfg.Prefix, s.cfg.Schema)
}

// renderMigration renders m for prefix and schema, rewritten by d when it
// is a dialect.MigrationRewriter.
func renderMigration(d dialect.Dialect, m migrations.Migration, prefix, schema string) string {
	sql := migrations.Render(m.SQL, prefix, schema)
	if r, ok := d.(dialect.MigrationRewriter); ok {
		sql = r.RewriteMigration(sql)
	}
	return sql
}

// transactionalDDL reports whether d's DDL can run in a transaction: a
// chain whose V1 is marked executeInTransaction=false (MariaDB, whose DDL
// commits implicitly) is applied step by step through the dialect's
// ApplyNoTx, which serialises migrators with its own lock; every statement
// of such a chain can run again, so a step interrupted half-way is finished
// by the next Migrate.
func transactionalDDL(d dialect.Dialect) bool {
	chain, err := migrations.Chain(string(d.Name()))
	return err != nil || len(chain) == 0 || !chain[0].NoTransaction
}

// applyMigration applies one migration unless it is already recorded.
func (s *Store) applyMigration(ctx context.Context, m migrations.Migration) error {
	stmts := migrations.Statements(s.renderMigration(m))
	if m.NoTransaction {
		if s.has(CapAdvisoryLocks) || !transactionalDDL(s.d) {
			return translateError(s.d.ApplyNoTx(ctx, s.env(), m.Version, stmts))
		}
		// Without a lock that serialises migrators across transactions,
		// concurrent CONCURRENTLY builds of one index leave it INVALID:
		// build the step's indexes in a transaction instead (they lock the
		// table for writes while they build, and colliding migrators fail
		// and retry).
		for i, st := range stmts {
			stmts[i] = concurrentlyRE.ReplaceAllString(st, "${1}INDEX ")
		}
	}
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := s.d.MigrateLock(tx, s.env()); err != nil {
			return err
		}
		cur, err := s.recordedVersion(tx)
		if err != nil {
			return err
		}
		if cur >= m.Version {
			return nil // applied by a concurrent migrator
		}
		for _, st := range stmts {
			if err := tx.Exec(st).Error; err != nil {
				return &dialect.StmtError{Stmt: st, Err: err}
			}
		}
		return nil
	})
	return translateError(err)
}

// repairIndexes brings the indexes of a database at SchemaVersion to the
// models' definitions, as Verify reports them: missing indexes are
// created, indexes whose definition differs and INVALID ones rebuilt, and
// indexes the models no longer declare dropped when their name is one
// agentstore generates for this prefix ("idx_<prefix>..."; an index a DBA
// added under another name is reported by Verify, never dropped). Indexes
// hold no data, so this repairs drift a pre-release or hand-edited
// database has without touching rows. It reads only the index catalog of
// the models' tables (one query; not a whole Verify), so on an up-to-date
// database it costs a few milliseconds and changes nothing. Repairs run in
// one transaction under the migration lock. (Without advisory locks,
// INVALID indexes are left to Verify: one may be a concurrent migrator's
// build in progress.)
func (s *Store) repairIndexes(ctx context.Context) error {
	db := s.db.WithContext(ctx)
	cat := s.d.Catalog()
	nsp, err := cat.SchemaName(db, s.cfg.Schema)
	if err != nil {
		return err
	}
	exps, names, err := s.expectedTables(true)
	if err != nil {
		return err
	}
	live, err := cat.LoadIndexes(db, nsp, names)
	if err != nil {
		return err
	}
	var issues []SchemaIssue
	for _, exp := range exps {
		if lt := live[exp.name]; lt != nil {
			issues = append(issues, s.indexIssues(db, exp, lt)...)
		}
	}
	fixes := s.indexRepairStatements(issues)
	if len(fixes) == 0 {
		return nil
	}
	return translateError(s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := s.d.MigrateLock(tx, s.env()); err != nil {
			return err
		}
		for _, st := range fixes {
			if err := tx.Exec(st).Error; err != nil {
				return &dialect.StmtError{Stmt: st, Err: err}
			}
		}
		return nil
	}))
}

// RecordedSchemaVersion returns the highest schema version the database
// records (0 for a database without agentstore's schema_version table).
func (s *Store) RecordedSchemaVersion(ctx context.Context) (int64, error) {
	if s.guard.isClosed() { // HasTable below hides every error
		return 0, fmt.Errorf("read schema version: %w", ErrClosed)
	}
	v, err := s.recordedVersion(s.db.WithContext(ctx))
	if err != nil {
		return 0, fmt.Errorf("read schema version: %w", translateError(err))
	}
	return v, nil
}

// recordedVersion returns the highest version in the schema_version table,
// 0 when the table does not exist or is empty.
func (s *Store) recordedVersion(db *gorm.DB) (int64, error) {
	ok, err := s.d.Catalog().HasTable(db, s.cfg.Schema, s.cfg.Prefix+models.TableSchemaVersion)
	if err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	if !ok {
		return 0, nil
	}
	var v *int64
	if err := db.Raw("SELECT MAX(version) FROM " + s.quoted(models.TableSchemaVersion)).Scan(&v).Error; err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	if v == nil {
		return 0, nil
	}
	return *v, nil
}

// DDL returns the SQL that creates the whole agentstore schema of dialect
// d (both domains, every index and foreign key, the schema-version rows) on
// an empty database: every migration of the chain in order, rendered for
// WithTablePrefix and WithSchema (with CREATE SCHEMA IF NOT EXISTS first
// when a schema is given). Migrate applies the same chain (to an empty
// database in one transaction, without CONCURRENTLY and without the
// indexes a later step drops: the same catalog); psql or sqlite3 can run
// it as one script. No database is contacted.
func DDL(ds []dialect.Dialect, d Dialect, opts ...Option) (string, error) {
	files, err := renderChain(ds, d, opts)
	if err != nil {
		return "", err
	}
	dl, _ := dialectNamed(ds, d)
	var b strings.Builder
	for i, f := range files {
		if i > 0 {
			b.WriteString("\n")
		}
		b.WriteString(clientScript(dl, f.sql))
	}
	return b.String(), nil
}

// gooseScript marks each compound statement of a dialect.ClientScript
// dialect (a ";" inside) with goose's StatementBegin and StatementEnd, so
// goose sends it whole.
func gooseScript(dl dialect.Dialect, sql string) string {
	cs, ok := dl.(dialect.ClientScript)
	if !ok {
		return sql
	}
	for _, st := range migrations.Statements(sql) {
		if _, ok := cs.WrapCompound(st); ok {
			sql = strings.Replace(sql, st+";\n", "-- +goose StatementBegin\n"+st+";\n-- +goose StatementEnd\n", 1)
		}
	}
	return sql
}

// clientScript returns a rendered migration as the dialect's command-line
// client and Flyway run it: on a dialect.ClientScript dialect each
// compound statement (a ";" inside) is written between DELIMITER lines;
// otherwise sql unchanged.
func clientScript(dl dialect.Dialect, sql string) string {
	cs, ok := dl.(dialect.ClientScript)
	if !ok {
		return sql
	}
	for _, st := range migrations.Statements(sql) {
		if w, ok := cs.WrapCompound(st); ok {
			sql = strings.Replace(sql, st+";\n", w, 1)
		}
	}
	return sql
}

// renderedMigration is one migration rendered for a prefix and schema.
type renderedMigration struct {
	m   migrations.Migration
	sql string
}

func renderChain(ds []dialect.Dialect, d Dialect, opts []Option) ([]renderedMigration, error) {
	cfg, err := BuildConfig(opts)
	if err != nil {
		return nil, err
	}
	dl, err := dialectNamed(ds, d)
	if err != nil {
		return nil, err
	}
	if err := dl.CheckConfig(&cfg.Config); err != nil {
		return nil, err
	}
	chain, err := migrations.Chain(string(d))
	if err != nil {
		return nil, err
	}
	out := make([]renderedMigration, 0, len(chain))
	for _, m := range chain {
		sql := renderMigration(dl, m, cfg.Prefix, cfg.Schema)
		if cfg.Schema != "" && m.Version == 1 {
			sql = strings.Replace(sql, "\n\n", fmt.Sprintf("\n\nCREATE SCHEMA IF NOT EXISTS \"%s\";\n\n", cfg.Schema), 1)
		}
		out = append(out, renderedMigration{m: m, sql: sql})
	}
	return out, nil
}

// MigrationFormat names a migration tool's file layout for ExportMigrations.
type MigrationFormat string

// The formats ExportMigrations writes.
const (
	// FormatFlyway writes V<n>__<description>.sql, and
	// V<n>__<description>.sql.conf (executeInTransaction=false) beside a
	// migration that cannot run in a transaction.
	FormatFlyway MigrationFormat = "flyway"
	// FormatGoose writes <n>_<description>.sql with -- +goose Up (and
	// -- +goose NO TRANSACTION where needed) for github.com/pressly/goose.
	FormatGoose MigrationFormat = "goose"
	// FormatGolangMigrate writes <n>_<description>.up.sql for
	// github.com/golang-migrate/migrate (run a migration that cannot run in
	// a transaction with the postgres driver's x-multi-statement=true).
	FormatGolangMigrate MigrationFormat = "golang-migrate"
)

// ExportConfig says how ExportMigrations names the files.
type ExportConfig struct {
	// Format is the tool's layout (default FormatFlyway).
	Format MigrationFormat
	// VersionOffset is added to every file's version, so the chain fits
	// after an application's own migrations in one directory (agentstore's
	// V1 written as V1001 with offset 1000). The files' content, and the
	// versions agentstore records in its own table, are unchanged.
	VersionOffset int64
}

// ExportMigrations writes the whole chain of dialect d, rendered for
// WithTablePrefix and WithSchema, into dir (created if needed) in the
// layout of ec.Format, and returns the paths written. A file that already
// exists with the same content is left alone; one with different content
// is refused with ErrConflict naming it (a released migration never
// changes), and nothing after it is written.
func ExportMigrations(ds []dialect.Dialect, dir string, d Dialect, ec ExportConfig, opts ...Option) ([]string, error) {
	if ec.VersionOffset < 0 {
		return nil, configf("export migrations: negative version offset %d", ec.VersionOffset)
	}
	if ec.Format == "" {
		ec.Format = FormatFlyway
	}
	files, err := renderChain(ds, d, opts)
	if err != nil {
		return nil, err
	}
	dl, _ := dialectNamed(ds, d)
	type out struct{ name, content string }
	var outs []out
	for _, f := range files {
		v := f.m.Version + ec.VersionOffset
		switch ec.Format {
		case FormatFlyway:
			outs = append(outs, out{fmt.Sprintf("V%d__%s.sql", v, f.m.Description), clientScript(dl, f.sql)})
			if f.m.Conf != "" {
				outs = append(outs, out{fmt.Sprintf("V%d__%s.sql.conf", v, f.m.Description), f.m.Conf})
			}
		case FormatGoose:
			head := "-- +goose Up\n"
			if f.m.NoTransaction {
				head = "-- +goose NO TRANSACTION\n" + head
			}
			outs = append(outs, out{fmt.Sprintf("%d_%s.sql", v, f.m.Description), head + gooseScript(dl, f.sql)})
		case FormatGolangMigrate:
			outs = append(outs, out{fmt.Sprintf("%d_%s.up.sql", v, f.m.Description), golangMigrateSQL(f.sql)})
		default:
			return nil, configf("export migrations: unknown format %q (want flyway, goose or golang-migrate)", clip(string(ec.Format)))
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("export migrations: %w", err)
	}
	var written []string
	for _, o := range outs {
		p := filepath.Join(dir, o.name)
		if old, err := os.ReadFile(p); err == nil {
			if bytes.Equal(old, []byte(o.content)) {
				written = append(written, p)
				continue
			}
			return written, fmt.Errorf("export migrations: %w: %s exists with different content (a released migration never changes; remove it only if it was never applied)", ErrConflict, p)
		}
		if err := os.WriteFile(p, []byte(o.content), 0o644); err != nil {
			return written, fmt.Errorf("export migrations: %w", err)
		}
		written = append(written, p)
	}
	return written, nil
}

// WriteFlyway writes the chain of dialect d for Flyway into dir: it is
// ExportMigrations(dir, d, ExportConfig{Format: FormatFlyway}, opts...).
func WriteFlyway(ds []dialect.Dialect, dir string, d Dialect, opts ...Option) error {
	_, err := ExportMigrations(ds, dir, d, ExportConfig{Format: FormatFlyway}, opts...)
	return err
}

var concurrentlyRE = regexp.MustCompile(`(?i)((?:CREATE (?:UNIQUE )?|DROP ))INDEX CONCURRENTLY `)

// FlywayFileName is the file name of the first migration of every chain
// (the V1 baseline).
const FlywayFileName = "V1__agentstore_baseline.sql"

// golangMigrateSQL rewrites what golang-migrate's x-multi-statement
// splitter (it cuts at every ";", in comments and quoted bodies too) would
// cut: ";" in comment lines becomes ",", and a $$-quoted body holding a ";"
// (a function or DO block, V8) becomes the same text as an escape string
// constant, E'…', with ";" written \073, "'" as \' and "\" as \\, which
// PostgreSQL reads back byte for byte.
func golangMigrateSQL(sql string) string {
	parts := strings.Split(sql, "$$")
	if len(parts)%2 == 1 { // balanced: odd parts are bodies
		var b strings.Builder
		for i, part := range parts {
			switch {
			case i%2 == 0:
				b.WriteString(part)
			case !strings.Contains(part, ";"):
				b.WriteString("$$" + part + "$$")
			default:
				r := strings.NewReplacer(`\`, `\\`, `'`, `\'`, ";", `\073`)
				b.WriteString("E'" + r.Replace(part) + "'")
			}
		}
		sql = b.String()
	}
	lines := strings.Split(sql, "\n")
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "--") {
			lines[i] = strings.ReplaceAll(l, ";", ",")
		}
	}
	return strings.Join(lines, "\n")
}
