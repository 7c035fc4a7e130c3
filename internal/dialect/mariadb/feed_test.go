package mariadb

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/agentstore/agentstore/internal/dialect"
	"github.com/agentstore/agentstore/migrations"
	"github.com/agentstore/agentstore/models"
)

// feedSchema creates the MariaDB chain's V1 and V14 under a table prefix
// of the test's own in the test database (dropped at cleanup) and returns
// a handle and the Env.
func feedSchema(t *testing.T) (*gorm.DB, *dialect.Env) {
	t.Helper()
	c := openTest(t)
	db, err := gorm.Open(c.Gorm, &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	prefix := "mft" + strings.ReplaceAll(uuid.NewString(), "-", "")[:10] + "_"
	chain, err := migrations.Chain("mariadb")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		var tables []string
		db.Raw(`SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name LIKE ?`, prefix+"%").Scan(&tables)
		if len(tables) > 0 { // the foreign keys' checks off on the dropping connection
			_ = db.Connection(func(tx *gorm.DB) error {
				tx.Exec(`SET FOREIGN_KEY_CHECKS = 0`)
				return tx.Exec(`DROP TABLE IF EXISTS "` + strings.Join(tables, `", "`) + `"`).Error
			})
		}
	})
	for _, m := range chain {
		if m.Version != 1 && m.Version != 14 {
			continue
		}
		for _, st := range migrations.Statements(migrations.Render(m.SQL, prefix, "")) {
			if err := db.Exec(st).Error; err != nil {
				t.Fatalf("V%d: %s: %v", m.Version, st, err)
			}
		}
	}
	env := &dialect.Env{Config: &dialect.Config{Prefix: prefix}, Quote: func(base string) string { return `"` + prefix + base + `"` }}
	return db, env
}

// feedRows returns the change rows as "ord:kind:session-index" in (ord,
// id) order, sids naming the sessions.
func feedRows(t *testing.T, db *gorm.DB, env *dialect.Env, sids []uuid.UUID) []string {
	t.Helper()
	var rows []struct {
		Ord       int64
		Kind      string
		SessionID string
		ToSeq     int64
	}
	if err := db.Raw(`SELECT ord, kind, session_id, to_seq FROM ` + env.Quote(models.TableSessionChanges) + ` ORDER BY ord, id`).Scan(&rows).Error; err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range rows {
		n := -1
		for i, s := range sids {
			if s.String() == r.SessionID {
				n = i
			}
		}
		out = append(out, fmt.Sprintf("%d:%s:s%d:%d", r.Ord, r.Kind, n, r.ToSeq))
	}
	return out
}

