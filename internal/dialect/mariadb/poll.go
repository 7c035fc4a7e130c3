package mariadb

import (
	"strings"
	"time"

	"github.com/agentstore/agentstore/internal/dialect"
)

var _ dialect.PollFallback = mdDialect{}

// DefaultPollInterval implements dialect.PollFallback: MariaDB has no
// LISTEN/NOTIFY, so a waiting call of another Store learns of new work only
// by re-checking; 1 s keeps an idle waiting call at about one query per
// second (the idle-cost limit). Enqueues through the same Store still
// wake its waiting calls at once; WithPollInterval trades more queries for
// a shorter cross-Store delay.
func (mdDialect) DefaultPollInterval() time.Duration { return time.Second }

var _ dialect.DDLPreamble = mdDialect{}

// DDLPreamble implements dialect.DDLPreamble: the exported DDL's
// statements outside the models double-quote identifiers, which the
// mysql client reads as identifiers only with ANSI_QUOTES (the chain's
// files start with the same statement).
func (mdDialect) DDLPreamble() string {
	return "SET SESSION sql_mode = CONCAT(@@SESSION.sql_mode, ',ANSI_QUOTES')"
}

var _ dialect.ClientScript = mdDialect{}

// WrapCompound implements dialect.ClientScript: a statement holding ";"
// (a stored function's BEGIN ... END) is written between DELIMITER lines,
// which the mysql client and Flyway understand; Migrate itself never sees
// them (it splits the chain's files at a ";" ending a line).
func (mdDialect) WrapCompound(stmt string) (string, bool) {
	if !strings.Contains(stmt, ";") {
		return "", false
	}
	return "DELIMITER $$\n" + stmt + "$$\nDELIMITER ;\n", true
}
