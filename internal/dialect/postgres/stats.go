package postgres

import (
	"math"

	"github.com/agentstore/agentstore/internal/dialect"

	"gorm.io/gorm"
)

// PostgreSQL statistics for ProviderAdminExt's estimates (dialect.StatsReader).

var _ dialect.StatsReader = pgDialect{}

// tableRows returns the planner's own row estimate of the table: the row
// density of the last VACUUM, ANALYZE or CREATE INDEX (pg_class.reltuples
// / relpages) times the table's current size in pages, so growth since
// then is seen at once (rows deleted since count until a vacuum reuses
// their space). For a table never vacuumed or analyzed (reltuples -1)
// it is the cumulative statistics' pg_stat_user_tables.n_live_tup (every
// commit's inserts and deletes, reported within about a second; reset by
// pg_stat_reset and crash recovery, and after an ANALYZE it can count the
// rows inserted just before it twice, which is why it is the fallback);
// none when that is 0 too (estimates only ask for tables whose bounded
// count reached its cap, so 0 is never the truth).
func (pgDialect) TableRows(db *gorm.DB, env *dialect.Env, base string) (int64, bool, error) {
	var rows []struct {
		Reltuples float64
		Relpages  int64
		CurPages  int64
		LiveTup   int64
	}
	if err := db.Raw(`SELECT c.reltuples, c.relpages, pg_relation_size(c.oid) / current_setting('block_size')::bigint AS cur_pages,`+
		` COALESCE(st.n_live_tup, 0) AS live_tup FROM pg_class c LEFT JOIN pg_stat_user_tables st ON st.relid = c.oid WHERE c.oid = to_regclass(?)`,
		env.Quote(base)).Scan(&rows).Error; err != nil {
		return 0, false, err
	}
	if len(rows) == 0 {
		return 0, false, nil
	}
	r := rows[0]
	switch {
	case r.Reltuples >= 0 && r.Relpages > 0:
		return int64(math.Round(r.Reltuples / float64(r.Relpages) * float64(max(r.CurPages, 1)))), true, nil
	case r.Reltuples > 0:
		return int64(math.Round(r.Reltuples)), true, nil
	case r.LiveTup > 0:
		return r.LiveTup, true, nil
	}
	return 0, false, nil
}

// valueFraction returns the frequency of value among the most common
// values of the column in pg_stats (the planner's statistics, as of the
// last ANALYZE); none when the column has no statistics or value is not
// among its most common values.
func (pgDialect) ValueFraction(db *gorm.DB, env *dialect.Env, base, column, value string) (float64, bool, error) {
	var freqs []*float64
	if err := db.Raw(`SELECT st.most_common_freqs[array_position(st.most_common_vals::text::text[], ?)] FROM pg_stats st`+
		` WHERE st.schemaname = COALESCE(NULLIF(?, ''), current_schema()) AND st.tablename = ? AND st.attname = ?`,
		value, env.Config.Schema, env.Config.Prefix+base, column).Scan(&freqs).Error; err != nil {
		return 0, false, err
	}
	if len(freqs) == 0 || freqs[0] == nil {
		return 0, false, nil
	}
	return *freqs[0], true, nil
}
