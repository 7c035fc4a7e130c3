package agentstore

import (
	"context"
	"database/sql"

	"gorm.io/gorm"

	"github.com/agentstore/agentstore/internal/engine"
	"github.com/agentstore/agentstore/repo"
)

// TxView is the session API of a Store bound to a transaction the
// application owns (InTx, InSQLTx): the calls of its Sessions and
// SessionQueue run as statements of that transaction and commit or roll
// back with the application's own rows. The Store never commits or rolls
// back the transaction. See docs/transactions.md.
//
// Every call runs in a savepoint: a call that fails (ErrNotFound,
// ErrDuplicate, a stale version, a database error) is undone alone and the
// transaction goes on. A call after the transaction ended is
// ErrInvalidInput; on PostgreSQL so is a call after one of the
// application's own statements failed (the transaction is aborted).
//
// Allowed: every method of repo.Sessions and repo.SessionQueue, except a
// Dequeue with DequeueParams.Wait > 0 (ErrInvalidInput: the transaction
// would not see items committed while it waits). Differences from the same
// call on the Store: nothing commits before the application does;
// WithSessionLock holds its lock until the transaction ends; group commit
// does not apply and a Dequeue's claim commits synchronously with the
// transaction; CleanupExpired and PurgeFinished delete all their batches
// in the transaction; wake-ups of waiting Dequeues and change-feed watches
// (of every Store, this one included) happen at the commit (PostgreSQL:
// a NOTIFY in the transaction, once per kind per TxView; SQLite: the
// data_version watchers see the commit); WithStatementTimeout and
// WithLockTimeout apply only to transactions the Store began (BeginTx,
// BeginSQLTx).
//
// A TxView serialises its calls; use it only while its transaction is
// open.
type TxView struct {
	v *engine.TxView
}

// Sessions returns the session repository bound to the transaction.
func (v *TxView) Sessions() repo.Sessions { return v.v.Sessions() }

// SessionQueue returns the session queue bound to the transaction.
func (v *TxView) SessionQueue() repo.SessionQueue { return v.v.SessionQueue() }

// InTx returns the session API bound to tx, a transaction of a *gorm.DB
// (from Begin, or the tx of Transaction) on the Store's database; the
// application commits or rolls it back. The Store's naming, logger and
// clock are used for its calls, not tx's.
//
// Refused: a nil tx, a *gorm.DB not in a transaction, one carrying an
// error, or a transaction that already ended: ErrInvalidInput. A
// transaction on another database: ErrInvalidConfig — on PostgreSQL a
// probe statement in tx compares the database, the server's start time and
// the table the Store's sessions table name resolves to (so a transaction
// whose search_path resolves the Store's tables elsewhere is refused too);
// on SQLite tx must be on the Store's write connection (BeginTx,
// BeginSQLTx, DB(ctx).Begin()), or for a Store made by New on that
// *gorm.DB's pool: a transaction on another pool (its read pool, or another
// *sql.DB of the same file) would wait for the Store's writer or make it
// wait. After Close: ErrClosed. The check costs one statement in tx.
func (s *Store) InTx(ctx context.Context, tx *gorm.DB) (*TxView, error) {
	v, err := s.e.InTx(ctx, tx)
	if err != nil {
		return nil, err
	}
	return &TxView{v: v}, nil
}

// InSQLTx is InTx for a database/sql transaction, with the same refusals.
// On SQLite begin it with BeginSQLTx.
func (s *Store) InSQLTx(ctx context.Context, tx *sql.Tx) (*TxView, error) {
	v, err := s.e.InSQLTx(ctx, tx)
	if err != nil {
		return nil, err
	}
	return &TxView{v: v}, nil
}

// BeginTx begins a transaction on the Store's own pool (on SQLite its one
// write connection: the write lock is taken at BEGIN) and returns it as a
// GORM handle for InTx and the application's own statements; the
// application commits or rolls it back. The handle is the Store's: its
// naming strategy adds the Store's table prefix to table names derived
// from models (as DB does), so name the application's tables explicitly
// (Table, or raw SQL). On SQLite every other write through the Store waits
// until the transaction ends: while it is open, write through its TxView
// only. After Close: ErrClosed.
func (s *Store) BeginTx(ctx context.Context, opts *sql.TxOptions) (*gorm.DB, error) {
	return s.e.BeginTx(ctx, opts)
}

// BeginSQLTx is BeginTx for database/sql: a *sql.Tx on the Store's own pool
// (on SQLite its write connection) for InSQLTx and the application's own
// statements, with the same caveats.
func (s *Store) BeginSQLTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error) {
	return s.e.BeginSQLTx(ctx, opts)
}

// InTx is Store.InTx scoped to the view's tenant: the TxView's calls see
// and write only the tenant's sessions, as the view's own calls do.
func (v *TenantView) InTx(ctx context.Context, tx *gorm.DB) (*TxView, error) {
	e, err := v.v.InTx(ctx, tx)
	if err != nil {
		return nil, err
	}
	return &TxView{v: e}, nil
}

// InSQLTx is Store.InSQLTx scoped to the view's tenant.
func (v *TenantView) InSQLTx(ctx context.Context, tx *sql.Tx) (*TxView, error) {
	e, err := v.v.InSQLTx(ctx, tx)
	if err != nil {
		return nil, err
	}
	return &TxView{v: e}, nil
}
