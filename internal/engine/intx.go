package engine

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"time"

	"gorm.io/gorm"

	"github.com/agentstore/agentstore/internal/dialect"
	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo"
)

// TxView is the session API of a Store bound to a transaction the
// application owns (Store.InTx, Store.InSQLTx, and the same on a
// TenantView): the calls of its Sessions and SessionQueue run as statements
// of that transaction, so they commit with the application's own rows when
// the application commits and vanish when it rolls back. The Store neither
// commits nor rolls back the transaction.
//
// Every call runs in a savepoint of the transaction: a call that fails
// (ErrNotFound, ErrDuplicate, a stale version, a database error) is rolled
// back to where it began and the transaction goes on; the application may
// still commit what it and the other calls wrote. A call made after the
// transaction ended is ErrInvalidInput; on PostgreSQL so is a call made
// after one of the application's own statements failed (the transaction is
// aborted until the application rolls it back, or back to a savepoint of
// its own).
//
// Allowed: every method of repo.Sessions and repo.SessionQueue, with these
// differences from the same call on the Store:
//   - Nothing commits before the application does; Complete, Fail,
//     Release, AppendMessages and Dequeue return before their commit, and
//     their writes are durable only with the application's commit.
//     WithSessionLock holds the session's lock until the application's
//     transaction ends, not until fn returns.
//   - Group commit does not apply: each call is its own statements in the
//     transaction. A Dequeue's claim commits synchronously with the
//     transaction (on the Store it commits asynchronously).
//   - A Dequeue with DequeueParams.Wait > 0 is refused with
//     ErrInvalidInput: a transaction does not see items committed while it
//     waits. Dequeue without Wait claims what the transaction sees.
//   - CleanupExpired and PurgeFinished delete all their batches in the
//     transaction (on the Store each batch commits on its own).
//   - Wake-ups are sent at the application's commit: on PostgreSQL a
//     NOTIFY is part of the transaction (one per kind per TxView), so
//     waiting Dequeues and change-feed watches of every Store, this one
//     included, wake when it commits and not when it rolls back; on SQLite
//     the Stores' data_version watchers see the commit.
//   - WithStatementTimeout and WithLockTimeout apply only to transactions
//     the Store began (Store.BeginTx, Store.BeginSQLTx): set the
//     database's own timeouts for a transaction begun elsewhere.
//
// A TxView serialises its calls (a transaction runs one statement at a
// time); use it only while its transaction is open, and from one
// goroutine at a time like the transaction itself.
type TxView struct {
	st       *Store
	tx       *gorm.DB // the Store's GORM configuration on the application's transaction
	tenant   *string
	scopeErr error

	mu   sync.Mutex
	sent map[string]bool // wake-up kinds already sent in the transaction (guarded by mu)
}

// txSavepoint names the savepoint of each TxView call.
const txSavepoint = "agentstore_call"

// InTx returns the session API bound to tx, a transaction of the
// application's *gorm.DB (from Begin or inside Transaction), on the Store's
// database. tx's own GORM settings (naming, logger, hooks) are not used:
// the Store's are. See TxView for what is allowed inside.
//
// Refused: a nil tx, a *gorm.DB that is not in a transaction, a
// transaction that already ended, or tx.Error set: ErrInvalidInput. A
// transaction on another database: ErrInvalidConfig. What is detected:
// on PostgreSQL a probe in the transaction compares the database, the
// server's start time and the table the Store's sessions table name
// resolves to with the Store's own; on SQLite the transaction must have
// been begun on the Store's write connection (Store.BeginTx,
// Store.BeginSQLTx or Store.DB(ctx).Begin()) — a transaction on another
// *sql.DB, even of the same file, would wait for the Store's writer or make
// it wait — or, for a Store made by New, on the *gorm.DB's pool. A store
// after Close: ErrClosed. The probe is one statement in tx.
func (s *Store) InTx(ctx context.Context, tx *gorm.DB) (*TxView, error) {
	return s.inTxView(ctx, tx, nil, nil)
}

