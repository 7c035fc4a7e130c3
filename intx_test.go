package agentstore_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/driver/sqlite"
	"gorm.io/gorm"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/repo"
)

// Invoice is an application's own model, written in the same transaction
// as the session API's calls.
type Invoice struct {
	ID        uint   `gorm:"primaryKey"`
	SessionID string `gorm:"not null"`
	Cents     int64  `gorm:"not null"`
}

// mariaAppDB opens an application's own MariaDB pool on the test's
// database (go-sql-driver/mysql), with ANSI_QUOTES in its sql_mode when
// ansi (the Store's statements need it in a transaction they join).
func mariaAppDB(t *testing.T, h *harness, ansi bool) *sql.DB {
	t.Helper()
	_, target, err := agentstore.ParseDSN(h.DSN)
	if err != nil {
		t.Fatal(err)
	}
	c, err := gomysql.ParseDSN(target)
	if err != nil {
		t.Fatal(err)
	}
	if c.Params == nil {
		c.Params = map[string]string{}
	}
	if ansi {
		c.Params["sql_mode"] = "'ANSI_QUOTES,STRICT_ALL_TABLES'"
	} else {
		c.Params["sql_mode"] = "'STRICT_ALL_TABLES'"
	}
	db, err := sql.Open("mysql", c.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// mariaOtherDB opens a pool on the MariaDB server's "test" database, not
// the test's own.
func mariaOtherDB(t *testing.T) *sql.DB {
	t.Helper()
	_, target, err := agentstore.ParseDSN(mariadbDSN())
	if err != nil {
		t.Fatal(err)
	}
	c, err := gomysql.ParseDSN(target)
	if err != nil {
		t.Fatal(err)
	}
	c.Params = map[string]string{"sql_mode": "'ANSI_QUOTES'"}
	db, err := sql.Open("mysql", c.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// appGorm opens the application's own *gorm.DB on the test's database,
// sharing nothing with the Stores (its own pool), with the Invoice table.
func appGorm(t *testing.T, h *harness) *gorm.DB {
	t.Helper()
	var d gorm.Dialector
	switch h.Dialect {
	case agentstore.SQLite:
		d = sqlite.New(sqlite.Config{DriverName: testSQLiteDriver, DSN: "file:" + filepath.ToSlash(h.DSN[len("sqlite:"):])})
	case agentstore.MariaDB:
		db := mariaAppDB(t, h, true)
		db.SetMaxOpenConns(3)
		d = mysql.New(mysql.Config{Conn: db})
	default:
		pc, err := pgx.ParseConfig(h.DSN)
		if err != nil {
			t.Fatal(err)
		}
		pc.RuntimeParams["search_path"] = h.Schema
		db := stdlib.OpenDB(*pc)
		db.SetMaxOpenConns(3)
		t.Cleanup(func() { _ = db.Close() })
		d = postgres.New(postgres.Config{Conn: db})
	}
	g, err := gorm.Open(d, &gorm.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if h.Dialect == agentstore.SQLite {
		sdb, err := g.DB()
		if err != nil {
			t.Fatal(err)
		}
		sdb.SetMaxOpenConns(1)
		t.Cleanup(func() { _ = sdb.Close() })
	}
	if err := g.AutoMigrate(&Invoice{}); err != nil {
		t.Fatal(err)
	}
	return g
}

// inTxRoundTrip saves a session, then in the application's transaction
// (begun by begin, bound by bind) writes an invoice with write, appends and
// enqueues; rollback leaves nothing, commit stores all three.
func inTxRoundTrip(t *testing.T, st *agentstore.Store, countInvoices func(sid string) int64,
	begin func() (write func(sid string) error, bind func() (*agentstore.TxView, error), end func(commit bool) error)) {
	t.Helper()
	ctx := context.Background()
	s := repo.NewSession()
	if err := st.Sessions().Save(ctx, s); err != nil {
		t.Fatal(err)
	}
	for _, commit := range []bool{false, true} {
		write, bind, end := begin()
		if err := write(s.ID.String()); err != nil {
			t.Fatalf("the application's own row: %v", err)
		}
		v, err := bind()
		if err != nil {
			t.Fatalf("bind the transaction: %v", err)
		}
		if _, err := v.Sessions().AppendMessages(ctx, s.ID, repo.Message{ID: uuid.NewString(), Role: repo.RoleUser, Content: text("hi")}); err != nil {
			t.Fatal(err)
		}
		if _, err := v.SessionQueue().Enqueue(ctx, s.ID, "job", 0); err != nil {
			t.Fatal(err)
		}
		if err := end(commit); err != nil {
			t.Fatal(err)
		}
		got, err := st.Sessions().Load(ctx, s.ID)
		if err != nil {
			t.Fatal(err)
		}
		items, err := st.SessionQueue().Items(ctx, s.ID)
		if err != nil {
			t.Fatal(err)
		}
		want := 0
		if commit {
			want = 1
		}
		if n := countInvoices(s.ID.String()); len(got.Messages) != want || len(items) != want || n != int64(want) {
			t.Fatalf("commit=%v: %d messages, %d items, %d invoices; want %d of each", commit, len(got.Messages), len(items), n, want)
		}
	}
}

// TestInTx_Gorm: the session API inside a transaction of the application's
// own *gorm.DB, with the application's own model: on PostgreSQL the
// application's pool is its own (the Store opened with Open on the same
// database accepts it); on SQLite the Store is made by New on the
// application's *gorm.DB (the transaction is on its pool), and a Store
// opened with Open refuses a transaction of another pool.
func TestInTx_Gorm(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		opened := h.New(t)
		app := appGorm(t, h)
		st := opened
		if h.Dialect == agentstore.SQLite {
			var err error
			if st, err = agentstore.New(app); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = st.Close() })
			tx := app.Begin()
			if _, err := opened.InTx(ctx, tx); !errors.Is(err, agentstore.ErrInvalidConfig) {
				t.Fatalf("a Store opened with Open given another pool's transaction: %v; want ErrInvalidConfig", err)
			}
			tx.Rollback()
		}
		count := func(sid string) int64 {
			var n int64
			if err := app.Model(&Invoice{}).Where("session_id = ?", sid).Count(&n).Error; err != nil {
				t.Fatal(err)
			}
			return n
		}
		inTxRoundTrip(t, st, count, func() (func(string) error, func() (*agentstore.TxView, error), func(bool) error) {
			tx := app.Begin()
			return func(sid string) error { return tx.Create(&Invoice{SessionID: sid, Cents: 120}).Error },
				func() (*agentstore.TxView, error) { return st.InTx(ctx, tx) },
				func(commit bool) error {
					if commit {
						return tx.Commit().Error
					}
					return tx.Rollback().Error
				}
		})
		// inside Transaction, and scoped to a tenant
		sess := repo.NewSession()
		err := app.Transaction(func(tx *gorm.DB) error {
			v, err := st.ForTenant("acme").InTx(ctx, tx)
			if err != nil {
				return err
			}
			if err := v.Sessions().Save(ctx, sess); err != nil {
				return err
			}
			return tx.Create(&Invoice{SessionID: sess.ID.String(), Cents: 1}).Error
		})
		if err != nil {
			t.Fatal(err)
		}
		if got, err := st.Sessions().Load(ctx, sess.ID); err != nil || got.TenantID != "acme" {
			t.Fatalf("session saved in Transaction through a tenant view: %+v, %v", got, err)
		}
	})
}

// TestInTx_SQL: the session API inside a database/sql transaction: on
// PostgreSQL of the application's own *sql.DB, on SQLite of
// Store.BeginSQLTx (a transaction of the Store's read pool is refused).
func TestInTx_SQL(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		st := h.New(t)
		app := appGorm(t, h) // the invoices table
		var db *sql.DB
		insert := `INSERT INTO invoices (session_id, cents) VALUES (?, 120)`
		if h.Dialect == agentstore.MariaDB {
			db = mariaAppDB(t, h, true)
			db.SetMaxOpenConns(2)
		} else if h.Dialect == agentstore.Postgres {
			pc, err := pgx.ParseConfig(h.DSN)
			if err != nil {
				t.Fatal(err)
			}
			pc.RuntimeParams["search_path"] = h.Schema
			db = stdlib.OpenDB(*pc)
			db.SetMaxOpenConns(2)
			t.Cleanup(func() { _ = db.Close() })
			insert = `INSERT INTO invoices (session_id, cents) VALUES ($1, 120)`
		} else {
			tx, err := st.SQLDB().BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := st.InSQLTx(ctx, tx); !errors.Is(err, agentstore.ErrInvalidConfig) {
				t.Fatalf("a transaction of the Store's read pool: %v; want ErrInvalidConfig", err)
			}
			_ = tx.Rollback()
		}
		count := func(sid string) int64 {
			var n int64
			if err := app.Model(&Invoice{}).Where("session_id = ?", sid).Count(&n).Error; err != nil {
				t.Fatal(err)
			}
			return n
		}
		inTxRoundTrip(t, st, count, func() (func(string) error, func() (*agentstore.TxView, error), func(bool) error) {
			var tx *sql.Tx
			var err error
			if db != nil {
				tx, err = db.BeginTx(ctx, nil)
			} else {
				tx, err = st.BeginSQLTx(ctx, nil)
			}
			if err != nil {
				t.Fatal(err)
			}
			return func(sid string) error { _, err := tx.ExecContext(ctx, insert, sid); return err },
				func() (*agentstore.TxView, error) { return st.InSQLTx(ctx, tx) },
				func(commit bool) error {
					if commit {
						return tx.Commit()
					}
					return tx.Rollback()
				}
		})
	})
}

