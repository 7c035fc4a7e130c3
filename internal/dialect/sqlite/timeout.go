package sqlite

import (
	"context"
	"database/sql/driver"
	"errors"
	"io"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/agentstore/agentstore/internal/dialect"
	"github.com/agentstore/agentstore/repo"
)

// SQLite timeouts (WithStatementTimeout, WithLockTimeout) and the caller's
// deadline.
//
// SQLite has no server to bound a statement, and its busy handler (the
// wait for the database write lock another connection or process holds)
// sleeps through sqlite3_interrupt: a context that ends does not end the
// wait, which lasts the whole busy timeout. So Open gives every SQLite
// connection a thin wrapper (liteTimeoutConn) that
//
//   - runs each statement with a context bounded by the statement timeout,
//     so the driver interrupts a statement still running at its deadline
//     (sqlite3_interrupt) and the error is repo.ErrStatementTimeout;
//   - before a statement that may wait for the write lock (BEGIN, or a
//     write outside a transaction) shortens the connection's busy timeout
//     (PRAGMA busy_timeout, restored after) to what is left of the caller's
//     deadline or the statement timeout, when that is shorter than the
//     busy timeout (WithLockTimeout, default 10 s); a wait ended that way
//     is the caller's context.DeadlineExceeded or repo.ErrStatementTimeout,
//     one that ran the full busy timeout is repo.ErrLockTimeout.
//
// Without a statement timeout and a deadline shorter than the busy timeout
// the wrapper sends nothing of its own.

// liteDefaultBusy is the busy timeout Open sets without WithLockTimeout.
const liteDefaultBusy = 10 * time.Second

// liteBusy returns the busy timeout of cfg's connections.
func liteBusy(cfg *dialect.Config) time.Duration {
	if cfg.LockTimeout > 0 {
		return time.Duration(dialect.TimeoutMS(cfg.LockTimeout)) * time.Millisecond
	}
	return liteDefaultBusy
}

// liteConnector opens the build's driver's connections on dsn.
type liteConnector struct{ dsn string }

func (c *liteConnector) Connect(context.Context) (driver.Conn, error) {
	return liteDriver().Open(c.dsn)
}
func (c *liteConnector) Driver() driver.Driver { return liteDriver() }

// liteTimeoutConnector opens the build's driver's connections on dsn
// wrapped in liteTimeoutConn.
type liteTimeoutConnector struct {
	dsn  string
	busy time.Duration // the DSN's busy timeout
	stmt time.Duration // WithStatementTimeout, 0 = off
}

// liteDriverConn is what both drivers' connections implement.
type liteDriverConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ExecerContext
	driver.QueryerContext
	driver.ConnPrepareContext
	driver.Pinger
}

func (c *liteTimeoutConnector) Connect(context.Context) (driver.Conn, error) {
	dc, err := liteDriver().Open(c.dsn)
	if err != nil {
		return nil, err
	}
	sc, ok := dc.(liteDriverConn)
	if !ok {
		_ = dc.Close()
		return nil, errors.New("agentstore: the SQLite driver's connection lacks the context methods")
	}
	return &liteTimeoutConn{sc: sc, busy: c.busy, stmt: c.stmt}, nil
}

func (c *liteTimeoutConnector) Driver() driver.Driver { return liteDriver() }

// liteTimeoutConn is a SQLite connection that bounds its statements and
// its busy waits (see above). inTx tracks whether a transaction begun
// through BeginTx is open (a statement inside it never waits for the
// write lock: BEGIN IMMEDIATE took it).
type liteTimeoutConn struct {
	sc   liteDriverConn
	busy time.Duration
	stmt time.Duration
	inTx bool
	// stmts: compiled statements by text, when the driver keeps none
	// itself (liteConnStmtCache > 0; see cachedStmt).
	stmts map[string]*liteStmt
}

// liteStmt is a cached compiled statement; busy while rows of it are open
// (a second use meanwhile compiles its own).
type liteStmt struct {
	st   driver.Stmt
	busy bool
}

// cachedStmt returns q's compiled statement from the connection's cache,
// compiling and caching it first, or nil when the build's driver caches
// statements itself (liteConnStmtCache 0), q may hold several statements
// (a ';'), its cached statement is in use, or it does not compile (the
// uncached path then reports the error). At liteConnStmtCache statements
// an idle one is closed to make room. Reusing the compiled statement is
// what mattn/go-sqlite3's _stmt_cache_size does (see pool.go): an insert
// into messages compiles the search triggers with it.
func (c *liteTimeoutConn) cachedStmt(ctx context.Context, q string) *liteStmt {
	if liteConnStmtCache == 0 || strings.IndexByte(q, ';') >= 0 {
		return nil
	}
	if s, ok := c.stmts[q]; ok {
		if s.busy {
			return nil
		}
		return s
	}
	st, err := c.sc.PrepareContext(ctx, q)
	if err != nil {
		return nil
	}
	if _, ok := st.(driver.StmtExecContext); !ok {
		_ = st.Close()
		return nil
	}
	if _, ok := st.(driver.StmtQueryContext); !ok {
		_ = st.Close()
		return nil
	}
	if c.stmts == nil {
		c.stmts = make(map[string]*liteStmt, liteConnStmtCache)
	}
	if len(c.stmts) >= liteConnStmtCache {
		for k, old := range c.stmts {
			if !old.busy {
				_ = old.st.Close()
				delete(c.stmts, k)
				break
			}
		}
	}
	s := &liteStmt{st: st}
	c.stmts[q] = s
	return s
}

