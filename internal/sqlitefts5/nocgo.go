//go:build !cgo

// Package sqlitefts5 compiles SQLite's FTS5 module into a cgo build (see
// fts5.go). A CGO_ENABLED=0 build has nothing here: modernc.org/sqlite has
// FTS5 already.
package sqlitefts5