// InSQLTx is InTx for a database/sql transaction (from (*sql.DB).BeginTx),
// with the same refusals (a nil tx is ErrInvalidInput). On SQLite begin it
// with Store.BeginSQLTx (the Store's write connection).
func (s *Store) InSQLTx(ctx context.Context, tx *sql.Tx) (*TxView, error) {
	if tx == nil {
		return nil, invalidf("in transaction: nil *sql.Tx")
	}
	return s.inSQLTx(ctx, tx, nil, nil)
}

// InTx is Store.InTx scoped to the view's tenant: the TxView's calls see
// and write only the tenant's sessions, as the view's own calls do. An
// invalid tenant makes every call of the TxView fail with ErrInvalidInput.
func (v *TenantView) InTx(ctx context.Context, tx *gorm.DB) (*TxView, error) {
	t := v.tenant
	return v.st.inTxView(ctx, tx, &t, v.err)
}

// InSQLTx is Store.InSQLTx scoped to the view's tenant (see InTx).
func (v *TenantView) InSQLTx(ctx context.Context, tx *sql.Tx) (*TxView, error) {
	if tx == nil {
		return nil, invalidf("in transaction: nil *sql.Tx")
	}
	t := v.tenant
	return v.st.inSQLTx(ctx, tx, &t, v.err)
}

// BeginTx begins a transaction on the Store's own pool — on SQLite its
// write connection, whose transactions take the write lock at BEGIN — and
// returns it as a GORM handle for InTx and the application's own
// statements. The handle is the Store's: its naming strategy adds the
// Store's table prefix to model-derived table names (as DB does), so name
// the application's tables explicitly (Table, or raw SQL). The application
// commits or rolls it back. On SQLite, while it is open every other write
// through the Store waits for it: write through the TxView, never through
// the Store itself, until it ends. A Store after Close: ErrClosed.
func (s *Store) BeginTx(ctx context.Context, opts *sql.TxOptions) (*gorm.DB, error) {
	tx := s.db.WithContext(ctx).Begin(opts)
	if tx.Error != nil {
		return nil, fmt.Errorf("begin transaction: %w", dbErr(tx.Error))
	}
	return tx, nil
}

// BeginSQLTx is BeginTx for database/sql: a *sql.Tx on the Store's own
// pool (on SQLite its write connection), for InSQLTx and the application's
// own statements, with the same caveats. A Store after Close: ErrClosed.
func (s *Store) BeginSQLTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error) {
	if s.guard.isClosed() {
		return nil, fmt.Errorf("begin transaction: %w", &closedError{})
	}
	db := s.sqlDB
	if s.writeDB != nil {
		db = s.writeDB
	}
	tx, err := db.BeginTx(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("begin transaction: %w", dbErr(s.guard.after(translateVia(s.db, err))))
	}
	return tx, nil
}

func (s *Store) inTxView(ctx context.Context, tx *gorm.DB, tenant *string, scopeErr error) (*TxView, error) {
	if tx == nil {
		return nil, invalidf("in transaction: nil *gorm.DB")
	}
	if tx.Error != nil {
		return nil, invalidf("in transaction: the *gorm.DB carries an error: %v", tx.Error)
	}
	if tx.Statement == nil || tx.Statement.ConnPool == nil {
		return nil, invalidf("in transaction: the *gorm.DB has no connection (not from gorm.Open)")
	}
	return s.bindTx(ctx, tx.Statement.ConnPool, tenant, scopeErr)
}

func (s *Store) inSQLTx(ctx context.Context, tx *sql.Tx, tenant *string, scopeErr error) (*TxView, error) {
	return s.bindTx(ctx, tx, tenant, scopeErr)
}

// bindTx checks the application's transaction pool and returns its TxView.
func (s *Store) bindTx(ctx context.Context, pool gorm.ConnPool, tenant *string, scopeErr error) (*TxView, error) {
	if ctx == nil {
		return nil, invalidf("in transaction: nil context")
	}
	if s.guard.isClosed() {
		return nil, fmt.Errorf("in transaction: %w", &closedError{})
	}
	if c, ok := pool.(gorm.TxCommitter); !ok || c == nil {
		return nil, invalidf("in transaction: the handle is not in a transaction (begin one with Begin or Transaction, or Store.BeginTx)")
	}
	if err := s.checkTxPool(pool); err != nil {
		return nil, err
	}
	g := s.db.Session(&gorm.Session{NewDB: true, Context: ctx})
	g.Statement.ConnPool = pool
	// A transaction of the Store's own pool is on its database: only
	// check that it is still open (and read no identity on the pool, which
	// may have no connection to spare).
	own, _ := txOnPool(sqlTxOf(pool), s.sqlDB)
	if err := s.probeTx(ctx, g, !own); err != nil {
		return nil, err
	}
	return &TxView{st: s, tx: g, tenant: tenant, scopeErr: scopeErr, sent: map[string]bool{}}, nil
}

