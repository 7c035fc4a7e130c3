package agentstore_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/repo"
)

// TestNewStoreClosedLeavesCallerPool: a Store made by New over the
// caller's GORM handle fails every call with ErrClosed after Close (no
// driver text) while the caller's own handle keeps working.
func TestNewStoreClosedLeavesCallerPool(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "new.db")
	(&harness{Dialect: agentstore.SQLite, DSN: "sqlite:" + path}).New(t) // migrate
	gdb := openGormSQLite(t, "file:"+path+"?_busy_timeout=10000&_journal_mode=WAL&_foreign_keys=on")
	st, err := agentstore.New(gdb)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s := repo.NewSession()
	if err := st.Sessions().Save(ctx, s); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = st.Sessions().Load(ctx, s.ID)
	if !errors.Is(err, agentstore.ErrClosed) || strings.Contains(err.Error(), "sql: ") {
		t.Fatalf("Load after Close = %v, want ErrClosed", err)
	}
	if _, err := st.ProviderAdmin().ListInstances(ctx); !errors.Is(err, agentstore.ErrClosed) {
		t.Fatalf("ListInstances after Close = %v, want ErrClosed", err)
	}
	var n int64
	if err := gdb.Table(st.Table("sessions")).Count(&n).Error; err != nil || n != 1 {
		t.Fatalf("the caller's handle after the Store's Close: %d rows, %v", n, err)
	}
}