var (
	_ driver.ConnBeginTx        = (*liteTimeoutConn)(nil)
	_ driver.ExecerContext      = (*liteTimeoutConn)(nil)
	_ driver.QueryerContext     = (*liteTimeoutConn)(nil)
	_ driver.ConnPrepareContext = (*liteTimeoutConn)(nil)
	_ driver.Pinger             = (*liteTimeoutConn)(nil)
)

func (c *liteTimeoutConn) Prepare(q string) (driver.Stmt, error) { return c.sc.Prepare(q) }
func (c *liteTimeoutConn) PrepareContext(ctx context.Context, q string) (driver.Stmt, error) {
	return c.sc.PrepareContext(ctx, q)
}
func (c *liteTimeoutConn) Close() error {
	for _, s := range c.stmts {
		_ = s.st.Close()
	}
	c.stmts = nil
	return c.sc.Close()
}
func (c *liteTimeoutConn) Ping(ctx context.Context) error { return c.sc.Ping(ctx) }
func (c *liteTimeoutConn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

// Why a busy wait was shortened.
const (
	busyFull     = iota // not shortened: the busy timeout (repo.ErrLockTimeout)
	busyStmt            // to the statement timeout
	busyDeadline        // to the caller's deadline
)

// bound returns ctx bounded by the statement timeout (ctx itself when off).
func (c *liteTimeoutConn) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if c.stmt > 0 {
		return context.WithTimeout(ctx, c.stmt)
	}
	return ctx, func() {}
}

// shorten sets the busy timeout for one lock wait to the statement timeout
// or what is left of ctx's deadline when either is shorter than the busy
// timeout; it returns why, and restore undoes it.
func (c *liteTimeoutConn) shorten(ctx context.Context) (why int, restore func()) {
	wait, why := c.busy, busyFull
	if c.stmt > 0 && c.stmt < wait {
		wait, why = c.stmt, busyStmt
	}
	if dl, ok := ctx.Deadline(); ok {
		if left := time.Until(dl); left < wait {
			wait, why = max(left, 0), busyDeadline
		}
	}
	if why == busyFull {
		return why, func() {}
	}
	if err := c.setBusy(wait); err != nil {
		return busyFull, func() {}
	}
	return why, func() { _ = c.setBusy(c.busy) }
}

func (c *liteTimeoutConn) setBusy(d time.Duration) error {
	_, err := c.sc.ExecContext(context.Background(), "PRAGMA busy_timeout = "+strconv.FormatInt(dialect.TimeoutMS(d), 10), nil)
	return err
}

// errStmtInterrupted is the cause of a statement interrupted at the
// statement timeout when the driver reported it as a context error.
var errStmtInterrupted = errors.New("sqlite: statement interrupted at the statement timeout")

// mapLiteErr classifies err of a statement run with bctx (bounded from ctx)
// after a busy wait shortened for why.
func mapLiteErr(ctx, bctx context.Context, why int, err error) error {
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err() // the caller's own deadline or cancellation
	}
	if bctx.Err() != nil {
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			// the driver reports the interrupt as the bound's context
			// error (modernc.org/sqlite); the caller's context did not end
			err = errStmtInterrupted
		}
		return &dialect.Fault{Kind: repo.ErrStatementTimeout, Cause: err}
	}
	if code, _, _, ok := liteErrCode(err); ok && code == codeBusy {
		switch why {
		case busyStmt:
			return &dialect.Fault{Kind: repo.ErrStatementTimeout, Cause: err}
		case busyDeadline:
			return context.DeadlineExceeded
		}
	}
	return err
}

// BeginTx implements driver.ConnBeginTx: BEGIN (IMMEDIATE, from the DSN)
// waits for the write lock at most as long as the caller's deadline and
// the statement timeout allow.
func (c *liteTimeoutConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	bctx, cancel := c.bound(ctx)
	defer cancel()
	why, restore := c.shorten(ctx)
	// The driver gets the caller's ctx, not the bound: modernc.org/sqlite
	// keeps BeginTx's context for the COMMIT's lock wait, so a bound
	// cancelled on return would fail the commit. The BEGIN's lock wait is
	// bounded by the shortened busy timeout instead.
	tx, err := c.sc.BeginTx(ctx, opts)
	restore()
	if err != nil {
		return nil, mapLiteErr(ctx, bctx, why, err)
	}
	c.inTx = true
	return &liteTimeoutTx{tx: tx, c: c}, nil
}

