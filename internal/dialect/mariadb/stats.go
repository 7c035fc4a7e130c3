package mariadb

import (
	"gorm.io/gorm"

	"github.com/agentstore/agentstore/internal/dialect"
)

// TableRows reads InnoDB's row estimate of table base
// (information_schema.tables.table_rows, refreshed by ANALYZE TABLE and
// InnoDB's automatic statistics); ok is false when it has none.
func (mdDialect) TableRows(db *gorm.DB, env *dialect.Env, base string) (int64, bool, error) {
	var rows []*int64
	if err := db.Raw(`SELECT table_rows FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?`,
		env.Config.Prefix+base).Scan(&rows).Error; err != nil {
		return 0, false, err
	}
	if len(rows) == 0 || rows[0] == nil || *rows[0] <= 0 {
		return 0, false, nil
	}
	return *rows[0], true, nil
}

// ValueFraction: MariaDB keeps value frequencies only in histograms
// collected on request (ANALYZE TABLE ... PERSISTENT FOR ...), which
// agentstore does not ask for; ok is always false (the figure stays a
// lower bound).
func (mdDialect) ValueFraction(*gorm.DB, *dialect.Env, string, string, string) (float64, bool, error) {
	return 0, false, nil
}

var _ dialect.StatsReader = mdDialect{}
