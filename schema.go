package agentstore

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/agentstore/agentstore/models"
)

// SchemaVersion is the schema version this build of agentstore writes and expects.
const SchemaVersion = models.SchemaVersion

// Migrate creates or alters every table, index and foreign key of both
// domains with GORM AutoMigrate and records SchemaVersion. It is idempotent
// and safe when several processes call it at once: on PostgreSQL it runs in
// one transaction holding an advisory lock keyed by schema and prefix (and
// creates the schema if missing); on SQLite it runs in one BEGIN IMMEDIATE
// transaction. On a database without advisory locks
// (WithoutCapabilities(CapAdvisoryLocks)) a run that collides with a
// concurrent one is retried, up to 5 times. Use it for development and tests; production databases can
// be built from the exported DDL (see DDL) by Flyway and checked with Verify.
func (s *Store) Migrate(ctx context.Context) error {
	err := s.migrateOnce(ctx)
	if s.has(CapAdvisoryLocks) || s.has(CapSingleWriter) {
		return err
	}
	for i := 1; i <= 5 && (errors.Is(err, ErrConflict) || errors.Is(err, ErrRetryable)) && ctx.Err() == nil; i++ {
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(i*20) * time.Millisecond):
		}
		err = s.migrateOnce(ctx)
	}
	return err
}

// migrateOnce is one Migrate transaction.
func (s *Store) migrateOnce(ctx context.Context) error {
	mdb, err := s.migrationDB()
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	err = mdb.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := s.d.migrateLock(tx, s); err != nil {
			return err
		}
		if err := tx.AutoMigrate(models.All()...); err != nil {
			return fmt.Errorf("automigrate: %w", err)
		}
		var n int64
		if err := tx.Model(&models.SchemaVersionRow{}).Where("version = ?", SchemaVersion).Count(&n).Error; err != nil {
			return fmt.Errorf("read schema version: %w", err)
		}
		if n == 0 {
			row := models.SchemaVersionRow{Version: SchemaVersion, AppliedAt: s.now()}
			if err := tx.Create(&row).Error; err != nil {
				return fmt.Errorf("record schema version: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("migrate: %w", translateError(err))
	}
	return nil
}

// migrationDB returns a GORM handle on the store's pool with its own
// schema cache in which the model defaults are normalised (see
// normalizeModelDefaults), for Migrate and for the fixes Verify suggests.
func (s *Store) migrationDB() (*gorm.DB, error) {
	mdb, err := gorm.Open(s.db.Dialector, &gorm.Config{
		NamingStrategy:         s.namer,
		Logger:                 s.cfg.logger,
		NowFunc:                s.now,
		SkipDefaultTransaction: true,
		DisableAutomaticPing:   true,
	})
	if err != nil {
		return nil, err
	}
	if err := normalizeModelDefaults(mdb); err != nil {
		return nil, err
	}
	return mdb, nil
}

// normalizeModelDefaults parses every model into db's schema cache and
// gives each quoted literal default GORM does not parse itself (defaults of
// JSON and Decimal columns, such as '{}') its parsed form. Without this,
// GORM's PostgreSQL migrator re-runs ALTER COLUMN ... SET DEFAULT on those
// columns at every AutoMigrate, and Migrate would not be a no-op on an
// up-to-date schema. db must be a handle private to the caller (Migrate
// and DDL open their own), because the cached schemas are modified.
func normalizeModelDefaults(db *gorm.DB) error {
	for _, m := range models.All() {
		stmt := &gorm.Statement{DB: db}
		if err := stmt.Parse(m); err != nil {
			return fmt.Errorf("parse model %T: %w", m, err)
		}
		for _, f := range stmt.Schema.Fields {
			v := f.DefaultValue
			if f.HasDefaultValue && f.DefaultValueInterface == nil && len(v) >= 2 && v[0] == '\'' && v[len(v)-1] == '\'' {
				lit := strings.ReplaceAll(v[1:len(v)-1], "''", "'")
				f.DefaultValue = lit
				f.DefaultValueInterface = lit
			}
		}
	}
	return nil
}

// migrateLockKey derives the advisory-lock key from schema and prefix, so
// stores on different schemas migrate in parallel.
func (s *Store) migrateLockKey() int64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte("agentstore:migrate:" + s.cfg.schema + ":" + s.cfg.prefix))
	return int64(h.Sum64() & 0x7fffffffffffffff)
}

// ddlLogger records every statement GORM would execute.
type ddlLogger struct {
	logger.Interface
	mu    sync.Mutex
	stmts []string
}

func (l *ddlLogger) LogMode(logger.LogLevel) logger.Interface { return l }

