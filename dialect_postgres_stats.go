package agentstore

import (
	"math"

	"gorm.io/gorm"
)

// PostgreSQL statistics for ProviderAdminExt's estimates (statsReader).

var _ statsReader = pgDialect{}

// tableRows returns pg_stat_user_tables.n_live_tup (the cumulative
// statistics: every commit's inserts and deletes, reported within about a
// second) or, when that is 0 (statistics reset by pg_stat_reset or crash
// recovery; estimates only ask for tables whose bounded count reached its
// cap, so 0 is never the truth), pg_class.reltuples (as of the last
// VACUUM, ANALYZE or CREATE INDEX; -1 for a table never analyzed: none).
func (pgDialect) tableRows(db *gorm.DB, s *Store, base string) (int64, bool, error) {
	var rows []struct {
		Reltuples float64
		LiveTup   int64
	}
	if err := db.Raw(`SELECT c.reltuples, COALESCE(st.n_live_tup, 0) AS live_tup FROM pg_class c`+
		` LEFT JOIN pg_stat_user_tables st ON st.relid = c.oid WHERE c.oid = to_regclass(?)`, s.quoted(base)).Scan(&rows).Error; err != nil {
		return 0, false, err
	}
	switch {
	case len(rows) == 0:
		return 0, false, nil
	case rows[0].LiveTup > 0:
		return rows[0].LiveTup, true, nil
	case rows[0].Reltuples >= 0:
		return int64(math.Round(rows[0].Reltuples)), true, nil
	}
	return 0, false, nil
}

// valueFraction returns the frequency of value among the most common
// values of the column in pg_stats (the planner's statistics, as of the
// last ANALYZE); none when the column has no statistics or value is not
// among its most common values.
func (pgDialect) valueFraction(db *gorm.DB, s *Store, base, column, value string) (float64, bool, error) {
	var freqs []*float64
	if err := db.Raw(`SELECT st.most_common_freqs[array_position(st.most_common_vals::text::text[], ?)] FROM pg_stats st`+
		` WHERE st.schemaname = COALESCE(NULLIF(?, ''), current_schema()) AND st.tablename = ? AND st.attname = ?`,
		value, s.cfg.schema, s.cfg.prefix+base, column).Scan(&freqs).Error; err != nil {
		return 0, false, err
	}
	if len(freqs) == 0 || freqs[0] == nil {
		return 0, false, nil
	}
	return *freqs[0], true, nil
}
