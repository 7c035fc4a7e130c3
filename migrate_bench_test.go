package agentstore_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/agentstore/agentstore"
)

// Migrate's cost (issue 23): an empty database migrated to head, and
// Migrate on a database already at head (a no-op: the recorded version and
// the index catalog read, nothing changed). On both dialects; PostgreSQL
// is skipped (or fails with AGENTSTORE_REQUIRE_POSTGRES=1) when
// unreachable.
//
//	go test -run '^$' -bench 'BenchmarkMigrate(Fresh|Noop)' -benchtime 20x .
//
// ms/migrate is the mean time of one Migrate call (ns/op in milliseconds).

// benchDatabase returns the DSN and options of a new empty database of
// dialect d (a SQLite file under dir, a PostgreSQL schema) and a function
// that drops it.
func benchDatabase(b *testing.B, d agentstore.Dialect, dir string) (string, []agentstore.Option, func()) {
	b.Helper()
	if d == agentstore.SQLite {
		return "sqlite:" + filepath.Join(dir, uuid.NewString()+".db"), nil, func() {}
	}
	db := requirePostgres(b)
	schema := "b_" + strings.ReplaceAll(uuid.NewString(), "-", "")
	return postgresDSN(), []agentstore.Option{agentstore.WithSchema(schema)}, func() {
		_, _ = db.ExecContext(context.Background(), `DROP SCHEMA IF EXISTS "`+schema+`" CASCADE`)
	}
}

func reportMigrate(b *testing.B, total time.Duration) {
	b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "ms/migrate")
}

// BenchmarkMigrateFresh: Migrate of an empty database (PostgreSQL: a
// schema that does not exist yet) to SchemaVersion. Opening the Store and
// dropping the database are not timed.
func BenchmarkMigrateFresh(b *testing.B) {
	for _, d := range dialects {
		b.Run(string(d), func(b *testing.B) {
			ctx := context.Background()
			dir := b.TempDir()
			var total time.Duration
			b.StopTimer()
			for i := 0; i < b.N; i++ {
				dsn, opts, drop := benchDatabase(b, d, dir)
				st, err := agentstore.Open(ctx, dsn, opts...)
				if err != nil {
					b.Fatal(err)
				}
				start := time.Now()
				b.StartTimer()
				err = st.Migrate(ctx)
				b.StopTimer()
				total += time.Since(start)
				_ = st.Close()
				drop()
				if err != nil {
					b.Fatal(err)
				}
			}
			reportMigrate(b, total)
		})
	}
}

// BenchmarkMigrateNoop: Migrate of a database already at SchemaVersion,
// which changes nothing.
func BenchmarkMigrateNoop(b *testing.B) {
	for _, d := range dialects {
		b.Run(string(d), func(b *testing.B) {
			ctx := context.Background()
			dsn, opts, drop := benchDatabase(b, d, b.TempDir())
			b.Cleanup(drop)
			st, err := agentstore.Open(ctx, dsn, opts...)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = st.Close() })
			if err := st.Migrate(ctx); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < b.N; i++ {
				if err := st.Migrate(ctx); err != nil {
					b.Fatal(err)
				}
			}
			total := time.Since(start)
			b.StopTimer()
			reportMigrate(b, total)
		})
	}
}