// TestSequenceChanges: V14's triggers write ord 0; SequenceChanges gives
// the committed rows the next ord, skips a row an open transaction wrote
// (placing it after the others once that commits), holds back a session's
// picked row behind an unpicked committed one of its session, and leaves
// an idle feed alone.
func TestSequenceChanges(t *testing.T) {
	db, env := feedSchema(t)
	ctx := context.Background()
	d := New().(mdDialect)
	st, ct := env.Quote(models.TableSessions), env.Quote(models.TableSessionChanges)
	sids := []uuid.UUID{uuid.New(), uuid.New()}
	for _, id := range sids {
		if err := db.Exec(`INSERT INTO `+st+` (id, created_at, updated_at) VALUES (?, NOW(6), NOW(6))`, id).Error; err != nil {
			t.Fatal(err)
		}
	}
	bump := func(tx *gorm.DB, i int) {
		t.Helper()
		if err := tx.Exec(`UPDATE `+st+` SET last_seq = last_seq + 1, version = version + 1 WHERE id = ?`, sids[i]).Error; err != nil {
			t.Fatal(err)
		}
	}
	// An open transaction writes s1 (its change row takes an id, stays
	// uncommitted) while s0 is written and committed after it.
	open := db.Begin()
	bump(open, 1)
	bump(db, 0)
	if err := d.SequenceChanges(ctx, db, env); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(feedRows(t, db, env, sids), " ")
	if want := "1:session.created:s0:0 1:session.created:s1:0 1:session.updated:s0:1"; got != want {
		t.Fatalf("first run: %s, want %s", got, want)
	}
	if err := open.Commit().Error; err != nil {
		t.Fatal(err)
	}
	if err := d.SequenceChanges(ctx, db, env); err != nil {
		t.Fatal(err)
	}
	got = strings.Join(feedRows(t, db, env, sids), " ")
	if want := "1:session.created:s0:0 1:session.created:s1:0 1:session.updated:s0:1 2:session.updated:s1:1"; got != want {
		t.Fatalf("after the commit: %s, want %s", got, want)
	}
	// Idle: no run, the counter stays.
	if err := d.SequenceChanges(ctx, db, env); err != nil {
		t.Fatal(err)
	}
	var cur int64
	db.Raw(`SELECT ord FROM ` + env.Quote(tableChangeSeq) + ` WHERE id = 1`).Scan(&cur)
	if cur != 2 {
		t.Fatalf("counter %d after an idle run, want 2", cur)
	}
	// holdBack: of s0's committed rows only those below an unpicked one
	// are kept (here the pick is simulated: the second row not picked).
	bump(db, 0)
	bump(db, 0)
	bump(db, 1)
	var pend []struct {
		ID        int64
		SessionID string
	}
	db.Raw(`SELECT id, session_id FROM ` + ct + ` WHERE ord = 0 ORDER BY id`).Scan(&pend)
	if len(pend) != 3 {
		t.Fatalf("%d pending rows, want 3", len(pend))
	}
	picked := []struct {
		ID        int64
		SessionID string
	}{pend[0], pend[2]}
	ids, err := holdBack(db, ct, picked)
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != 2 || ids[0] != picked[0].ID || ids[1] != picked[1].ID {
		t.Fatalf("holdBack kept %v of %v", ids, picked)
	}
	// Now pick s0's later row without its earlier one: it is held back.
	var s0 []int64
	db.Raw(`SELECT id FROM `+ct+` WHERE ord = 0 AND session_id = ? ORDER BY id`, sids[0]).Scan(&s0)
	late := []struct {
		ID        int64
		SessionID string
	}{{s0[1], sids[0].String()}}
	if ids, err := holdBack(db, ct, late); err != nil || len(ids) != 0 {
		t.Fatalf("holdBack of a session's later row alone: %v %v, want none", ids, err)
	}
	if err := d.SequenceChanges(ctx, db, env); err != nil {
		t.Fatal(err)
	}
	rows := feedRows(t, db, env, sids)
	if got := strings.Join(rows[4:], " "); got != "3:session.updated:s0:2 3:session.updated:s0:3 3:session.updated:s1:2" {
		t.Fatalf("third run: %s", got)
	}
}

// TestFeedObjects: the five V14 triggers are reported present, a dropped
// one missing.
func TestFeedObjects(t *testing.T) {
	db, env := feedSchema(t)
	objs, err := New().(dialect.FeedVerifier).FeedObjects(db, env, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 5 {
		t.Fatalf("%d objects, want 5", len(objs))
	}
	for _, o := range objs {
		if o.State != "present" || o.Kind != "trigger" || !strings.HasPrefix(o.Name, env.Config.Prefix) {
			t.Fatalf("object %+v", o)
		}
	}
	if err := db.Exec(`DROP TRIGGER "` + env.Config.Prefix + `queue_change_status"`).Error; err != nil {
		t.Fatal(err)
	}
	objs, err = New().(dialect.FeedVerifier).FeedObjects(db, env, "")
	if err != nil {
		t.Fatal(err)
	}
	var missing []string
	for _, o := range objs {
		if o.State == "missing" {
			missing = append(missing, o.Table+" "+o.Name)
		}
	}
	if want := env.Config.Prefix + "queue " + env.Config.Prefix + "queue_change_status"; len(missing) != 1 || missing[0] != want {
		t.Fatalf("missing %q, want %q", missing, want)
	}
}
