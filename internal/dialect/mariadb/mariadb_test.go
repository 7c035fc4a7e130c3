package mariadb

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/agentstore/agentstore/internal/dialect"
	"github.com/agentstore/agentstore/repo"
)

// testDSN is AGENTSTORE_TEST_MARIADB_DSN or the local server's.
func testDSN() string {
	if v := os.Getenv("AGENTSTORE_TEST_MARIADB_DSN"); v != "" {
		return v
	}
	return "mysql://root@127.0.0.1:3306/test"
}

func TestMatchDSN(t *testing.T) {
	d := New()
	for _, c := range []struct {
		dsn, want string
		ok, err   bool
	}{
		{"mysql://root@127.0.0.1:3306/test", "root@tcp(127.0.0.1:3306)/test", true, false},
		{"mariadb://app:s3cret@db/agents?charset=utf8mb4", "app:s3cret@tcp(db:3306)/agents?charset=utf8mb4", true, false},
		{"root:pw@tcp(127.0.0.1:3306)/test?parseTime=true", "root:pw@tcp(127.0.0.1:3306)/test?parseTime=true", true, false},
		{"@unix(/run/mysqld/mysqld.sock)/test", "@unix(/run/mysqld/mysqld.sock)/test", true, false},
		{"mysql://root@127.0.0.1:3306", "", true, true},
		{"mysql://root@127.0.0.1/test?parseTime=maybe", "", true, true},
		{"postgres://root@127.0.0.1/test", "", false, false},
		{"sqlite:x.db", "", false, false},
	} {
		got, ok, err := d.MatchDSN(c.dsn)
		if ok != c.ok || (err != nil) != c.err || (!c.err && got != c.want) {
			t.Errorf("MatchDSN(%q) = %q, %v, %v; want %q, %v, err %v", dialect.RedactDSN(c.dsn), dialect.RedactDSN(got), ok, err,
				dialect.RedactDSN(c.want), c.ok, c.err)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("MatchDSN(%q): its error shows the password", dialect.RedactDSN(c.dsn))
		}
		if err != nil && !errors.Is(err, dialect.ErrInvalidConfig) {
			t.Errorf("MatchDSN(%q) error %v is not ErrInvalidConfig", dialect.RedactDSN(c.dsn), err)
		}
	}
}

func TestRedactNativeDSN(t *testing.T) {
	for i, dsn := range []string{"app:s3cret@tcp(db:3306)/agents", "mysql://app:s3cret@db/agents", "app:s3cret@tcp(db:3306)/agents?password=s3cret"} {
		if r := dialect.RedactDSN(dsn); strings.Contains(r, "s3cret") {
			t.Errorf("RedactDSN of DSN form %d shows the password", i)
		}
	}
}

// openTest opens the test server, or skips (fails with
// AGENTSTORE_REQUIRE_MARIADB=1) when it is unreachable.
func openTest(t *testing.T) *dialect.Conn {
	t.Helper()
	target, ok, err := New().MatchDSN(testDSN())
	if !ok || err != nil {
		t.Fatalf("test DSN: %v", err)
	}
	cfg := &dialect.Config{Pool: dialect.DefaultPool()}
	c, err := New().Open(context.Background(), target, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.SQLDB.Close() })
	if err := c.SQLDB.Ping(); err != nil {
		if os.Getenv("AGENTSTORE_REQUIRE_MARIADB") == "1" {
			t.Fatalf("MariaDB required but unreachable: %v", err)
		}
		t.Skipf("NOTICE: MariaDB unreachable (%v)", err)
	}
	return c
}

// TestSessionSettings: every connection quotes identifiers with double
// quotes, runs READ COMMITTED in UTC, whatever the server's defaults.
func TestSessionSettings(t *testing.T) {
	c := openTest(t)
	var mode, iso, tz string
	if err := c.SQLDB.QueryRow(`SELECT @@SESSION.sql_mode, @@SESSION.tx_isolation, @@SESSION.time_zone`).Scan(&mode, &iso, &tz); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(mode, "ANSI_QUOTES") || iso != "READ-COMMITTED" || tz != "+00:00" {
		t.Errorf("session: sql_mode %s, isolation %s, time zone %s", mode, iso, tz)
	}
	var one int
	if err := c.SQLDB.QueryRow(`SELECT "x"."usage" FROM (SELECT 1 AS "usage") AS "x"`).Scan(&one); err != nil || one != 1 {
		t.Errorf("double-quoted identifiers: %d, %v", one, err)
	}
}

