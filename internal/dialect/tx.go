package dialect

// Optional interfaces for session writes inside a transaction the
// application owns (the engine's TxView).

// TxIdentity is implemented by a dialect on which a transaction the
// application began elsewhere may be on another database than the Store's
// (a client-server database): IdentitySQL returns one SELECT of one text
// column that identifies, from inside any transaction, the database the
// connection is on and the sessions table its names resolve to
// (sessionsTable is the Store's quoted, possibly schema-qualified sessions
// table). Two connections on the same database that resolve the Store's
// tables alike return the same text. Without it the engine only checks the
// transaction's connection pool.
type TxIdentity interface {
	IdentitySQL(sessionsTable string) string
}

// TxWakeup is implemented by a dialect whose cross-Store wake-up (Waker)
// can be sent from inside a transaction and delivered at its commit only
// (PostgreSQL: NOTIFY is transactional). PublishSQL returns the statement
// that sends the wake-up kind (NotifySessionQueue, NotifyFeed) for the
// Store of schema and prefix: every Store of that schema and prefix,
// including the sending one, is woken when the transaction commits, none
// when it rolls back. Without it the dialect's Waker sees commits by
// itself (SQLite's data_version watcher).
type TxWakeup interface {
	PublishSQL(schema, prefix, kind string) string
}