// checkTxPool refuses, on a single-writer database, a transaction that was
// not begun on the Store's write pool (when the pool can be told).
func (s *Store) checkTxPool(pool gorm.ConnPool) error {
	if !s.has(CapSingleWriter) {
		return nil
	}
	want := s.writeDB
	if want == nil {
		want = s.sqlDB
	}
	tx := sqlTxOf(pool)
	if is, known := txOnPool(tx, want); !known || is {
		return nil
	}
	if is, _ := txOnPool(tx, s.sqlDB); is {
		return configf("in transaction: the transaction was begun on the Store's read pool (Store.SQLDB): begin it with Store.BeginTx or Store.BeginSQLTx, on the Store's write connection")
	}
	return configf("in transaction: the transaction was not begun on the Store's connection pool: on SQLite begin it with Store.BeginTx or Store.BeginSQLTx (another pool's writer would wait for the Store's, or make it wait)")
}

// sqlTxOf returns the *sql.Tx under a transaction's connection pool, or
// nil when it cannot be told.
func sqlTxOf(pool gorm.ConnPool) *sql.Tx {
	for range 4 {
		switch p := pool.(type) {
		case *sql.Tx:
			return p
		case *gorm.PreparedStmtTX:
			pool = p.Tx
		case interface{ SQLTx() *sql.Tx }:
			return p.SQLTx()
		default:
			return nil
		}
	}
	return nil
}

// txOnPool reports whether tx was begun on db; known is false when that
// cannot be told (database/sql keeps a transaction's pool in an unexported
// field, read here by reflection).
func txOnPool(tx *sql.Tx, db *sql.DB) (is, known bool) {
	if tx == nil || db == nil {
		return false, false
	}
	f := reflect.ValueOf(tx).Elem().FieldByName("db")
	if !f.IsValid() || f.Type() != reflect.TypeFor[*sql.DB]() || f.IsNil() {
		return false, false
	}
	return f.Pointer() == reflect.ValueOf(db).Pointer(), true
}

// probeTx runs one statement in the application's transaction: it fails
// when the transaction ended, and with compare on a dialect with
// dialect.TxIdentity it compares the transaction's database with the
// Store's.
func (s *Store) probeTx(ctx context.Context, g *gorm.DB, compare bool) error {
	ti, ok := s.d.(dialect.TxIdentity)
	ok = ok && compare
	q := "SELECT 'ok'"
	if ok {
		q = ti.IdentitySQL(s.quoted(models.TableSessions))
	}
	var got sql.NullString
	if _, err := newDirectTx(g).queryRow(q, nil, &got); err != nil {
		return fmt.Errorf("in transaction: %w", txEnded(err))
	}
	if !ok {
		return nil
	}
	want, err := s.identity(ctx, false)
	if err == nil && got.String != want {
		// the kept identity may be stale (a server restart): read it again
		want, err = s.identity(ctx, true)
	}
	if err != nil {
		return fmt.Errorf("in transaction: read the Store's database identity: %w", err)
	}
	if got.String != want {
		return configf("in transaction: the transaction is on another database than the Store's, or its search_path resolves the Store's tables to other ones")
	}
	return nil
}

// identity returns (and keeps) the Store's database identity
// (dialect.TxIdentity), read on the Store's own pool the first time or
// with fresh.
func (s *Store) identity(ctx context.Context, fresh bool) (string, error) {
	if p := s.txIdent.Load(); p != nil && !fresh {
		return *p, nil
	}
	var v sql.NullString
	found, err := newDirectTx(s.db.WithContext(ctx)).queryRow(s.d.(dialect.TxIdentity).IdentitySQL(s.quoted(models.TableSessions)), nil, &v)
	if err != nil {
		return "", err
	}
	if !found {
		return "", fmt.Errorf("no identity row: %w", ErrRetryable)
	}
	s.txIdent.Store(&v.String)
	return v.String, nil
}

