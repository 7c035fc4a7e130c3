package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"

	"github.com/agentstore/agentstore/internal/dialect"

	"github.com/google/uuid"
	"gorm.io/gorm"
)

func TestLiteSQLRewrite(t *testing.T) {
	cases := []struct{ in, want string }{
		{"SELECT 1", "SELECT 1"},
		{"SELECT * FROM t WHERE id = ?", "SELECT * FROM t WHERE id = +?"},
		{"UPDATE t SET a = ?, b=? WHERE id = ? AND tok = ?", "UPDATE t SET a = +?, b=+? WHERE id = +? AND tok = +?"},
		{"SELECT * FROM t WHERE a <= ? AND b >= ? AND c != ? AND d < ?", "SELECT * FROM t WHERE a <= +? AND b >= +? AND c != +? AND d < ?"},
		{"SELECT * FROM t WHERE a IN (?, ?) LIMIT ? OFFSET ?", "SELECT * FROM t WHERE a IN (?, ?) LIMIT +? OFFSET +?"},
		{"SELECT * FROM t WHERE a IS ? AND b is\n?", "SELECT * FROM t WHERE a IS +? AND b is\n+?"},
		{"INSERT INTO t (a, b) VALUES (?, ?)", "INSERT INTO t (a, b) VALUES (?, ?)"},
		{"SELECT '= ?' FROM t WHERE x = ?", "SELECT '= ?' FROM t WHERE x = +?"},
		{`SELECT "a = ?" FROM t WHERE "col" = ?`, `SELECT "a = ?" FROM t WHERE "col" = +?`},
		{"SELECT 'it''s = ?' WHERE x = ?", "SELECT 'it''s = ?' WHERE x = +?"},
		{"SELECT t.limit FROM t WHERE t.offset ?", "SELECT t.limit FROM t WHERE t.offset ?"},
		{"SELECT x FROM t WHERE y = ?AND z=?", "SELECT x FROM t WHERE y = +?AND z=+?"},
		{"WHERE a = +?", "WHERE a = +?"},
	}
	for _, c := range cases {
		if got := liteSQL(c.in); got != c.want {
			t.Errorf("liteSQL(%q)\n got %q\nwant %q", c.in, got, c.want)
		}
	}
}

// liteStore is a SQLite file opened by the dialect as Open does, with a
// GORM handle on its pools.
type liteStore struct {
	db    *gorm.DB
	sqlDB *sql.DB
}

func (s liteStore) DB(ctx context.Context) *gorm.DB { return s.db.WithContext(ctx) }
func (s liteStore) SQLDB() *sql.DB                  { return s.sqlDB }

