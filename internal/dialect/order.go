package dialect

// BinaryOrderer is implemented by a dialect whose text comparisons follow
// a locale's collation by default (PostgreSQL: the database's collation).
// BinaryOrder returns the SQL expression that orders and compares col (a
// text column) by its bytes, as SQLite's default BINARY collation does, so
// that a walk in key order (ORDER BY and a keyset > comparison) visits rows
// in the same order on every dialect. A dialect whose default text order is
// already by bytes does not implement it.
type BinaryOrderer interface {
	BinaryOrder(col string) string
}

// SerialAdvancer is implemented by a dialect whose auto-increment columns
// are fed by a sequence that an INSERT with an explicit value does not
// move (PostgreSQL's bigserial). AdvanceSerialSQL returns one statement
// that moves the sequence of column col (a plain column name) of table
// (its quoted, schema-qualified name) past the largest stored value, never
// backwards; the statement has one parameter, the same quoted name as
// text. A dialect whose auto-increment follows explicit inserts (SQLite's
// AUTOINCREMENT) does not implement it.
type SerialAdvancer interface {
	AdvanceSerialSQL(table, col string) string
}

// KeysetExpander is implemented by a dialect whose optimizer does not read
// a row-value comparison (a, b) > (x, y) as a range of an (a, b) index
// (MariaDB 10.11 walks the index from its start and filters: a page after
// a cursor half-way reads half the table). KeysetAfter returns the same
// condition in a form its optimizer reads as index ranges, with three
// parameters in the order x, x, y. A dialect whose optimizer reads the
// row value (PostgreSQL, SQLite) does not implement it.
type KeysetExpander interface {
	KeysetAfter(a, b string) string
}

// PlanHinter is implemented by a dialect whose optimizer picks a plan that
// grows with the table for a statement the engine knows a bounded plan of,
// and which has hints to ask for that plan (MariaDB 10.11). ForceIndex
// returns the table-reference suffix that makes the optimizer read a table
// by the index named index (already quoted), " FORCE INDEX (index)".
// JoinInOrder returns the join keyword that joins its two tables in the
// order written, the left one first (STRAIGHT_JOIN). A dialect whose
// optimizer finds those plans itself does not implement it; the engine
// then writes no hint and a plain JOIN.
type PlanHinter interface {
	ForceIndex(index string) string
	JoinInOrder() string
}
