package engine

import (
	"context"
	"database/sql"
	"errors"
	"sync/atomic"

	"gorm.io/gorm"
)

// closeGuard is the gorm.ConnPool every Store's GORM handle runs on: it
// forwards to the dialect's pool (a *sql.DB, or SQLite's liteConnPool)
// until Store.Close, and from then on refuses every statement and
// transaction with ErrClosed, so no call made after Close meets the
// driver's own "database is closed" text. A statement that passed the
// check and then failed because Close closed the pool under it is
// reported as ErrClosed too (the driver's error stays in the chain).
// Transactions begun before Close keep their connection until they end.
type closeGuard struct {
	inner  gorm.ConnPool
	closed atomic.Bool
}

var (
	_ gorm.ConnPool         = (*closeGuard)(nil)
	_ gorm.ConnPoolBeginner = (*closeGuard)(nil)
	_ gorm.GetDBConnector   = (*closeGuard)(nil)
)

func newCloseGuard(inner gorm.ConnPool) *closeGuard { return &closeGuard{inner: inner} }

// close marks the Store closed; it reports whether it was open.
func (g *closeGuard) close() bool { return g.closed.CompareAndSwap(false, true) }

// isClosed reports whether Store.Close was called.
func (g *closeGuard) isClosed() bool { return g.closed.Load() }

// closedError is ErrClosed for a statement that failed because the Store
// was closed; cause is the driver's error, nil when nothing was sent.
type closedError struct{ cause error }

func (e *closedError) Error() string { return ErrClosed.Error() }

func (e *closedError) Unwrap() []error {
	if e.cause == nil {
		return []error{ErrClosed}
	}
	return []error{ErrClosed, e.cause}
}

// after returns err, or ErrClosed around it when the Store was closed
// while the statement ran.
func (g *closeGuard) after(err error) error {
	if err != nil && g.closed.Load() && !errors.Is(err, ErrClosed) {
		return &closedError{cause: err}
	}
	return err
}

func (g *closeGuard) PrepareContext(ctx context.Context, query string) (*sql.Stmt, error) {
	if g.closed.Load() {
		return nil, &closedError{}
	}
	st, err := g.inner.PrepareContext(ctx, query)
	return st, g.after(err)
}

func (g *closeGuard) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if g.closed.Load() {
		return nil, &closedError{}
	}
	res, err := g.inner.ExecContext(ctx, query, args...)
	return res, g.after(err)
}

func (g *closeGuard) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if g.closed.Load() {
		return nil, &closedError{}
	}
	rows, err := g.inner.QueryContext(ctx, query, args...)
	return rows, g.after(err)
}

// QueryRowContext forwards: a *sql.Row cannot carry another error. The
// Store reads through QueryContext (GORM's Find, Scan, Rows); only
// Row() on Store.DB's handle gets here, and after Close it fails with
// the driver's error.
func (g *closeGuard) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	return g.inner.QueryRowContext(ctx, query, args...)
}

// BeginTx begins a transaction on the inner pool; the transaction itself
// (a *sql.Tx, or SQLite's liteTx) is returned as is.
func (g *closeGuard) BeginTx(ctx context.Context, opts *sql.TxOptions) (gorm.ConnPool, error) {
	if g.closed.Load() {
		return nil, &closedError{}
	}
	switch b := g.inner.(type) {
	case gorm.TxBeginner:
		tx, err := b.BeginTx(ctx, opts)
		if err != nil {
			return nil, g.after(err)
		}
		return tx, nil
	case gorm.ConnPoolBeginner:
		tx, err := b.BeginTx(ctx, opts)
		if err != nil {
			return nil, g.after(err)
		}
		return tx, nil
	}
	return nil, gorm.ErrInvalidTransaction
}

// GetDBConn returns the inner pool's *sql.DB (gorm.DB.DB()).
func (g *closeGuard) GetDBConn() (*sql.DB, error) {
	switch p := g.inner.(type) {
	case *sql.DB:
		return p, nil
	case gorm.GetDBConnector:
		return p.GetDBConn()
	}
	return nil, gorm.ErrInvalidDB
}

// PingContext pings the inner pool, ErrClosed after Close.
func (g *closeGuard) PingContext(ctx context.Context) error {
	if g.closed.Load() {
		return &closedError{}
	}
	if p, ok := g.inner.(interface{ PingContext(context.Context) error }); ok {
		return g.after(p.PingContext(ctx))
	}
	return nil
}
