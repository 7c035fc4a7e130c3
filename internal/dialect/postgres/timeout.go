package postgres

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/agentstore/agentstore/internal/dialect"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// PostgreSQL statement and lock timeouts (WithStatementTimeout,
// WithLockTimeout).
//
// The settings must live in the transaction, not the session, to work
// through a transaction pooler (PgBouncer hands each transaction whatever
// server connection is free, and refuses them as startup parameters). So
// Open wraps the pgx connector: every transaction the Store opens begins
// with one simple-protocol message "BEGIN ...; SET LOCAL statement_timeout
// = ...; SET LOCAL lock_timeout = ..." (one round trip, as a plain BEGIN),
// and a statement sent outside a transaction (autocommit: the fast paths,
// single reads, the publisher's pg_notify) is run as that BEGIN, the
// statement, COMMIT. A set_config inside the statement would not do:
// statement_timeout is armed when the statement starts, so it would bound
// only the next one. Without a timeout Open does not wrap anything.

// pgTimeoutSQL returns the SET LOCAL statements cfg's timeouts need, each
// after "; ", or "" when none is set.
func pgTimeoutSQL(cfg *dialect.Config) string {
	s := ""
	if cfg.StmtTimeout > 0 {
		s += "; SET LOCAL statement_timeout = " + strconv.FormatInt(dialect.TimeoutMS(cfg.StmtTimeout), 10)
	}
	if cfg.LockTimeout > 0 {
		s += "; SET LOCAL lock_timeout = " + strconv.FormatInt(dialect.TimeoutMS(cfg.LockTimeout), 10)
	}
	return s
}

// unboundedKey marks a context whose statements the timeout wrapper passes
// through unchanged (Migrate's non-transactional steps).
type unboundedKey struct{}

// withoutTimeouts returns ctx marked so that statements run with it are
// not wrapped in a bounded transaction.
func withoutTimeouts(ctx context.Context) context.Context {
	return context.WithValue(ctx, unboundedKey{}, true)
}

func unbounded(ctx context.Context) bool { return ctx.Value(unboundedKey{}) != nil }

// pgTimeoutConnector wraps pgx's connector so that its connections apply
// the timeouts.
type pgTimeoutConnector struct {
	inner driver.Connector
	set   string // pgTimeoutSQL
}

func (c *pgTimeoutConnector) Connect(ctx context.Context) (driver.Conn, error) {
	dc, err := c.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	sc, ok := dc.(*stdlib.Conn)
	if !ok {
		_ = dc.Close()
		return nil, errNotPgx
	}
	return &pgTimeoutConn{sc: sc, set: c.set}, nil
}

func (c *pgTimeoutConnector) Driver() driver.Driver { return c.inner.Driver() }

// pgTimeoutConn is a pgx connection whose transactions carry the timeouts.
// It forwards to *stdlib.Conn (Conn() reaches the *pgx.Conn, for LISTEN)
// and replaces what starts transactions and statements outside one.
type pgTimeoutConn struct {
	sc   *stdlib.Conn
	set  string
	inTx bool // a transaction of ours is open (BeginTx, or an autocommit statement's)
}

// Conn returns the underlying *pgx.Conn (as *stdlib.Conn does).
func (c *pgTimeoutConn) Conn() *pgx.Conn { return c.sc.Conn() }

// Prepare implements driver.Conn. The store prepares nothing; a prepared
// statement runs bounded only inside a transaction.
func (c *pgTimeoutConn) Prepare(query string) (driver.Stmt, error) { return c.sc.Prepare(query) }

// PrepareContext implements driver.ConnPrepareContext.
func (c *pgTimeoutConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	return c.sc.PrepareContext(ctx, query)
}

// Close implements driver.Conn.
func (c *pgTimeoutConn) Close() error { return c.sc.Close() }

// Ping implements driver.Pinger.
func (c *pgTimeoutConn) Ping(ctx context.Context) error { return c.sc.Ping(ctx) }

// CheckNamedValue implements driver.NamedValueChecker (pgx takes any value).
func (c *pgTimeoutConn) CheckNamedValue(v *driver.NamedValue) error { return c.sc.CheckNamedValue(v) }

var (
	_ driver.ConnBeginTx            = (*pgTimeoutConn)(nil)
	_ driver.ExecerContext          = (*pgTimeoutConn)(nil)
	_ driver.QueryerContext         = (*pgTimeoutConn)(nil)
	_ driver.SessionResetter        = (*pgTimeoutConn)(nil)
	_ driver.NamedValueChecker      = (*pgTimeoutConn)(nil)
	_ driver.Pinger                 = (*pgTimeoutConn)(nil)
	_ driver.ConnPrepareContext     = (*pgTimeoutConn)(nil)
	_ driver.RowsColumnTypeScanType = (*pgTimeoutRows)(nil)
)

// inTransaction reports whether a transaction is open on the connection:
// one of ours, or one begun some other way (a statement then belongs to it
// and must not be wrapped). TxStatus is the server's last reported state,
// read without a round trip.
func (c *pgTimeoutConn) inTransaction() bool {
	return c.inTx || c.sc.Conn().PgConn().TxStatus() != 'I'
}

// begin sends "BEGIN<mode>; SET LOCAL ..." in one simple-protocol message
// (pgx uses the simple protocol for a statement without arguments).
func (c *pgTimeoutConn) begin(ctx context.Context, mode string) error {
	if _, err := c.sc.Conn().Exec(ctx, "BEGIN"+mode+c.set); err != nil {
		c.abort(ctx)
		if c.sc.Conn().IsClosed() {
			return driver.ErrBadConn
		}
		return err
	}
	c.inTx = true
	return nil
}

