package agentstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/repo"
)

// TestChangeFeedPurgeUsesDatabaseClock: PurgeChanges measures a change's
// age on the database's clock, the clock that wrote its time: a Store
// whose clock runs three hours ahead purges nothing younger than the
// retention (early), and one whose clock runs three hours behind still
// purges what is older than it (not late). Measured on the Store's clock,
// the first purge would delete the fresh changes and the second none.
func TestChangeFeedPurgeUsesDatabaseClock(t *testing.T) {
	t.Parallel()
	check := func(t *testing.T, h *harness) {
		ctx := context.Background()
		ahead := h.New(t, agentstore.WithClock(func() time.Time { return time.Now().Add(3 * time.Hour) }))
		behind := h.Open(t, agentstore.WithClock(func() time.Time { return time.Now().Add(-3 * time.Hour) }))
		s := repo.NewSession()
		if err := ahead.Sessions().Save(ctx, s); err != nil {
			t.Fatal(err)
		}
		if _, err := behind.Sessions().AppendMessages(ctx, s.ID, repo.Message{ID: "m1", Role: repo.RoleUser,
			Content: []byte(`[{"type":"text","text":"x"}]`)}); err != nil {
			t.Fatal(err)
		}
		if n, err := ahead.ChangeFeed().PurgeChanges(ctx, time.Hour, 0); err != nil || n != 0 {
			t.Fatalf("purge of changes older than an hour by a Store 3 h ahead: %d deleted (%v), want 0", n, err)
		}
		time.Sleep(50 * time.Millisecond)
		if n, err := behind.ChangeFeed().PurgeChanges(ctx, 10*time.Millisecond, 0); err != nil || n != 2 {
			t.Fatalf("purge of changes older than 10 ms by a Store 3 h behind: %d deleted (%v), want 2", n, err)
		}
	}
	forEachDialect(t, check)
}
