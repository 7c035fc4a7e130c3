package agentstore

// PostgreSQL's optional one-statement session steps (CapFastPaths).

// sessionFastPaths is implemented by a dialect with one-statement forms of
// session-store steps.
type sessionFastPaths interface {
	// appendOneSQL returns one statement that does a whole append: with
	// the WITH item vals (appendValues: the message rows, parameters
	// first), it locks session row id (table st, extra condition tc),
	// advances last_seq by the next parameter, applies the SET list set
	// (its parameters next, then the id and tc's), inserts the rows with
	// ins (appendInsertSelect for source alias "a": the session row's id,
	// old last_seq and old current_leaf_id) and returns the old last_seq
	// and current_leaf_id; no row when the session is not advanced (missing,
	// outside tc). The general path does the same in a transaction of
	// three statements (lockHead, UPDATE, INSERT).
	appendOneSQL(vals, st, set, tc, ins string) string
}

var _ sessionFastPaths = pgDialect{}

// appendOneSQL: the FOR UPDATE subquery waits for a concurrent appender's
// commit and then reads the row's newest version (read committed), so the
// old head it returns, and the seqs the INSERT derives from it, follow
// that appender's; the UPDATE re-checks the same row. The data-modifying
// CTE a runs once whether or not the final SELECT reads it, and i inserts
// nothing when a returns no row.
func (pgDialect) appendOneSQL(vals, st, set, tc, ins string) string {
	return "WITH " + vals + ", a AS (UPDATE " + st + " AS s SET last_seq = o.last_seq + ?," + set +
		" FROM (SELECT id, last_seq, current_leaf_id FROM " + st + " WHERE id = ?" + tc + " FOR UPDATE) AS o" +
		" WHERE s.id = o.id RETURNING s.id, o.last_seq, o.current_leaf_id), i AS (" + ins + "a, v)" +
		" SELECT last_seq, current_leaf_id FROM a"
}