func openLite(t *testing.T) liteStore {
	t.Helper()
	cfg := &dialect.Config{Pool: dialect.PoolConfig{MaxOpenConns: 4}, SQLiteSync: "NORMAL"}
	conn, err := liteDialect{}.Open(context.Background(), filepath.Join(t.TempDir(), "lite.db"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	db, err := gorm.Open(conn.Gorm, &gorm.Config{SkipDefaultTransaction: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = conn.SQLDB.Close()
		if conn.WriteDB != nil {
			_ = conn.WriteDB.Close()
		}
	})
	return liteStore{db: db, sqlDB: conn.SQLDB}
}

// TestLiteSQLSemantics runs rewritten comparisons against real SQLite:
// "+?" must match exactly what "?" matched (text, integer, blob, NULL,
// uuid arguments) and keep the index.
func TestLiteSQLSemantics(t *testing.T) {
	ctx := context.Background()
	db := openLite(t).SQLDB()
	if _, err := db.ExecContext(ctx, `CREATE TABLE sem (id INTEGER PRIMARY KEY, t TEXT, n INTEGER, b BLOB, u uuid);
		CREATE INDEX sem_t ON sem (t)`); err != nil {
		t.Fatal(err)
	}
	u := uuid.New()
	if _, err := db.ExecContext(ctx, `INSERT INTO sem (id, t, n, b, u) VALUES (1, 'x', 7, x'0102', ?), (2, '7', NULL, NULL, NULL)`, u); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		where string
		arg   any
		want  int64
	}{
		{"t = ?", "x", 1}, {"t = ?", 7, 2}, {"n = ?", 7, 1}, {"n = ?", "7", 1}, {"b = ?", []byte{1, 2}, 1},
		{"u = ?", u, 1}, {"u = ?", u.String(), 1}, {"n IS ?", nil, 2},
	} {
		for _, q := range []string{"SELECT id FROM sem WHERE " + c.where, liteSQL("SELECT id FROM sem WHERE " + c.where)} {
			var id int64
			if err := db.QueryRowContext(ctx, q, c.arg).Scan(&id); err != nil || id != c.want {
				t.Errorf("%s with %v: id %d, err %v; want %d", q, c.arg, id, err, c.want)
			}
		}
	}
	var plan, a, b2 string
	if err := db.QueryRowContext(ctx, "EXPLAIN QUERY PLAN "+liteSQL("SELECT id FROM sem WHERE t = ?"), "x").Scan(&a, &b2, new(int), &plan); err != nil {
		t.Fatal(err)
	}
	if want := "SEARCH sem USING COVERING INDEX sem_t (t=?)"; plan != want {
		t.Errorf("plan of rewritten query = %q, want %q", plan, want)
	}
}

// TestLiteStoreTransactionsRewritten checks that the SQLite store's GORM
// handle, inside and outside transactions, goes through the rewriting pool
// and that nested transactions (savepoints) and rollbacks still work.
func TestLiteStoreTransactionsRewritten(t *testing.T) {
	ctx := context.Background()
	st := openLite(t)
	if _, ok := st.db.Statement.ConnPool.(*liteConnPool); !ok {
		t.Fatalf("SQLite store pool is %T, want *liteConnPool", st.db.Statement.ConnPool)
	}
	if d, err := st.DB(ctx).DB(); err != nil || d != st.SQLDB() {
		t.Fatalf("DB() = %v, %v", d, err)
	}
	if err := st.DB(ctx).Exec("CREATE TABLE kv (k TEXT PRIMARY KEY, v TEXT)").Error; err != nil {
		t.Fatal(err)
	}
	errBoom := errors.New("boom")
	err := st.DB(ctx).Transaction(func(tx *gorm.DB) error {
		if _, ok := tx.Statement.ConnPool.(*liteTx); !ok {
			t.Errorf("transaction pool is %T, want *liteTx", tx.Statement.ConnPool)
		}
		if err := tx.Exec("INSERT INTO kv (k, v) VALUES (?, ?)", "a", "1").Error; err != nil {
			return err
		}
		if err := tx.Transaction(func(inner *gorm.DB) error {
			return inner.Exec("UPDATE kv SET v = ? WHERE k = ?", "2", "a").Error
		}); err != nil {
			return err
		}
		// a failed nested transaction rolls back to its savepoint only
		if err := tx.Transaction(func(inner *gorm.DB) error {
			if err := inner.Exec("UPDATE kv SET v = ? WHERE k = ?", "3", "a").Error; err != nil {
				return err
			}
			return errBoom
		}); !errors.Is(err, errBoom) {
			t.Errorf("nested rollback returned %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var v string
	if err := st.DB(ctx).Raw("SELECT v FROM kv WHERE k = ?", "a").Scan(&v).Error; err != nil || v != "2" {
		t.Fatalf("v = %q, %v; want 2", v, err)
	}
	// a failed outer transaction leaves nothing behind
	_ = st.DB(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Exec("INSERT INTO kv (k, v) VALUES (?, ?)", "b", "1").Error; err != nil {
			return err
		}
		return errBoom
	})
	var n int64
	if err := st.DB(ctx).Raw("SELECT COUNT(*) FROM kv WHERE k = ?", "b").Scan(&n).Error; err != nil || n != 0 {
		t.Fatalf("rolled-back row count = %d, %v", n, err)
	}
}

func TestLiteReadOnlyRouting(t *testing.T) {
	for q, want := range map[string]bool{
		"SELECT 1": true, "  select * from t": true, "(SELECT 1) UNION (SELECT 2)": true, "VALUES (1)": true,
		"EXPLAIN QUERY PLAN SELECT 1": true, "explain select 1": true,
		"UPDATE t SET a = 1": false, "INSERT INTO t VALUES (1)": false, "DELETE FROM t": false,
		"WITH x AS (SELECT 1) UPDATE t SET a = 1": false, "PRAGMA foreign_keys": false, "BEGIN": false, "": false, "SEL": false,
	} {
		if got := readOnlySQL(q); got != want {
			t.Errorf("readOnlySQL(%q) = %v, want %v", q, got, want)
		}
	}
}
