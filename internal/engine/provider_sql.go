package engine

import (
	"context"
	"database/sql"
	"encoding/base64"
	"strings"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"
)

func (p *gormProvider) tx(ctx context.Context, fn func(tx *gorm.DB) error) error {
	return p.s.db.WithContext(ctx).Transaction(fn)
}

// scanAll runs sql and scans every row into dest, like Raw(...).Scan(dest)
// (errors translated the same way) but without the recorder logger that
// GORM's Scan installs on every call: it renders the statement with all
// arguments inlined (logger.ExplainSQL) even when the Store's logger
// discards it, ~10 % of the client CPU of an orchestration on PostgreSQL
// with the many-parameter fetch and ack statements. The Store's logger
// still sees the statement.
func scanAll(db *gorm.DB, dest any, sql string, args ...any) error {
	switch dest.(type) {
	case *int64, *int, *string, *bool:
		// one column into a scalar: GORM's ScanRows would first try, and
		// fail (building an error), to parse dest as a model
		_, err := scanRow(db, sql, args, dest)
		return err
	}
	tx := rawStmt(db, sql, args)
	rows, err := tx.Rows()
	if err != nil {
		return err
	}
	if rows.Next() {
		err = tx.ScanRows(rows, dest)
	} else if rerr := translateVia(tx, rows.Err()); rerr != nil {
		err = tx.AddError(rerr)
	}
	if cerr := rows.Close(); err == nil && cerr != nil {
		err = tx.AddError(cerr)
	}
	return err
}

// scanRow runs sql through GORM (its callbacks and logger see it) and
// scans the first row's columns into dest; found reports whether there was
// a row. Unlike scanAll it does not map rows onto a model (GORM would parse
// dest as one on every call).
func scanRow(db *gorm.DB, sql string, args []any, dest ...any) (found bool, err error) {
	tx := rawStmt(db, sql, args)
	rows, err := tx.Rows()
	if err != nil {
		return false, err
	}
	if rows.Next() {
		found = true
		if err = rows.Scan(dest...); err != nil {
			err = tx.AddError(err)
		}
	} else if rerr := translateVia(tx, rows.Err()); rerr != nil {
		err = tx.AddError(rerr)
	}
	if cerr := rows.Close(); err == nil && cerr != nil {
		err = tx.AddError(cerr)
	}
	return found, err
}

// rawStmt is db.Raw(q, args...) for the provider's statements, without
// GORM's statement building where that changes nothing: when every
// argument is a plain value (plainVar), q has exactly one ? per argument
// and no @ (GORM's named arguments), the statement's SQL is q with its
// placeholders bound as the dialector binds them (directTx.bind) and its
// Vars are args, which is what Raw builds, byte by byte and with a
// reflective AddVar per argument (a large part of the client CPU of a
// fetch with its long claim statement). The statement still runs through
// GORM's callbacks and logger. Otherwise it is db.Raw.
func rawStmt(db *gorm.DB, q string, args []any) *gorm.DB {
	if strings.IndexByte(q, '@') >= 0 || strings.Count(q, "?") != len(args) {
		return db.Raw(q, args...)
	}
	for _, a := range args {
		if !plainVar(a) {
			return db.Raw(q, args...)
		}
	}
	tx := db.Raw("")
	tx.Statement.SQL.WriteString(newDirectTx(db).bind(q))
	tx.Statement.Vars = append(tx.Statement.Vars, args...)
	return tx
}

// plainVar reports an argument GORM's AddVar passes to the driver as it
// is (no list expansion, subquery, clause or named argument).
func plainVar(a any) bool {
	switch a.(type) {
	case nil, string, *string, int, *int, int32, *int32, int64, *int64, uint32, uint64, bool, *bool, float64, time.Time, *time.Time:
		return true
	}
	return false
}

