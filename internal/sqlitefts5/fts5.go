//go:build cgo

// Package sqlitefts5 compiles SQLite's FTS5 module (fts5.c of the SQLite
// amalgamation that github.com/mattn/go-sqlite3 embeds, as a loadable
// extension) into a cgo build and registers it for every connection
// opened afterwards, so the cgo build's search index can be an FTS5 table
// without the sqlite_fts5 build tag.
package sqlitefts5

/*
#cgo CFLAGS: -DNDEBUG -O2
#cgo LDFLAGS: -lm
int sqlite3_auto_extension(void (*)(void));
int sqlite3_fts5_init(void*, char**, const void*);
static int agentstore_fts5_register(void) {
	return sqlite3_auto_extension((void (*)(void))sqlite3_fts5_init);
}
*/
import "C"

import "fmt"

// Register makes FTS5 available on every SQLite connection opened after
// it returns (sqlite3_auto_extension; registering again does nothing).
func Register() error {
	if rc := C.agentstore_fts5_register(); rc != 0 {
		return fmt.Errorf("sqlitefts5: sqlite3_auto_extension: result code %d", int(rc))
	}
	return nil
}
