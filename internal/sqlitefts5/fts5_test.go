//go:build cgo

package sqlitefts5_test

import (
	"database/sql"
	"testing"

	_ "github.com/mattn/go-sqlite3"

	"github.com/agentstore/agentstore/internal/sqlitefts5"
)

// TestFTS5SourceID: after Register, a mattn/go-sqlite3 connection has FTS5,
// compiled from the same SQLite source as the linked library (fts5.c is
// regenerated with gen.sh when go.mod moves mattn/go-sqlite3), and an FTS5
// table answers a MATCH.
func TestFTS5SourceID(t *testing.T) {
	if err := sqlitefts5.Register(); err != nil {
		t.Fatal(err)
	}
	if err := sqlitefts5.Register(); err != nil { // again: a no-op
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite3", ":memory:")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var lib, fts string
	if err := db.QueryRow(`SELECT sqlite_source_id(), fts5_source_id()`).Scan(&lib, &fts); err != nil {
		t.Fatal(err)
	}
	if "fts5: "+lib != fts {
		t.Fatalf("FTS5 source %q, SQLite %q: run gen.sh", fts, lib)
	}
	for _, q := range []string{
		`CREATE VIRTUAL TABLE f USING fts5(body, tokenize=unicode61)`,
		`INSERT INTO f(rowid, body) VALUES (7, 'Café au lait'), (8, 'tea')`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	var id int64
	if err := db.QueryRow(`SELECT rowid FROM f WHERE f MATCH '"cafe"'`).Scan(&id); err != nil || id != 7 {
		t.Fatalf("match: %d, %v", id, err)
	}
}
