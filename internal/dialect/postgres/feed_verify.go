package postgres

import (
	"fmt"

	"gorm.io/gorm"

	"github.com/agentstore/agentstore/internal/dialect"
	"github.com/agentstore/agentstore/models"
)

var _ dialect.FeedVerifier = pgDialect{}
var _ dialect.ChangeFeedClock = pgDialect{}

// pgFeedTriggers are migration V10's triggers: PostgreSQL scopes trigger
// names to their table, so they carry no prefix.
func pgFeedTriggers() []struct{ table, name string } {
	return []struct{ table, name string }{
		{models.TableSessions, "trg_sessions_change"},
		{models.TableQueue, "trg_queue_change_insert"},
		{models.TableQueue, "trg_queue_change_status"},
	}
}

// FeedObjects implements dialect.FeedVerifier: V10's trigger function and
// its three triggers, each present and enabled.
func (pgDialect) FeedObjects(db *gorm.DB, env *dialect.Env, nsp string) ([]dialect.FeedObject, error) {
	fn := env.Config.Prefix + "session_change"
	var ok bool
	if err := db.Raw(`SELECT to_regprocedure(quote_ident(?) || '.' || quote_ident(?) || '()') IS NOT NULL`, nsp, fn).
		Scan(&ok).Error; err != nil {
		return nil, fmt.Errorf("read change feed function: %w", err)
	}
	out := []dialect.FeedObject{{Kind: "function", Name: fn, State: state(ok, "")}}
	for _, tr := range pgFeedTriggers() {
		table := env.Config.Prefix + tr.table
		var enabled []string
		if err := db.Raw(`SELECT tg.tgenabled::text FROM pg_catalog.pg_trigger tg
			JOIN pg_catalog.pg_class c ON c.oid = tg.tgrelid JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = ? AND c.relname = ? AND tg.tgname = ?`, nsp, table, tr.name).Scan(&enabled).Error; err != nil {
			return nil, fmt.Errorf("read change feed trigger %s: %w", tr.name, err)
		}
		o := dialect.FeedObject{Table: table, Kind: "trigger", Name: tr.name, State: "missing"}
		if len(enabled) > 0 {
			o.State = state(true, enabled[0])
			o.EnableFix = fmt.Sprintf(`ALTER TABLE %s ENABLE TRIGGER "%s"`, env.Quote(tr.table), tr.name)
		}
		out = append(out, o)
	}
	return out, nil
}

// state names an object's state from whether it exists and its
// pg_trigger.tgenabled ("D" = disabled; "" for a function).
func state(exists bool, tgenabled string) string {
	switch {
	case !exists:
		return "missing"
	case tgenabled == "D":
		return "disabled"
	}
	return "present"
}
