package sqlite

import (
	"gorm.io/gorm"

	"github.com/agentstore/agentstore/internal/dialect"
)

var _ dialect.FeedVerifier = liteDialect{}
var _ dialect.ChangeFeedClock = liteDialect{}

// FeedObjects implements dialect.FeedVerifier: V10's five triggers exist
// on their tables (SQLite has no disabled triggers).
func (liteDialect) FeedObjects(db *gorm.DB, env *dialect.Env, _ string) ([]dialect.FeedObject, error) {
	return dialect.TriggerFeedObjects(env, func(name, table string) (bool, error) {
		var n int64
		err := db.Raw(`SELECT COUNT(*) FROM sqlite_master WHERE type = 'trigger' AND name = ? AND tbl_name = ?`, name, table).Scan(&n).Error
		return n > 0, err
	})
}

// NowMillisSQL implements dialect.ChangeFeedClock: the database's clock in
// Unix milliseconds, as V10's triggers write a change's at.
func (liteDialect) NowMillisSQL() string {
	return `CAST((julianday('now') - 2440587.5) * 86400000 AS integer)`
}