// TestTranslateDriverError: the driver's errors of real statements map
// onto the sentinels.
func TestTranslateDriverError(t *testing.T) {
	c := openTest(t)
	db := c.SQLDB
	tbl := `"maria_tr_test"`
	if _, err := db.Exec(`CREATE TEMPORARY TABLE ` + tbl + ` ("id" VARCHAR(8) PRIMARY KEY, "doc" LONGTEXT CHECK (json_valid("doc")), "n" TINYINT)`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO `+tbl+` ("id") VALUES (?)`, "a"); err != nil {
		t.Fatal(err)
	}
	d := New().(dialect.DriverErrorTranslator)
	for _, c := range []struct {
		stmt string
		args []any
		want error
	}{
		{`INSERT INTO ` + tbl + ` ("id") VALUES (?)`, []any{"a"}, repo.ErrConflict},
		{`INSERT INTO ` + tbl + ` ("id") VALUES (?)`, []any{"much too long"}, repo.ErrInvalidInput},
		{`INSERT INTO ` + tbl + ` ("id", "doc") VALUES (?, ?)`, []any{"b", "{not json"}, repo.ErrInvalidInput},
		{`INSERT INTO ` + tbl + ` ("id", "n") VALUES (?, ?)`, []any{"c", 1000}, repo.ErrInvalidInput},
		{`SELECT "nope" FROM ` + tbl, nil, dialect.ErrSchemaBehind},
		{`SELECT 1 FROM "maria_no_such_table"`, nil, dialect.ErrSchemaBehind},
	} {
		_, err := db.Exec(c.stmt, c.args...)
		if err == nil {
			t.Errorf("%s: no error", c.stmt)
			continue
		}
		mapped, ok := d.TranslateDriverError(err)
		if !ok || !errors.Is(mapped, c.want) {
			t.Errorf("%s: %v mapped to %v (%v), want %v", c.stmt, err, mapped, ok, c.want)
		}
	}
}

func TestRewriteUpsert(t *testing.T) {
	u := New().(dialect.Upserter)
	for in, want := range map[string]string{
		`INSERT INTO "t" AS i (a, b) VALUES (?, ?) ON CONFLICT (a) DO UPDATE SET b = excluded.b, c = COALESCE(i.c, excluded.c)`: `INSERT INTO "t" (a, b) VALUES (?, ?) ON DUPLICATE KEY UPDATE b = VALUES(b), c = COALESCE(c, VALUES(c))`,
		`INSERT INTO "t" ("instance_id", "key") SELECT 1 ON CONFLICT (instance_id, "key") DO NOTHING`:                           `INSERT INTO "t" ("instance_id", "key") SELECT 1 ON DUPLICATE KEY UPDATE "instance_id" = VALUES("instance_id")`,
		`INSERT INTO "t" (a) VALUES (?) ON CONFLICT (a, b) DO UPDATE SET "value" = excluded."value"`:                            `INSERT INTO "t" (a) VALUES (?) ON DUPLICATE KEY UPDATE "value" = VALUES("value")`,
	} {
		if got := u.RewriteUpsert(in); got != want {
			t.Errorf("RewriteUpsert(%s)\n = %s\nwant %s", in, got, want)
		}
	}
}

// TestKeysetAfterReadsAPage: the page after a cursor half-way through
// 20,000 rows, in KeysetAfter's form, reads about a page of the (a, b)
// index (EXPLAIN ANALYZE r_rows), where MariaDB's reading of the row value
// (a, b) > (x, y) walks the index from its start.
func TestKeysetAfterReadsAPage(t *testing.T) {
	c := openTest(t)
	ctx := context.Background()
	conn, err := c.SQLDB.Conn(ctx) // the temporary table is the connection's
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, stmt := range []string{
		`CREATE TEMPORARY TABLE "keyset_probe" ("id" bigint NOT NULL PRIMARY KEY, "a" bigint NOT NULL, "b" varchar(36) NOT NULL, INDEX ("a", "b")) ENGINE=InnoDB`,
		`INSERT INTO "keyset_probe" SELECT seq, seq DIV 2, UUID() FROM seq_1_to_20000`,
		`ANALYZE TABLE "keyset_probe"`,
	} {
		if _, err := conn.ExecContext(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	var x int64
	var y string
	if err := conn.QueryRowContext(ctx, `SELECT "a", "b" FROM "keyset_probe" ORDER BY "a", "b" LIMIT 1 OFFSET 10000`).Scan(&x, &y); err != nil {
		t.Fatal(err)
	}
	rows, err := conn.QueryContext(ctx, `ANALYZE SELECT "a", "b" FROM "keyset_probe" WHERE `+New().(mdDialect).KeysetAfter(`"a"`, `"b"`)+
		` ORDER BY "a", "b" LIMIT 101`, x, x, y)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		for i, col := range cols {
			if col != "r_rows" {
				continue
			}
			var read float64
			if b, ok := vals[i].([]byte); !ok {
				t.Fatalf("r_rows %v", vals[i])
			} else if _, err := fmt.Sscan(string(b), &read); err != nil {
				t.Fatal(err)
			}
			if read > 202 {
				t.Errorf("the page after the cursor read %v rows for 101 (not a range of the index)", read)
			}
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
}