// txEnded maps the error of a statement on a transaction that already
// ended to ErrInvalidInput.
func txEnded(err error) error {
	if errors.Is(err, sql.ErrTxDone) {
		return fmt.Errorf("%w: the application's transaction has already ended (committed or rolled back): %w", ErrInvalidInput, err)
	}
	return err
}

// Sessions returns the session repository bound to the transaction (see
// TxView for what is allowed).
func (v *TxView) Sessions() repo.Sessions {
	var a repo.Sessions = txSessions{sessionsAPI{v.store(v.tx)}, v}
	if v.st.tel != nil {
		a = tracedSessions{a, v.st.tel}
	}
	return a
}

// SessionQueue returns the session queue bound to the transaction (see
// TxView for what is allowed).
func (v *TxView) SessionQueue() repo.SessionQueue {
	var a repo.SessionQueue = txQueue{sessionQueueAPI{&sessionQueue{*v.store(v.tx)}}, v}
	if v.st.tel != nil {
		a = tracedSessionQueue{a, v.st.tel}
	}
	return a
}

// store is the view's session store on db (the transaction, bound to a
// call's context).
func (v *TxView) store(db *gorm.DB) *sessionStore {
	return &sessionStore{s: v.st, tenant: v.tenant, scopeErr: v.scopeErr, tx: db}
}

// txWake says which wake-ups a TxView call sends when it succeeds.
type txWake int

const (
	wakeNone  txWake = iota // a read
	wakeFeed                // a session write: the change feed's watches
	wakeQueue               // a queue item may have become claimable (and the feed)
)

// kinds returns the wake-up kinds of w.
func (w txWake) kinds() []string {
	switch w {
	case wakeFeed:
		return []string{dialect.NotifyFeed}
	case wakeQueue:
		return []string{dialect.NotifySessionQueue, dialect.NotifyFeed}
	}
	return nil
}

// call runs fn, one call of the view's API named op, in a savepoint of the
// transaction: fn's failure rolls back to the savepoint, success releases
// it after sending wake's wake-ups (each kind once per view, where the
// dialect sends them in the transaction).
func (v *TxView) call(ctx context.Context, op string, wake txWake, fn func(ss *sessionStore) error) error {
	if v.scopeErr != nil {
		return opErr(op, v.scopeErr)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.st.guard.isClosed() {
		return opErr(op, &closedError{})
	}
	db := v.tx.WithContext(ctx)
	d := newDirectTx(db)
	if _, err := d.execRaw("SAVEPOINT " + txSavepoint); err != nil {
		return opErr(op, txEnded(dbErr(err)))
	}
	err := fn(v.store(db))
	var send []string
	if err == nil && wake != wakeNone {
		v.st.txWrites.Add(1) // for SQLite's watcher (dialect.Env.OwnTxWrites)
	}
	if err == nil {
		if tw, ok := v.st.d.(dialect.TxWakeup); ok && v.st.has(CapWakeup) {
			for _, k := range wake.kinds() {
				if v.sent[k] {
					continue
				}
				if _, werr := d.execRaw(tw.PublishSQL(v.st.cfg.Schema, v.st.cfg.Prefix, k)); werr != nil {
					err = opErr(op, werr)
					break
				}
				send = append(send, k)
			}
		}
	}
	if err != nil {
		// the call's context may have ended: the rollback must still run
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		rd := newDirectTx(v.tx.WithContext(rctx))
		_, rerr := rd.execRaw("ROLLBACK TO SAVEPOINT " + txSavepoint)
		if rerr == nil {
			_, rerr = rd.execRaw("RELEASE SAVEPOINT " + txSavepoint)
		}
		if rerr != nil {
			return fmt.Errorf("%w (and rolling back the call's savepoint failed, the transaction cannot go on: %w)", err, dbErr(rerr))
		}
		return err
	}
	if _, err := d.execRaw("RELEASE SAVEPOINT " + txSavepoint); err != nil {
		return opErr(op, dbErr(err))
	}
	for _, k := range send {
		v.sent[k] = true
	}
	return nil
}
