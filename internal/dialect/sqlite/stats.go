package sqlite

import (
	"strconv"
	"strings"

	"github.com/agentstore/agentstore/internal/dialect"

	"gorm.io/gorm"
)

// SQLite statistics for ProviderAdminExt's estimates (dialect.StatsReader): only
// sqlite_stat1, written by ANALYZE (or PRAGMA optimize), which holds each
// index's row count as of that run.

var _ dialect.StatsReader = liteDialect{}

// tableRows returns the row count ANALYZE recorded for the table (the
// first number of any of its sqlite_stat1 rows); none when ANALYZE never
// ran (no sqlite_stat1 table) or did not cover the table.
func (liteDialect) TableRows(db *gorm.DB, env *dialect.Env, base string) (int64, bool, error) {
	var has []int64
	if err := db.Raw(`SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'sqlite_stat1'`).Scan(&has).Error; err != nil {
		return 0, false, err
	}
	if len(has) == 0 {
		return 0, false, nil
	}
	var stats []string
	if err := db.Raw(`SELECT stat FROM sqlite_stat1 WHERE tbl = ?`, env.Config.Prefix+base).Scan(&stats).Error; err != nil {
		return 0, false, err
	}
	var best int64 = -1
	for _, st := range stats {
		first, _, _ := strings.Cut(st, " ")
		if n, err := strconv.ParseInt(first, 10, 64); err == nil && n > best {
			best = n
		}
	}
	return best, best >= 0, nil
}

// valueFraction: sqlite_stat1 has no per-value counts (sqlite_stat4 is
// not compiled in by default), so there is none.
func (liteDialect) ValueFraction(*gorm.DB, *dialect.Env, string, string, string) (float64, bool, error) {
	return 0, false, nil
}