// TestInTx_Refusals: what InTx and InSQLTx refuse, and calls through a
// view whose transaction can no longer run them.
func TestInTx_Refusals(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		st := h.New(t)
		if _, err := st.InTx(ctx, nil); !errors.Is(err, agentstore.ErrInvalidInput) {
			t.Errorf("nil *gorm.DB: %v; want ErrInvalidInput", err)
		}
		if _, err := st.InSQLTx(ctx, nil); !errors.Is(err, agentstore.ErrInvalidInput) {
			t.Errorf("nil *sql.Tx: %v; want ErrInvalidInput", err)
		}
		if _, err := st.InTx(ctx, st.DB(ctx)); !errors.Is(err, agentstore.ErrInvalidInput) {
			t.Errorf("a *gorm.DB not in a transaction: %v; want ErrInvalidInput", err)
		}
		if _, err := st.ForTenant("t").InTx(ctx, st.DB(ctx)); !errors.Is(err, agentstore.ErrInvalidInput) {
			t.Errorf("a *gorm.DB not in a transaction (tenant view): %v; want ErrInvalidInput", err)
		}
		gtx, err := st.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := gtx.Commit().Error; err != nil {
			t.Fatal(err)
		}
		if _, err := st.InTx(ctx, gtx); !errors.Is(err, agentstore.ErrInvalidInput) {
			t.Errorf("a committed *gorm.DB transaction: %v; want ErrInvalidInput", err)
		}
		stx, err := st.BeginSQLTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := stx.Rollback(); err != nil {
			t.Fatal(err)
		}
		if _, err := st.InSQLTx(ctx, stx); !errors.Is(err, agentstore.ErrInvalidInput) {
			t.Errorf("a rolled-back *sql.Tx: %v; want ErrInvalidInput", err)
		}
		// a transaction on another database
		var other *sql.DB
		if h.Dialect == agentstore.SQLite {
			o, err := agentstore.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "other.db"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = o.Close() })
			otx, err := o.BeginSQLTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := st.InSQLTx(ctx, otx); !errors.Is(err, agentstore.ErrInvalidConfig) {
				t.Errorf("a transaction of another SQLite database: %v; want ErrInvalidConfig", err)
			}
			_ = otx.Rollback()
		} else if h.Dialect == agentstore.MariaDB {
			// another database on the same server, and the Store's own
			// database on a connection without ANSI_QUOTES
			for _, c := range []struct {
				what string
				db   *sql.DB
			}{{"another MariaDB database", mariaOtherDB(t)}, {"a connection without ANSI_QUOTES", mariaAppDB(t, h, false)}} {
				otx, err := c.db.BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := st.InSQLTx(ctx, otx); !errors.Is(err, agentstore.ErrInvalidConfig) {
					t.Errorf("a transaction on %s: %v; want ErrInvalidConfig", c.what, err)
				}
				_ = otx.Rollback()
			}
		} else {
			pc, err := pgx.ParseConfig(h.DSN)
			if err != nil {
				t.Fatal(err)
			}
			pc.Database = "postgres"
			other = stdlib.OpenDB(*pc)
			other.SetMaxOpenConns(1)
			t.Cleanup(func() { _ = other.Close() })
			otx, err := other.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := st.InSQLTx(ctx, otx); !errors.Is(err, agentstore.ErrInvalidConfig) {
				t.Errorf("a transaction on another PostgreSQL database: %v; want ErrInvalidConfig", err)
			}
			_ = otx.Rollback()
			// a transaction the application's own failed statement aborted
			tx, err := st.BeginSQLTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			v, err := st.InSQLTx(ctx, tx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.ExecContext(ctx, `SELECT 1/0`); err == nil {
				t.Fatal("SELECT 1/0 succeeded")
			}
			if _, err := v.Sessions().Load(ctx, uuid.New()); !errors.Is(err, agentstore.ErrInvalidInput) {
				t.Errorf("a call in an aborted transaction: %v; want ErrInvalidInput", err)
			}
			_ = tx.Rollback()
		}
		// after Close
		closing := h.Open(t)
		ctx2 := context.Background()
		ctx2tx, err := closing.BeginTx(ctx2, nil)
		if err != nil {
			t.Fatal(err)
		}
		v, err := closing.InTx(ctx2, ctx2tx)
		if err != nil {
			t.Fatal(err)
		}
		_ = ctx2tx.Rollback()
		_ = closing.Close()
		if _, err := closing.InTx(ctx, ctx2tx); !errors.Is(err, agentstore.ErrClosed) {
			t.Errorf("InTx after Close: %v; want ErrClosed", err)
		}
		if _, err := closing.BeginSQLTx(ctx, nil); !errors.Is(err, agentstore.ErrClosed) {
			t.Errorf("BeginSQLTx after Close: %v; want ErrClosed", err)
		}
		if _, err := closing.BeginTx(ctx, nil); !errors.Is(err, agentstore.ErrClosed) {
			t.Errorf("BeginTx after Close: %v; want ErrClosed", err)
		}
		if _, err := v.Sessions().Load(ctx, uuid.New()); !errors.Is(err, agentstore.ErrClosed) {
			t.Errorf("a view's call after Close: %v; want ErrClosed", err)
		}
	})
}