// commit ends our transaction; a transaction the server had already
// aborted reports its rollback (pgx.ErrTxCommitRollback), as pgx does.
func (c *pgTimeoutConn) commit(ctx context.Context) error {
	c.inTx = false
	tag, err := c.sc.Conn().Exec(ctx, "COMMIT")
	if err != nil {
		if c.sc.Conn().PgConn().TxStatus() != 'I' {
			c.close()
		}
		return err
	}
	if tag.String() == "ROLLBACK" {
		return pgx.ErrTxCommitRollback
	}
	return nil
}

// abort rolls our transaction back; a connection that cannot is closed
// (database/sql then discards it), as pgx does.
func (c *pgTimeoutConn) abort(ctx context.Context) {
	c.inTx = false
	pc := c.sc.Conn()
	if pc.IsClosed() || pc.PgConn().TxStatus() == 'I' {
		return
	}
	if _, err := pc.Exec(ctx, "ROLLBACK"); err != nil {
		c.close()
	}
}

func (c *pgTimeoutConn) close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = c.sc.Conn().Close(ctx)
}

// Begin implements driver.Conn.
func (c *pgTimeoutConn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

// BeginTx implements driver.ConnBeginTx: BEGIN with the isolation level and
// access mode, and the timeouts, in one message.
func (c *pgTimeoutConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if unbounded(ctx) {
		return c.sc.BeginTx(ctx, opts)
	}
	if c.sc.Conn().IsClosed() {
		return nil, driver.ErrBadConn
	}
	mode := ""
	switch sql.IsolationLevel(opts.Isolation) {
	case sql.LevelDefault:
	case sql.LevelReadUncommitted:
		mode = " ISOLATION LEVEL READ UNCOMMITTED"
	case sql.LevelReadCommitted:
		mode = " ISOLATION LEVEL READ COMMITTED"
	case sql.LevelRepeatableRead, sql.LevelSnapshot:
		mode = " ISOLATION LEVEL REPEATABLE READ"
	case sql.LevelSerializable:
		mode = " ISOLATION LEVEL SERIALIZABLE"
	default:
		return nil, fmt.Errorf("unsupported isolation: %v", opts.Isolation)
	}
	if opts.ReadOnly {
		mode += " READ ONLY"
	}
	if err := c.begin(ctx, mode); err != nil {
		return nil, err
	}
	return &pgTimeoutTx{c: c, ctx: ctx}, nil
}

// ExecContext implements driver.ExecerContext: outside a transaction the
// statement runs in one of its own that carries the timeouts.
func (c *pgTimeoutConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	if c.inTransaction() || unbounded(ctx) {
		return c.sc.ExecContext(ctx, query, args)
	}
	if err := c.begin(ctx, ""); err != nil {
		return nil, err
	}
	res, err := c.sc.ExecContext(ctx, query, args)
	if err != nil {
		c.abort(ctx)
		return nil, err
	}
	if err := c.commit(ctx); err != nil {
		return nil, err
	}
	return res, nil
}

// QueryContext implements driver.QueryerContext: outside a transaction the
// statement runs in one of its own, committed when its rows are read to
// the end or closed (a statement with RETURNING may have written).
func (c *pgTimeoutConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	if c.inTransaction() || unbounded(ctx) {
		return c.sc.QueryContext(ctx, query, args)
	}
	if err := c.begin(ctx, ""); err != nil {
		return nil, err
	}
	rows, err := c.sc.QueryContext(ctx, query, args)
	if err != nil {
		c.abort(ctx)
		return nil, err
	}
	sr, ok := rows.(*stdlib.Rows)
	if !ok {
		_ = rows.Close()
		c.abort(ctx)
		return nil, errNotPgx
	}
	return &pgTimeoutRows{Rows: sr, c: c, ctx: ctx}, nil
}

// ResetSession implements driver.SessionResetter.
func (c *pgTimeoutConn) ResetSession(ctx context.Context) error {
	c.inTx = false // a connection left inside a transaction is discarded below
	return c.sc.ResetSession(ctx)
}

// pgTimeoutTx is a transaction begun by pgTimeoutConn.BeginTx.
type pgTimeoutTx struct {
	c   *pgTimeoutConn
	ctx context.Context
}

func (t *pgTimeoutTx) Commit() error { return t.c.commit(t.ctx) }

func (t *pgTimeoutTx) Rollback() error {
	t.c.inTx = false
	pc := t.c.sc.Conn()
	if pc.IsClosed() {
		return driver.ErrBadConn
	}
	if _, err := pc.Exec(t.ctx, "ROLLBACK"); err != nil {
		t.c.close()
		return err
	}
	return nil
}

// pgTimeoutRows are the rows of an autocommit query: the statement's
// transaction commits when they are read to the end (a failed commit is
// the error of that last Next) or closed.
type pgTimeoutRows struct {
	*stdlib.Rows
	c    *pgTimeoutConn
	ctx  context.Context
	done bool
}

// Next implements driver.Rows.
func (r *pgTimeoutRows) Next(dest []driver.Value) error {
	err := r.Rows.Next(dest)
	if errors.Is(err, io.EOF) {
		if ferr := r.finish(); ferr != nil {
			return ferr
		}
	}
	return err
}

// Close implements driver.Rows.
func (r *pgTimeoutRows) Close() error {
	err := r.Rows.Close()
	if ferr := r.finish(); err == nil {
		err = ferr
	}
	return err
}

// finish releases the rows and ends the statement's transaction: COMMIT
// after a statement that succeeded, ROLLBACK after one that failed (its
// error is reported by Next and Close already).
func (r *pgTimeoutRows) finish() error {
	if r.done {
		return nil
	}
	r.done = true
	if err := r.Rows.Close(); err != nil {
		r.c.abort(r.ctx)
		return nil
	}
	return r.c.commit(r.ctx)
}
