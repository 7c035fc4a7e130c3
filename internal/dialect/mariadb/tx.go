package mariadb

import "github.com/agentstore/agentstore/internal/dialect"

var _ dialect.TxIdentity = mdDialect{}

// IdentitySQL implements dialect.TxIdentity: the server (host name and
// port), the connection's current database (the Store's tables are named
// unqualified and resolve there) and whether the connection quotes
// identifiers with double quotes (ANSI_QUOTES, which every statement of
// the Store relies on). A transaction the application began on a
// connection without ANSI_QUOTES, or on another database or server, gives
// another text and is refused (ErrInvalidConfig). The statement itself
// uses no double quotes, so it runs on such a connection too.
func (mdDialect) IdentitySQL(string) string {
	return `SELECT CONCAT(@@hostname, ':', @@port, '/', COALESCE(DATABASE(), ''), '/ansi_quotes=', FIND_IN_SET('ANSI_QUOTES', @@sql_mode) > 0)`
}
