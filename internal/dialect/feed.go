package dialect

// ChangeFeedVisibility is implemented by a dialect whose concurrent writers
// can commit out of the order of the session change feed's ordering key
// (PostgreSQL: ord is the writing transaction's id, and transactions commit
// in any order). VisibleOrdSQL returns a scalar SQL expression, evaluated
// once per read, below which every ord is final: no transaction still
// running can add a change with a smaller ord. A feed read delivers only
// the changes below it. A single-writer dialect (commit order is the
// AUTOINCREMENT id's order) does not implement it.
type ChangeFeedVisibility interface {
	VisibleOrdSQL() string
}

// NotifyFeed is the wake-up payload of the session change feed: session
// changes were committed.
const NotifyFeed = "f"