// liteTimeoutTx ends a liteTimeoutConn's transaction.
type liteTimeoutTx struct {
	tx driver.Tx
	c  *liteTimeoutConn
}

func (t *liteTimeoutTx) Commit() error {
	t.c.inTx = false
	return t.tx.Commit()
}

func (t *liteTimeoutTx) Rollback() error {
	t.c.inTx = false
	return t.tx.Rollback()
}

// waitsForWriteLock reports whether q, run outside a transaction, may wait
// for the database write lock: not a plain read, not a PRAGMA.
func waitsForWriteLock(q string) bool {
	if readOnlySQL(q) {
		return false
	}
	t := strings.TrimLeft(q, " \t\r\n")
	return len(t) < 6 || !strings.EqualFold(t[:6], "PRAGMA")
}

// ExecContext implements driver.ExecerContext.
func (c *liteTimeoutConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	bctx, cancel := c.bound(ctx)
	defer cancel()
	why, restore := busyFull, func() {}
	if waitsForWriteLock(q) && !c.inTx {
		why, restore = c.shorten(ctx)
	}
	var res driver.Result
	var err error
	if st := c.cachedStmt(bctx, q); st != nil {
		res, err = st.st.(driver.StmtExecContext).ExecContext(bctx, args)
	} else {
		res, err = c.sc.ExecContext(bctx, q, args)
	}
	restore()
	if err != nil {
		return nil, mapLiteErr(ctx, bctx, why, err)
	}
	return res, nil
}

// QueryContext implements driver.QueryerContext.
func (c *liteTimeoutConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	bctx, cancel := c.bound(ctx)
	why, restore := busyFull, func() {}
	if waitsForWriteLock(q) && !c.inTx {
		why, restore = c.shorten(ctx)
	}
	var rows driver.Rows
	var err error
	st := c.cachedStmt(bctx, q)
	if st != nil {
		rows, err = st.st.(driver.StmtQueryContext).QueryContext(bctx, args)
	} else {
		rows, err = c.sc.QueryContext(bctx, q, args)
	}
	if err != nil {
		err = mapLiteErr(ctx, bctx, why, err) // before cancel
		restore()
		cancel()
		return nil, err
	}
	if st != nil {
		st.busy = true
	}
	return &liteTimeoutRows{rows: rows, ctx: ctx, bctx: bctx, why: why, done: func() {
		if st != nil {
			st.busy = false
		}
		restore()
		cancel()
	}}, nil
}

// liteTimeoutRows are the rows of a bounded query: their errors are
// classified like the statement's, and closing them restores the busy
// timeout and releases the bound. The driver's column-type methods pass
// through.
type liteTimeoutRows struct {
	rows      driver.Rows
	ctx, bctx context.Context
	why       int
	done      func()
}

var (
	_ driver.RowsColumnTypeDatabaseTypeName = (*liteTimeoutRows)(nil)
	_ driver.RowsColumnTypeScanType         = (*liteTimeoutRows)(nil)
	_ driver.RowsColumnTypeNullable         = (*liteTimeoutRows)(nil)
)

// Columns implements driver.Rows.
func (r *liteTimeoutRows) Columns() []string { return r.rows.Columns() }

// Next implements driver.Rows.
func (r *liteTimeoutRows) Next(dest []driver.Value) error {
	err := r.rows.Next(dest)
	if err != nil && !errors.Is(err, io.EOF) {
		return mapLiteErr(r.ctx, r.bctx, r.why, err)
	}
	return err
}

// Close implements driver.Rows.
func (r *liteTimeoutRows) Close() error {
	err := r.rows.Close()
	if r.done != nil {
		r.done()
		r.done = nil
	}
	return err
}

// ColumnTypeDatabaseTypeName implements driver.RowsColumnTypeDatabaseTypeName.
func (r *liteTimeoutRows) ColumnTypeDatabaseTypeName(i int) string {
	if t, ok := r.rows.(driver.RowsColumnTypeDatabaseTypeName); ok {
		return t.ColumnTypeDatabaseTypeName(i)
	}
	return ""
}

// ColumnTypeScanType implements driver.RowsColumnTypeScanType.
func (r *liteTimeoutRows) ColumnTypeScanType(i int) reflect.Type {
	if t, ok := r.rows.(driver.RowsColumnTypeScanType); ok {
		return t.ColumnTypeScanType(i)
	}
	return reflect.TypeFor[any]()
}

// ColumnTypeNullable implements driver.RowsColumnTypeNullable.
func (r *liteTimeoutRows) ColumnTypeNullable(i int) (nullable, ok bool) {
	if t, ok := r.rows.(driver.RowsColumnTypeNullable); ok {
		return t.ColumnTypeNullable(i)
	}
	return false, false
}