func (l *ddlLogger) Trace(_ context.Context, _ time.Time, fc func() (string, int64), _ error) {
	sql, _ := fc()
	l.mu.Lock()
	l.stmts = append(l.stmts, sql)
	l.mu.Unlock()
}

// DDL returns the SQL that creates the whole agentstore schema (both
// domains, every index and foreign key, and the schema-version row) on an
// empty database of dialect d, honouring WithTablePrefix and WithSchema. It
// is generated from the same models Migrate uses, by running GORM's
// CreateTable in dry-run mode; no database is contacted. The result is a
// Flyway-ready baseline migration (see WriteFlyway).
func DDL(d Dialect, opts ...Option) (string, error) {
	cfg, err := buildConfig(opts)
	if err != nil {
		return "", err
	}
	dl, err := dialectNamed(d)
	if err != nil {
		return "", err
	}
	if err := dl.checkConfig(cfg); err != nil {
		return "", err
	}
	dial, closer, err := dl.offline()
	if err != nil {
		return "", err
	}
	defer func() { _ = closer() }()
	rec := &ddlLogger{Interface: logger.Discard}
	gdb, err := gorm.Open(dial, &gorm.Config{
		NamingStrategy:       models.NewNamer(cfg.prefix, cfg.schema),
		Logger:               rec,
		DryRun:               true,
		DisableAutomaticPing: true,
	})
	if err != nil {
		return "", fmt.Errorf("ddl: %w", err)
	}
	if err := normalizeModelDefaults(gdb); err != nil {
		return "", fmt.Errorf("ddl: %w", err)
	}
	mig := gdb.Migrator()
	for _, m := range models.All() {
		if err := mig.CreateTable(m); err != nil {
			return "", fmt.Errorf("ddl: %w", err)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "-- agentstore schema version %d for %s (prefix %q", SchemaVersion, d, cfg.prefix)
	if cfg.schema != "" {
		fmt.Fprintf(&b, ", schema %q", cfg.schema)
	}
	b.WriteString(").\n-- Generated by `agentstore ddl` from the GORM models; do not edit.\n\n")
	if cfg.schema != "" {
		fmt.Fprintf(&b, "CREATE SCHEMA IF NOT EXISTS \"%s\";\n\n", cfg.schema)
	}
	for _, st := range orderDDL(rec.stmts) {
		b.WriteString(st)
		b.WriteString(";\n")
	}
	n := models.NewNamer(cfg.prefix, cfg.schema)
	fmt.Fprintf(&b, "\nINSERT INTO %s (version, applied_at) VALUES (%d, CURRENT_TIMESTAMP);\n",
		quoteQualified(n.Table(models.TableSchemaVersion)), SchemaVersion)
	return b.String(), nil
}

func quoteQualified(name string) string {
	parts := strings.Split(name, ".")
	for i, p := range parts {
		parts[i] = `"` + p + `"`
	}
	return strings.Join(parts, ".")
}

// FlywayFileName is the name of the exported baseline migration.
const FlywayFileName = "V1__agentstore_baseline.sql"

// WriteFlyway writes the DDL of dialect d (see DDL; the same options) to
// dir/V1__agentstore_baseline.sql, creating dir if needed, so Flyway can
// apply it as the baseline migration.
func WriteFlyway(dir string, d Dialect, opts ...Option) error {
	ddl, err := DDL(d, opts...)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("write flyway migration: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, FlywayFileName), []byte(ddl), 0o644); err != nil {
		return fmt.Errorf("write flyway migration: %w", err)
	}
	return nil
}

// orderDDL drops introspection queries and sorts each run of CREATE INDEX
// statements (GORM emits them in map order) so the output is stable. The
// statements are otherwise kept exactly as GORM writes them: on SQLite
// string defaults stay double-quoted (DEFAULT "main"), because GORM's
// SQLite migrator compares defaults in that spelling and would rebuild
// every table of a database created with 'main' on each Migrate.
func orderDDL(stmts []string) []string {
	var out, run []string
	flush := func() {
		sort.Strings(run)
		out = append(out, run...)
		run = nil
	}
	for _, st := range stmts {
		st = strings.TrimSpace(st)
		up := strings.ToUpper(st)
		if st == "" || strings.HasPrefix(up, "SELECT") || strings.HasPrefix(up, "PRAGMA") {
			continue
		}
		if strings.HasPrefix(up, "CREATE INDEX") || strings.HasPrefix(up, "CREATE UNIQUE INDEX") {
			run = append(run, st)
			continue
		}
		flush()
		out = append(out, st)
	}
	flush()
	return out
}
