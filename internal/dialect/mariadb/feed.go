package mariadb

import (
	"context"
	"errors"
	"fmt"

	"gorm.io/gorm"

	"github.com/agentstore/agentstore/internal/dialect"
	"github.com/agentstore/agentstore/models"
)

// The session change feed on MariaDB (migration V14, docs/changes.md).
// V14's triggers write every change with ord = 0; a reader's
// SequenceChanges gives the committed ones their place in the feed.

var (
	_ dialect.ChangeFeedSequencer = mdDialect{}
	_ dialect.FeedVerifier        = mdDialect{}
	_ dialect.ChangeFeedClock     = mdDialect{}
)

// tableChangeSeq is V14's one-row table (id 1) whose ord is the last ord
// SequenceChanges gave; its row lock serialises SequenceChanges runs.
const tableChangeSeq = "session_change_seq"

// sequenceBatch is how many changes one SequenceChanges transaction
// places at most.
const sequenceBatch = 1000

// errNoSeqRow: V14's counter row is missing (deleted by hand).
var errNoSeqRow = errors.New("the change feed's counter row (session_change_seq, id 1) is missing: run Migrate, or insert it with the largest ord of session_changes")

// SequenceChanges implements dialect.ChangeFeedSequencer. A consistent
// read first looks for a committed change with ord 0 (an idle feed costs
// that one index probe). If there is one, a transaction locks the counter
// row (serialising every run), locks the changes with ord 0 in id order,
// skipping those a running transaction still holds (FOR UPDATE SKIP
// LOCKED: an uncommitted insert is locked, so only committed changes are
// taken), gives them all the counter's next value as ord and stores it,
// and commits. Within one run the changes keep id order: every change of
// a session is written under the session's (or the queue item's) row
// lock, so of two committed changes of one session the later committer's
// id is the larger (holdBack covers the one gap: a change that became
// visible behind the pick's scan). A skipped change is placed by a later
// run, after every change placed before it.
func (mdDialect) SequenceChanges(ctx context.Context, db *gorm.DB, env *dialect.Env) error {
	ct, seq := env.Quote(models.TableSessionChanges), env.Quote(tableChangeSeq)
	probe := `SELECT id FROM ` + ct + ` WHERE ord = 0 LIMIT 1`
	pick := fmt.Sprintf(`SELECT id, session_id FROM %s WHERE ord = 0 ORDER BY id LIMIT %d FOR UPDATE SKIP LOCKED`, ct, sequenceBatch)
	for {
		var found []int64
		if err := db.WithContext(ctx).Raw(probe).Scan(&found).Error; err != nil {
			return err
		}
		if len(found) == 0 {
			return nil
		}
		n := 0
		err := db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			var cur []int64
			if err := tx.Raw(`SELECT ord FROM ` + seq + ` WHERE id = 1 FOR UPDATE`).Scan(&cur).Error; err != nil {
				return err
			}
			if len(cur) == 0 {
				return &dialect.Fault{Kind: dialect.ErrSchemaBehind, Cause: errNoSeqRow}
			}
			var picked []struct {
				ID        int64
				SessionID string
			}
			if err := tx.Raw(pick).Scan(&picked).Error; err != nil {
				return err
			}
			if n = len(picked); n == 0 {
				return nil
			}
			ids, err := holdBack(tx, ct, picked)
			if n = len(ids); err != nil || n == 0 {
				return err
			}
			next := cur[0] + 1
			if err := tx.Exec(`UPDATE `+ct+` SET ord = ? WHERE id IN ?`, next, ids).Error; err != nil {
				return err
			}
			return tx.Exec(`UPDATE `+seq+` SET ord = ? WHERE id = 1`, next).Error
		})
		if err != nil || n < sequenceBatch {
			return err
		}
	}
}

// holdBack returns the ids of picked (in id order) less those that must
// wait for a later run: a picked change of a session that has a change
// with ord 0 and a smaller id that was not picked. The pick scanned the
// ord-0 changes one after the other, so a change that became visible
// during the scan behind its position (its id taken earlier, its row
// inserted and committed meanwhile), or one a writer's statement locked
// for an instant as it scanned (SKIP LOCKED passed it), was not picked
// while a later change of its session may have been; this consistent
// read, after the pick, sees
// every change committed before it, so such a change is found and the
// session's later changes wait for it. A change of a transaction still
// running is not seen: it commits after every picked change, whose
// commit came first.
func holdBack(tx *gorm.DB, ct string, picked []struct {
	ID        int64
	SessionID string
}) ([]int64, error) {
	ids := make([]int64, 0, len(picked))
	sessions := make([]string, 0, len(picked))
	seen := map[string]bool{}
	for _, p := range picked {
		ids = append(ids, p.ID)
		if !seen[p.SessionID] {
			seen[p.SessionID] = true
			sessions = append(sessions, p.SessionID)
		}
	}
	var first []struct {
		SessionID string
		ID        int64
	}
	if err := tx.Raw(`SELECT session_id, MIN(id) AS id FROM `+ct+` WHERE ord = 0 AND session_id IN ? AND id NOT IN ? GROUP BY session_id`,
		sessions, ids).Scan(&first).Error; err != nil {
		return nil, err
	}
	if len(first) == 0 {
		return ids, nil
	}
	wait := make(map[string]int64, len(first))
	for _, f := range first {
		wait[f.SessionID] = f.ID
	}
	ids = ids[:0]
	for _, p := range picked {
		if w, ok := wait[p.SessionID]; !ok || p.ID < w {
			ids = append(ids, p.ID)
		}
	}
	return ids, nil
}

// FeedObjects implements dialect.FeedVerifier: V14's five triggers exist
// on their tables (MariaDB has no disabled triggers; trigger names are
// scoped to the database, hence prefixed).
func (mdDialect) FeedObjects(db *gorm.DB, env *dialect.Env, _ string) ([]dialect.FeedObject, error) {
	return dialect.TriggerFeedObjects(env, func(name, table string) (bool, error) {
		var n int64
		err := db.Raw(`SELECT COUNT(*) FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = DATABASE() AND TRIGGER_NAME = ? AND EVENT_OBJECT_TABLE = ?`,
			name, table).Scan(&n).Error
		return n > 0, err
	})
}

// NowMillisSQL implements dialect.ChangeFeedClock: the database's clock in
// Unix milliseconds, as V14's triggers write a change's at.
func (mdDialect) NowMillisSQL() string {
	return `CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)`
}