// queryDirect runs query on db's connection pool (or transaction) without
// gorm's statement building: the ? placeholders are bound as the dialect
// binds them (none may be inside a literal; arguments are plain values),
// each row is handed to scan, the statement is reported to the Store's
// gorm logger like any other, and an error comes back as gorm returns it
// (translated by the dialector when the gorm.DB translates errors). It is
// for the provider's per-turn writes (the dialect's one-statement acks,
// EnqueueForOrchestrator), where gorm's placeholder scan of the long SQL
// text, its per-argument reflection and its row scanning by column name
// were a large part of the client CPU of an orchestration. Like directTx it
// bypasses gorm's callbacks; the fetches keep them (they are where a
// callback registered on the Store sees a failing long poll).
func queryDirect(db *gorm.DB, query string, args []any, scan func(rows *sql.Rows) error) error {
	_, err := newDirectTx(db).each(query, args, func(rows *sql.Rows, _ int64) error { return scan(rows) })
	return gormTranslate(db, err)
}

// execDirect is queryDirect for a statement that returns no rows.
func execDirect(db *gorm.DB, query string, args ...any) error {
	_, err := newDirectTx(db).execRaw(query, args...)
	return gormTranslate(db, err)
}

// gormTranslate translates a driver error the way gorm does for db (by
// its dialector, when the gorm.DB translates errors).
func gormTranslate(db *gorm.DB, err error) error {
	if err != nil && db.Config.TranslateError {
		if tr, ok := db.Dialector.(gorm.ErrorTranslator); ok {
			return tr.Translate(err)
		}
	}
	return err
}

func newLockToken() string { return "lock_" + uuid.NewString() }

// issuedToken reports whether stored, the stored part of a lease token,
// has the form newLockToken has given in every build ("lock_" and a UUID
// in its canonical form). One of another form (a forged or mangled token)
// cannot match a lock row, so its ack, abandon or renew fails with
// ErrInvalidLockToken without sending a statement: no lookup by token
// alone, which would touch every shard of a distributed table
// (docs/distributed.md).
func issuedToken(stored string) bool {
	u, ok := strings.CutPrefix(stored, "lock_")
	if !ok || len(u) != 36 {
		return false
	}
	_, err := uuid.Parse(u)
	return err == nil
}

// Orchestration lease tokens carry the instance: the token handed out is
// the random token stored in lock_token, a dot and the instance id in
// unpadded base64url. Ack, abandon and renew then pin every statement to
// the instance as well as the stored token (instanceCond), so each is
// routed to one shard when the provider tables are distributed by
// instance id (docs/distributed.md). The token stays opaque to callers. A
// token without that suffix (handed out before this build, or forged) is
// looked up by itself, as before: old leases stay valid across an upgrade.

// orchToken returns the lease token of a claim stored as stored on instance.
func orchToken(stored, instance string) string {
	return stored + "." + base64.RawURLEncoding.EncodeToString([]byte(instance))
}

// orchLease is a parsed orchestration lease token.
type orchLease struct {
	// stored is the token in the lock_token columns.
	stored string
	// instance is the instance the token names; "" for a token without one.
	instance string
}

// parseOrchToken splits an orchestration lease token (see orchToken); a
// token that does not carry an instance is its own stored token.
func parseOrchToken(tok string) orchLease {
	i := strings.LastIndexByte(tok, '.')
	if i <= 0 {
		return orchLease{stored: tok}
	}
	b, err := base64.RawURLEncoding.DecodeString(tok[i+1:])
	if err != nil || len(b) == 0 {
		return orchLease{stored: tok}
	}
	return orchLease{stored: tok[:i], instance: string(b)}
}

// cond returns the condition " AND instance_id = ?" and its argument when
// the lease names its instance, "" and none otherwise.
func (l orchLease) cond() (string, []any) {
	if l.instance == "" {
		return "", nil
	}
	return " AND instance_id = ?", []any{l.instance}
}

// args returns the stored token followed by the instance argument of cond.
func (l orchLease) args(before ...any) []any {
	_, ia := l.cond()
	return append(append(before, l.stored), ia...)
}

// durMS converts a duration to whole milliseconds, rounding up: a lock,
// lease or delay of 500 µs lasts 1 ms, never 0 (which would be expired or
// due at once).
func durMS(d time.Duration) int64 {
	if d <= 0 {
		return d.Milliseconds()
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// placeholders returns "?,?,...,?" for n values.
func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?,", n), ",")
}

func strArgs(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

func ptr[T any](v T) *T { return &v }

// writeTuples writes n copies of tuple, comma-separated (a VALUES list).
func writeTuples(b *strings.Builder, n int, tuple string) {
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(tuple)
	}
}
