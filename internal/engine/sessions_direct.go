package engine

import (
	"database/sql"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/agentstore/agentstore/models"
)

// directTx runs the append path's statements on a transaction's
// connection without gorm's per-call statement building (the SQL scan for
// placeholders, a reflected AddVar per argument, a cloned Statement; for
// Raw().Scan also the rendering of every statement with its arguments for
// the row recorder), which cost an append about a fifth of its CPU. The
// statement still goes through the store's connection pool (so SQLite's
// parameter rewrite applies) and is reported to the store's gorm logger
// with its rows affected, as gorm reports it; driver errors are mapped by
// dbErr as before.
type directTx struct {
	tx       *gorm.DB
	numbered bool // placeholders are $1, $2, … (the dialector binds that way)
}

func newDirectTx(tx *gorm.DB) directTx {
	var b strings.Builder
	tx.Dialector.BindVarTo(&b, &gorm.Statement{DB: tx, Vars: []any{nil}}, nil)
	return directTx{tx: tx, numbered: b.String() != "?"}
}

// plainArgs replaces uuid.UUID arguments (and non-nil *uuid.UUID) by their
// text form, in place: the form their Value method gives every driver, so
// the stored value is the same, but pgx encodes a string directly where a
// uuid.UUID first fails its typed encode plans (building an error each
// time) before it falls back to calling Value.
func plainArgs(args []any) {
	for i, a := range args {
		switch v := a.(type) {
		case uuid.UUID:
			args[i] = v.String()
		case *uuid.UUID:
			if v != nil {
				args[i] = v.String()
			}
		}
	}
}

// bind rewrites the ? placeholders of q (none may be inside a literal)
// the way the dialector binds them.
func (d directTx) bind(q string) string {
	if !d.numbered {
		return q
	}
	var b strings.Builder
	b.Grow(len(q) + 16)
	for n := 1; ; n++ {
		i := strings.IndexByte(q, '?')
		if i < 0 {
			b.WriteString(q)
			return b.String()
		}
		b.WriteString(q[:i])
		b.WriteByte('$')
		b.WriteString(strconv.Itoa(n))
		q = q[i+1:]
	}
}

func (d directTx) trace(t0 time.Time, q string, args []any, rows int64, err error) {
	d.tx.Logger.Trace(d.tx.Statement.Context, t0, func() (string, int64) { return d.tx.Dialector.Explain(q, args...), rows }, err)
}

// exec runs a statement and returns its rows affected.
func (d directTx) exec(q string, args ...any) (int64, error) {
	n, err := d.execRaw(q, args...)
	if err != nil {
		return 0, dbErr(err)
	}
	return n, nil
}

// execRaw is exec with the driver's error as it came.
func (d directTx) execRaw(q string, args ...any) (int64, error) {
	q = d.bind(q)
	plainArgs(args)
	t0 := time.Now()
	res, err := d.tx.Statement.ConnPool.ExecContext(d.tx.Statement.Context, q, args...)
	n := int64(-1)
	if err == nil {
		n, err = res.RowsAffected()
	}
	d.trace(t0, q, args, n, err)
	return n, translateVia(d.tx, err)
}

// queryRow runs a query and scans its first row into dest; found reports
// whether there was a row.
func (d directTx) queryRow(q string, args []any, dest ...any) (bool, error) {
	n, err := d.each(q, args, func(rows *sql.Rows, i int64) error {
		if i > 0 {
			return nil
		}
		return rows.Scan(dest...)
	})
	if err != nil {
		return false, dbErr(err)
	}
	return n > 0, nil
}

// each runs a query and hands every row (and its index) to scan; it
// returns the number of rows and the driver's error as it came.
func (d directTx) each(q string, args []any, scan func(rows *sql.Rows, i int64) error) (n int64, err error) {
	q = d.bind(q)
	plainArgs(args)
	t0 := time.Now()
	defer func() { d.trace(t0, q, args, n, err) }()
	rows, err := d.tx.Statement.ConnPool.QueryContext(d.tx.Statement.Context, q, args...)
	if err != nil {
		return 0, translateVia(d.tx, err)
	}
	defer func() {
		if cerr := rows.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	for rows.Next() {
		if err := scan(rows, n); err != nil {
			return n, err
		}
		n++
	}
	return n, translateVia(d.tx, rows.Err())
}

// jsonArg is the statement argument of a JSON column: what j.Value()
// returns (NULL when empty, else the text).
func jsonArg(j models.JSON) any {
	if len(j) == 0 {
		return nil
	}
	return string(j)
}
