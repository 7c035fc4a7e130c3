package agentstore

// PostgreSQL's optional one-statement session steps (CapFastPaths).

// sessionFastPaths is implemented by a dialect with one-statement forms of
// session-store steps.
type sessionFastPaths interface {
	// appendAdvanceSQL returns the statement that locks session row id
	// (table st, extra condition tc), advances last_seq by the first
	// parameter, applies the SET list set (its parameters next, then the
	// id and tc's), and returns the old last_seq and current_leaf_id. The
	// general path (lockHead, then UPDATE) does the same in two statements.
	appendAdvanceSQL(st, set, tc string) string
}

var _ sessionFastPaths = pgDialect{}

func (pgDialect) appendAdvanceSQL(st, set, tc string) string {
	return "UPDATE " + st + " AS s SET last_seq = o.last_seq + ?," + set +
		" FROM (SELECT id, last_seq, current_leaf_id FROM " + st + " WHERE id = ?" + tc + " FOR UPDATE) AS o" +
		" WHERE s.id = o.id RETURNING o.last_seq, o.current_leaf_id"
}
