package sqlite

import (
	"fmt"

	"gorm.io/gorm"

	"github.com/agentstore/agentstore/internal/dialect"
	"github.com/agentstore/agentstore/models"
)

var _ dialect.FeedVerifier = liteDialect{}
var _ dialect.ChangeFeedClock = liteDialect{}

// liteFeedTriggers are migration V10's triggers, named with the prefix.
func liteFeedTriggers() []struct{ table, name string } {
	return []struct{ table, name string }{
		{models.TableSessions, "sessions_change_insert"},
		{models.TableSessions, "sessions_change_update"},
		{models.TableSessions, "sessions_change_delete"},
		{models.TableQueue, "queue_change_insert"},
		{models.TableQueue, "queue_change_status"},
	}
}

// FeedObjects implements dialect.FeedVerifier: V10's five triggers exist
// on their tables (SQLite has no disabled triggers).
func (liteDialect) FeedObjects(db *gorm.DB, env *dialect.Env, _ string) ([]dialect.FeedObject, error) {
	var out []dialect.FeedObject
	for _, tr := range liteFeedTriggers() {
		table, name := env.Config.Prefix+tr.table, env.Config.Prefix+tr.name
		var n int64
		if err := db.Raw(`SELECT COUNT(*) FROM sqlite_master WHERE type = 'trigger' AND name = ? AND tbl_name = ?`, name, table).
			Scan(&n).Error; err != nil {
			return nil, fmt.Errorf("read change feed trigger %s: %w", name, err)
		}
		o := dialect.FeedObject{Table: table, Kind: "trigger", Name: name, State: "present"}
		if n == 0 {
			o.State = "missing"
		}
		out = append(out, o)
	}
	return out, nil
}

// NowMillisSQL implements dialect.ChangeFeedClock: the database's clock in
// Unix milliseconds, as V10's triggers write a change's at.
func (liteDialect) NowMillisSQL() string {
	return `CAST((julianday('now') - 2440587.5) * 86400000 AS integer)`
}
