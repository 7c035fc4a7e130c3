package agentstore_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gorm.io/driver/sqlite"
	"gorm.io/gorm"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/agentstoretest"
)

// TestConformance runs the exported conformance suite (package
// agentstoretest) on every dialect: a SQLite file per test, and a fresh
// PostgreSQL schema per test at AGENTSTORE_TEST_POSTGRES_DSN, there twice:
// with the dialect's one-statement fast paths and with the general
// transaction paths (WithoutCapabilities(CapFastPaths)), so neither rots,
// and (long tests) as a portable PostgreSQL-wire engine (postgres-portable:
// no fast paths, advisory locks, wake-up, SKIP LOCKED or async commit),
// that one with telemetry on and every span audited (telemetrySuiteOptions),
// and on MariaDB at AGENTSTORE_TEST_MARIADB_DSN, with telemetry on too. The
// general run also audits every statement for Citus (citus_audit_test.go).
func TestConformance(t *testing.T) {
	t.Parallel()
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
		requireSuiteVariant(t)
		requirePostgres(t)
		// the statement audit (citus_audit_test.go): every statement of the
		// general paths, which a Citus deployment runs, classified by shard
		// routing once every test of the variant has finished
		audit := &citusAudit{}
		t.Cleanup(func() { audit.check(t) })
		agentstoretest.Run(t, agentstoretest.Postgres(postgresDSN(), agentstore.WithoutCapabilities(agentstore.CapFastPaths),
			agentstore.WithLogger(audit)))
	})
	t.Run("mariadb", func(t *testing.T) {
		t.Parallel()
		requireMariaDB(t)
		// with telemetry on: the telemetry variant's MariaDB run (every
		// span audited, MariaDB's error classes included)
		agentstoretest.Run(t, mariadbPending{agentstoretest.MariaDB(mariadbDSN(), telemetrySuiteOptions(t)...)})
	})
	t.Run("postgres-portable", func(t *testing.T) {
		t.Parallel()
		requireSuiteVariant(t)
		requirePostgres(t)
		// a PostgreSQL-wire engine without the PostgreSQL-only features
		// (CockroachDB, YugabyteDB, Citus): every fallback of
		// docs/distributed.md's capability table; with telemetry on, the
		// telemetry variant's PostgreSQL run (TestConformanceTelemetry)
		opts := append(telemetrySuiteOptions(t), agentstore.WithoutCapabilities(portableOff))
		agentstoretest.Run(t, agentstoretest.Postgres(postgresDSN(), opts...))
	})
}

// mariadbNotYet are the conformance areas ("Area/") and tests
// ("Area/Test") that do not pass on MariaDB yet (issue 26: the MariaDB
// dialect is being added step by step). Each is skipped with its reason,
// so CI stays green and the gap stays visible; the list only shrinks.
func mariadbNotYet() map[string]string {
	return map[string]string{}
}

// mariadbPending is the MariaDB harness less mariadbNotYet.
type mariadbPending struct{ h agentstoretest.Harness }

// NewBackend skips t when it is in mariadbNotYet.
func (p mariadbPending) NewBackend(t testing.TB) agentstoretest.Backend {
	name := t.Name()
	if i := strings.Index(name, "/mariadb/"); i >= 0 {
		name = name[i+len("/mariadb/"):]
	}
	for k, why := range mariadbNotYet() {
		if name == k || (strings.HasSuffix(k, "/") && strings.HasPrefix(name, k)) {
			t.Skipf("MariaDB: not passing yet (issue 26): %s", why)
		}
	}
	return p.h.NewBackend(t)
}

// portableOff are the capabilities the postgres-portable variant switches
// off: fast paths, advisory locks, wake-up, SKIP LOCKED, async commit.
const portableOff = agentstore.CapFastPaths | agentstore.CapAdvisoryLocks | agentstore.CapWakeup |
	agentstore.CapSkipLocked | agentstore.CapAsyncCommit

func TestOpen_RejectsUnknownScheme(t *testing.T) {
	t.Parallel()
	for _, dsn := range []string{"", "mysql://root@localhost", "oracle://root@localhost/x", "sqlite:", "file:x.db", "x; DROP TABLE y"} {
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
		gdb, gerr := gorm.Open(sqlite.New(sqlite.Config{DriverName: testSQLiteDriver, DSN: "file::memory:"}), &gorm.Config{})
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
