package agentstore_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"
	"gorm.io/driver/sqlite"
	"gorm.io/gorm"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/agentstoretest"
	"github.com/agentstore/agentstore/models"
)

// TestConformance runs the exported conformance suite (package
// agentstoretest) on every dialect: a SQLite file per test, and a fresh
// PostgreSQL schema per test at AGENTSTORE_TEST_POSTGRES_DSN, there twice:
// with the dialect's one-statement fast paths and with the general
// transaction paths (WithoutCapabilities(CapFastPaths)), so neither rots.
func TestConformance(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		agentstoretest.Run(t, agentstoretest.SQLite())
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		requirePostgres(t)
		agentstoretest.Run(t, agentstoretest.Postgres(postgresDSN()))
	})
	t.Run("postgres-general", func(t *testing.T) {
		t.Parallel()
		requirePostgres(t)
		agentstoretest.Run(t, agentstoretest.Postgres(postgresDSN(), agentstore.WithoutCapabilities(agentstore.CapFastPaths)))
	})
}

func TestOpen_RejectsUnknownScheme(t *testing.T) {
	t.Parallel()
	for _, dsn := range []string{"", "mysql://root@localhost/x", "sqlite:", "file:x.db", "x; DROP TABLE y"} {
		_, err := agentstore.Open(context.Background(), dsn)
		if !errors.Is(err, agentstore.ErrInvalidConfig) {
			t.Errorf("Open(%q) = %v, want ErrInvalidConfig", dsn, err)
		}
	}
}

func TestOpen_RejectsBadPrefixAndSchema(t *testing.T) {
	t.Parallel()
	bad := []string{"x; DROP TABLE y", "1abc", "a-b", "a.b", `a"b`, "ä", strings.Repeat("a", 200), "a b", "a\x00b"}
	for _, p := range bad {
		_, err := agentstore.Open(context.Background(), "sqlite::memory:", agentstore.WithTablePrefix(p))
		if !errors.Is(err, agentstore.ErrInvalidConfig) {
			t.Errorf("WithTablePrefix(%q) = %v, want ErrInvalidConfig", p, err)
		}
		_, err = agentstore.Open(context.Background(), postgresDSN(), agentstore.WithSchema(p))
		if !errors.Is(err, agentstore.ErrInvalidConfig) {
			t.Errorf("WithSchema(%q) = %v, want ErrInvalidConfig", p, err)
		}
		_, err = agentstore.DDL(agentstore.Postgres, agentstore.WithSchema(p))
		if !errors.Is(err, agentstore.ErrInvalidConfig) {
			t.Errorf("DDL WithSchema(%q) = %v, want ErrInvalidConfig", p, err)
		}
		dir := t.TempDir()
		err = agentstore.WriteFlyway(dir, agentstore.SQLite, agentstore.WithTablePrefix(p))
		if !errors.Is(err, agentstore.ErrInvalidConfig) {
			t.Errorf("WriteFlyway WithTablePrefix(%q) = %v, want ErrInvalidConfig", p, err)
		}
		if _, serr := os.Stat(filepath.Join(dir, agentstore.FlywayFileName)); serr == nil {
			t.Errorf("WriteFlyway WithTablePrefix(%q) wrote a file", p)
		}
		gdb, gerr := gorm.Open(sqlite.Open("file::memory:"), &gorm.Config{})
		if gerr != nil {
			t.Fatal(gerr)
		}
		_, err = agentstore.New(gdb, agentstore.WithTablePrefix(p))
		if !errors.Is(err, agentstore.ErrInvalidConfig) {
			t.Errorf("New WithTablePrefix(%q) = %v, want ErrInvalidConfig", p, err)
		}
		if sqlDB, _ := gdb.DB(); sqlDB != nil {
			_ = sqlDB.Close()
		}
	}
	for _, p := range []string{"", "claude_", "A_b9", "_x"} {
		st, err := agentstore.Open(context.Background(), "sqlite::memory:", agentstore.WithTablePrefix(p))
		if err != nil {
			t.Fatalf("WithTablePrefix(%q): %v", p, err)
		}
		_ = st.Close()
	}
}

func TestOpen_PasswordNeverInErrors(t *testing.T) {
	t.Parallel()
	const pw = "s3cr3t-Passw0rd"
	dsn := "postgres://postgres:" + pw + "@127.0.0.1:1/none?sslmode=disable&connect_timeout=1"
	_, err := agentstore.Open(context.Background(), dsn)
	if err == nil {
		t.Fatal("Open of an unreachable server succeeded")
	}
	if strings.Contains(err.Error(), pw) {
		t.Fatalf("error leaks the password: %v", err)
	}
	if got := agentstore.RedactDSN(dsn); strings.Contains(got, pw) {
		t.Fatalf("RedactDSN leaks the password: %s", got)
	}
}

func TestMigrate_IdempotentAndRecordsVersion(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, h *harness) {
		st := h.New(t)
		for i := 0; i < 2; i++ {
			if err := st.Migrate(context.Background()); err != nil {
				t.Fatalf("second Migrate: %v", err)
			}
		}
		var versions []int64
		if err := st.DB(context.Background()).Model(&models.SchemaVersionRow{}).Pluck("version", &versions).Error; err != nil {
			t.Fatal(err)
		}
		if len(versions) != 1 || versions[0] != agentstore.SchemaVersion {
			t.Fatalf("schema versions = %v, want [%d]", versions, agentstore.SchemaVersion)
		}
		for _, m := range models.All() {
			if !st.DB(context.Background()).Migrator().HasTable(m) {
				t.Errorf("table for %T missing", m)
			}
		}
	})
}

func TestMigrate_ConcurrentStores(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, h *harness) {
		const n = 8
		stores := make([]*agentstore.Store, n)
		for i := range stores {
			stores[i] = h.Open(t)
		}
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i := range stores {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = stores[i].Migrate(context.Background())
			}()
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("store %d: Migrate: %v", i, err)
			}
		}
	})
}

func TestForeignKeysCascade(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, h *harness) {
		st := h.New(t)
		db := st.DB(context.Background())
		now := newTestClock().Now()
		sid := uuid.New()
		if err := db.Create(&models.Session{ID: sid, SessionType: "main", State: "created", Config: models.JSON(`{}`),
			Permissions: models.JSON(`{}`), CreatedAt: now, UpdatedAt: now}).Error; err != nil {
			t.Fatal(err)
		}
		if err := db.Create(&models.Message{SessionID: sid, Seq: 1, ID: "m1", Role: "user",
			Content: models.VerbatimJSON(`[]`), CreatedAt: now}).Error; err != nil {
			t.Fatal(err)
		}
		// A message for a session that does not exist must be refused.
		if err := db.Create(&models.Message{SessionID: uuid.New(), Seq: 1, ID: "m1", Role: "user",
			Content: models.VerbatimJSON(`[]`), CreatedAt: now}).Error; err == nil {
			t.Fatal("foreign key not enforced: orphan message inserted")
		}
		if err := db.Delete(&models.Session{ID: sid}).Error; err != nil {
			t.Fatal(err)
		}
		var n int64
		db.Model(&models.Message{}).Count(&n)
		if n != 0 {
			t.Fatalf("%d messages survived their session's delete (cascade off)", n)
		}
	})
}
