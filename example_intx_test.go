package agentstore_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/google/uuid"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/repo"
)

// Append a message, enqueue an item and write the application's own row in
// one transaction: a rollback removes all three, a commit stores all three.
func ExampleStore_InTx() {
	ctx := context.Background()
	st := openExampleStore()
	defer st.Close()
	if err := st.DB(ctx).Exec(`CREATE TABLE invoices (session_id TEXT NOT NULL, cents INTEGER NOT NULL)`).Error; err != nil {
		log.Fatal(err)
	}
	s := repo.NewSession()
	if err := st.Sessions().Save(ctx, s); err != nil {
		log.Fatal(err)
	}
	report := func(when string) {
		got, err := st.Sessions().Load(ctx, s.ID)
		if err != nil {
			log.Fatal(err)
		}
		items, err := st.SessionQueue().Items(ctx, s.ID)
		if err != nil {
			log.Fatal(err)
		}
		var invoices int64
		if err := st.DB(ctx).Raw(`SELECT COUNT(*) FROM invoices WHERE session_id = ?`, s.ID.String()).Scan(&invoices).Error; err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s: %d messages, %d queue items, %d invoices\n", when, len(got.Messages), len(items), invoices)
	}
	for _, commit := range []bool{false, true} {
		// On SQLite the transaction must be on the Store's write connection:
		// BeginTx. On PostgreSQL any *gorm.DB transaction on the database works.
		tx, err := st.BeginTx(ctx, nil)
		if err != nil {
			log.Fatal(err)
		}
		if err := tx.Exec(`INSERT INTO invoices (session_id, cents) VALUES (?, ?)`, s.ID.String(), 120).Error; err != nil {
			log.Fatal(err)
		}
		v, err := st.InTx(ctx, tx)
		if err != nil {
			log.Fatal(err)
		}
		if _, err := v.Sessions().AppendMessages(ctx, s.ID,
			repo.Message{ID: uuid.NewString(), Role: repo.RoleAssistant, Content: text("billed")}); err != nil {
			log.Fatal(err)
		}
		if _, err := v.SessionQueue().Enqueue(ctx, s.ID, "send receipt", 0); err != nil {
			log.Fatal(err)
		}
		if commit {
			err = tx.Commit().Error
			report("after commit")
		} else {
			err = tx.Rollback().Error
			report("after rollback")
		}
		if err != nil {
			log.Fatal(err)
		}
	}
	// Output:
	// after rollback: 0 messages, 0 queue items, 0 invoices
	// after commit: 1 messages, 1 queue items, 1 invoices
}

// A call that fails inside the application's transaction is undone alone
// (it ran in a savepoint): the transaction goes on and commits the rest.
func ExampleStore_InSQLTx() {
	ctx := context.Background()
	st := openExampleStore()
	defer st.Close()
	s := repo.NewSession()
	if err := st.Sessions().Save(ctx, s); err != nil {
		log.Fatal(err)
	}
	// On SQLite begin it on the Store's write connection; on PostgreSQL any
	// *sql.Tx on the database works.
	tx, err := st.BeginSQLTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }() // after Commit: sql.ErrTxDone, ignored
	v, err := st.InSQLTx(ctx, tx)
	if err != nil {
		log.Fatal(err)
	}
	_, err = v.Sessions().AppendMessages(ctx, uuid.New(), repo.Message{ID: "x", Role: repo.RoleUser, Content: text("lost")})
	fmt.Println("append to a missing session:", errors.Is(err, agentstore.ErrNotFound))
	if _, err := v.Sessions().AppendMessages(ctx, s.ID, repo.Message{ID: "u1", Role: repo.RoleUser, Content: text("hello")}); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}
	got, err := st.Sessions().Load(ctx, s.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("committed:", len(got.Messages), "message,", got.Messages[0].ID)
	_, err = v.Sessions().Load(ctx, s.ID)
	fmt.Println("the view after the commit:", errors.Is(err, agentstore.ErrInvalidInput))
	// Output:
	// append to a missing session: true
	// committed: 1 message, u1
	// the view after the commit: true
}