// TestInTx_DatabaseErrorInCall: on PostgreSQL a call that fails in the
// database (a lock timeout: another transaction holds the session row)
// aborts only its savepoint: the next call of the transaction works and
// the commit stores it, with the application's own statement.
func TestInTx_DatabaseErrorInCall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	admin := requirePostgres(t)
	h := newHarness(t, agentstore.Postgres)
	st := h.New(t)
	s := repo.NewSession()
	if err := st.Sessions().Save(ctx, s); err != nil {
		t.Fatal(err)
	}
	holder, err := admin.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback() }()
	table := `"` + h.Schema + `"."` + st.TablePrefix() + `sessions"`
	if _, err := holder.ExecContext(ctx, `SELECT 1 FROM `+table+` WHERE id = $1 FOR UPDATE`, s.ID); err != nil {
		t.Fatal(err)
	}
	tx, err := st.BeginSQLTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, `SET LOCAL lock_timeout = '100ms'`); err != nil {
		t.Fatal(err)
	}
	v, err := st.InSQLTx(ctx, tx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.SessionQueue().Enqueue(ctx, s.ID, "blocked", 0); !errors.Is(err, agentstore.ErrLockTimeout) {
		t.Fatalf("enqueue while another transaction holds the session row: %v; want ErrLockTimeout", err)
	}
	if err := holder.Rollback(); err != nil {
		t.Fatal(err)
	}
	if _, err := v.SessionQueue().Enqueue(ctx, s.ID, "after", 0); err != nil {
		t.Fatalf("enqueue after the failed call: %v", err)
	}
	if _, err := tx.ExecContext(ctx, `SELECT 1`); err != nil {
		t.Fatalf("the application's statement after the failed call: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	items, err := st.SessionQueue().Items(ctx, s.ID)
	if err != nil || len(items) != 1 || items[0].Content != "after" {
		t.Fatalf("items after the commit: %+v, %v; want the one enqueued after the failure", items, err)
	}
}

// TestInTx_DequeueKeepsSynchronousCommit: on PostgreSQL a Dequeue's claim
// in the application's transaction does not switch the transaction to
// asynchronous commit (the Store's own claims commit asynchronously).
func TestInTx_DequeueKeepsSynchronousCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	requirePostgres(t)
	st := newHarness(t, agentstore.Postgres).New(t)
	s := repo.NewSession()
	if err := st.Sessions().Save(ctx, s); err != nil {
		t.Fatal(err)
	}
	if _, err := st.SessionQueue().Enqueue(ctx, s.ID, "job", 0); err != nil {
		t.Fatal(err)
	}
	tx, err := st.BeginSQLTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	v, err := st.InSQLTx(ctx, tx)
	if err != nil {
		t.Fatal(err)
	}
	if it, err := v.SessionQueue().Dequeue(ctx, s.ID, repo.DequeueParams{}); err != nil || it == nil {
		t.Fatalf("dequeue in the transaction: %v, %v", it, err)
	}
	var sc string
	if err := tx.QueryRowContext(ctx, `SELECT current_setting('synchronous_commit')`).Scan(&sc); err != nil {
		t.Fatal(err)
	}
	if sc != "on" {
		t.Fatalf("synchronous_commit in the application's transaction after a Dequeue: %q, want on", sc)
	}
}

// TestInTx_ContentCodec: writes made inside the application's transaction
// go through the Store's content codec like any other write: the stored
// message and queue item are ciphertext, and reads return the plaintext.
func TestInTx_ContentCodec(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		codec, err := agentstore.NewAESGCMCodec("k1", map[string][]byte{"k1": make([]byte, 32)})
		if err != nil {
			t.Fatal(err)
		}
		st := h.New(t, agentstore.WithContentCodec(codec))
		s := repo.NewSession()
		if err := st.Sessions().Save(ctx, s); err != nil {
			t.Fatal(err)
		}
		tx, err := st.BeginSQLTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		view, err := st.InSQLTx(ctx, tx)
		if err != nil {
			t.Fatal(err)
		}
		secret := `[{"type":"text","text":"the vault code is 7391"}]`
		if _, err := view.Sessions().AppendMessages(ctx, s.ID, repo.Message{Role: repo.RoleUser, Content: []byte(secret)}); err != nil {
			t.Fatal(err)
		}
		if _, err := view.SessionQueue().Enqueue(ctx, s.ID, "queued 7391", 0); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		for _, q := range []string{"SELECT content FROM agentstore_messages", "SELECT content FROM agentstore_queue"} {
			if h.Schema != "" {
				q = strings.Replace(q, "FROM ", `FROM "`+h.Schema+`".`, 1)
			}
			var raw string
			if err := st.SQLDB().QueryRowContext(ctx, q).Scan(&raw); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
			if strings.Contains(raw, "7391") || !strings.Contains(raw, `"$enc"`) {
				t.Fatalf("%s: stored %q, want an envelope without the plaintext", q, raw)
			}
		}
		loaded, err := st.Sessions().Load(ctx, s.ID, repo.LoadOptions{})
		if err != nil || len(loaded.Messages) != 1 || !strings.Contains(string(loaded.Messages[0].Content), "7391") {
			t.Fatalf("load: %+v, %v", loaded, err)
		}
		it, err := st.SessionQueue().Dequeue(ctx, s.ID, repo.DequeueParams{Owner: "w"})
		if err != nil || it == nil || it.Content != "queued 7391" {
			t.Fatalf("dequeue: %+v, %v", it, err)
		}
	})
}
