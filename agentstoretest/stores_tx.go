package agentstoretest

// The harnesses' application transactions (TxBackend): a transaction
// begun as an application begins it, holding a row of the application's
// own table, with the agentstore session API bound to it (Store.InTx,
// Store.InSQLTx). With stores.go, the suite's only file with SQL of its own.

import (
	"context"
	"database/sql"
	"fmt"

	"gorm.io/gorm"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/repo"
)

// TxBackend is the optional interface of a Backend whose handles can run
// the session API inside a transaction the application owns: the
// InTransaction area needs it and is skipped on other Backends.
type TxBackend interface {
	// TxKinds names the kinds of application transaction BeginApp begins
	// (the area's tests run once per kind); the harnesses of this package
	// have "gorm" (a *gorm.DB transaction) and "sql" (a *sql.Tx).
	TxKinds() []string
	// BeginApp begins an application transaction of kind on st's
	// database, as an application would, and returns it with st's session
	// API bound to it (scoped to tenant when tenant is not "").
	BeginApp(ctx context.Context, st Store, kind, tenant string) (AppTx, error)
	// AppRows returns the number of committed rows of the application's
	// own table that hold key, read through st outside any transaction.
	AppRows(ctx context.Context, st Store, key string) (int64, error)
}

// AppTx is an application's transaction with the session API bound to it:
// what its Sessions and SessionQueue write commits or rolls back with the
// transaction.
type AppTx interface {
	// Sessions returns the session repository bound to the transaction.
	Sessions() repo.Sessions
	// SessionQueue returns the session queue bound to the transaction.
	SessionQueue() repo.SessionQueue
	// WriteAppRow inserts a row holding key into the application's own
	// table, in the transaction.
	WriteAppRow(ctx context.Context, key string) error
	// Commit commits the transaction.
	Commit() error
	// Rollback rolls the transaction back.
	Rollback() error
}

// appTable is the base name of the application's own table (prefixed and
// qualified like the Store's tables).
const appTable = "app_rows"

// TxKinds implements TxBackend.
func (b *storeBackend) TxKinds() []string { return []string{"gorm", "sql"} }

// ensureAppTable creates the application's table of st once per backend
// and table prefix.
func (b *storeBackend) ensureAppTable(ctx context.Context, s *agentstore.Store) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.appTables[s.TablePrefix()] {
		return nil
	}
	if err := s.DB(ctx).Exec("CREATE TABLE IF NOT EXISTS " + quoted(s, appTable) + " (k TEXT NOT NULL)").Error; err != nil {
		return fmt.Errorf("create the application's table: %w", err)
	}
	if b.appTables == nil {
		b.appTables = map[string]bool{}
	}
	b.appTables[s.TablePrefix()] = true
	return nil
}

// BeginApp implements TxBackend: "gorm" begins with Store.BeginTx,
// "sql" with Store.BeginSQLTx (on SQLite both are on the Store's write
// connection, as InTx requires).
func (b *storeBackend) BeginApp(ctx context.Context, st Store, kind, tenant string) (AppTx, error) {
	s, err := storeOf(st)
	if err != nil {
		return nil, err
	}
	if err := b.ensureAppTable(ctx, s); err != nil {
		return nil, err
	}
	insert := "INSERT INTO " + quoted(s, appTable) + " (k) VALUES (?)"
	switch kind {
	case "gorm":
		tx, err := s.BeginTx(ctx, nil)
		if err != nil {
			return nil, err
		}
		var v *agentstore.TxView
		if tenant != "" {
			v, err = s.ForTenant(tenant).InTx(ctx, tx)
		} else {
			v, err = s.InTx(ctx, tx)
		}
		if err != nil {
			_ = tx.Rollback().Error
			return nil, err
		}
		return &gormAppTx{TxView: v, tx: tx, insert: insert}, nil
	case "sql":
		tx, err := s.BeginSQLTx(ctx, nil)
		if err != nil {
			return nil, err
		}
		var v *agentstore.TxView
		if tenant != "" {
			v, err = s.ForTenant(tenant).InSQLTx(ctx, tx)
		} else {
			v, err = s.InSQLTx(ctx, tx)
		}
		if err != nil {
			_ = tx.Rollback()
			return nil, err
		}
		if b.pg {
			insert = "INSERT INTO " + quoted(s, appTable) + " (k) VALUES ($1)"
		}
		return &sqlAppTx{TxView: v, tx: tx, insert: insert}, nil
	}
	return nil, fmt.Errorf("%w: application transaction kind %q", ErrNotSupported, kind)
}

// AppRows implements TxBackend.
func (b *storeBackend) AppRows(ctx context.Context, st Store, key string) (int64, error) {
	s, err := storeOf(st)
	if err != nil {
		return 0, err
	}
	if err := b.ensureAppTable(ctx, s); err != nil {
		return 0, err
	}
	var n int64
	err = s.DB(ctx).Raw("SELECT COUNT(*) FROM "+quoted(s, appTable)+" WHERE k = ?", key).Scan(&n).Error
	return n, err
}

// gormAppTx is a *gorm.DB application transaction.
type gormAppTx struct {
	*agentstore.TxView
	tx     *gorm.DB
	insert string
}

func (a *gormAppTx) WriteAppRow(ctx context.Context, key string) error {
	return a.tx.WithContext(ctx).Exec(a.insert, key).Error
}
func (a *gormAppTx) Commit() error   { return a.tx.Commit().Error }
func (a *gormAppTx) Rollback() error { return a.tx.Rollback().Error }

// sqlAppTx is a database/sql application transaction.
type sqlAppTx struct {
	*agentstore.TxView
	tx     *sql.Tx
	insert string
}

func (a *sqlAppTx) WriteAppRow(ctx context.Context, key string) error {
	_, err := a.tx.ExecContext(ctx, a.insert, key)
	return err
}
func (a *sqlAppTx) Commit() error   { return a.tx.Commit() }
func (a *sqlAppTx) Rollback() error { return a.tx.Rollback() }
