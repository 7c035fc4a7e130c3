package dialect

import (
	"context"
	"fmt"

	"gorm.io/gorm"

	"github.com/agentstore/agentstore/models"
)

// ChangeFeedVisibility is implemented by a dialect whose concurrent writers
// can commit out of the order of the session change feed's ordering key
// (PostgreSQL: ord is the writing transaction's id, and transactions commit
// in any order). VisibleOrdSQL returns a scalar SQL expression, evaluated
// once per read, below which every ord is final: no transaction still
// running can add a change with a smaller ord. A feed read delivers only
// the changes below it. A single-writer dialect (commit order is the id's
// order, ChangeFeedIDOrder) does not implement it.
type ChangeFeedVisibility interface {
	VisibleOrdSQL() string
}

// ChangeFeedIDOrder is implemented by a dialect whose session change feed
// is in id order: one writer at a time, so ord is always 0 and the id is
// commit order (SQLite). Its feed table (migration V19) has neither the
// (ord, id) index nor AUTOINCREMENT: feed reads and purges order by the id
// (the primary key) alone, and Verify does not expect the models' (ord,
// id) index of it.
type ChangeFeedIDOrder interface {
	ChangeFeedIDOrder()
}

// NotifyFeed is the wake-up payload of the session change feed: session
// changes were committed.
const NotifyFeed = "f"

// IssueChangeFeed: a database object the session change feed's rows come
// from (a trigger on the sessions or queue table, PostgreSQL's trigger
// function) is missing or disabled. While it is, writes commit without
// their change rows and the feed silently misses them.
const IssueChangeFeed IssueKind = "change_feed"

// FeedObject is one database object the change feed depends on, as the
// dialect found it.
type FeedObject struct {
	// Table is the prefixed table a trigger is on; "" for a function.
	Table string
	// Kind is "trigger" or "function".
	Kind string
	// Name is the object's name as the Store's rendered migrations spell
	// it (prefixed where the dialect prefixes it), unquoted.
	Name string
	// State is "present", "missing" or "disabled".
	State string
	// EnableFix is the statement that enables a disabled object.
	EnableFix string
}

// FeedVerifier is implemented by a dialect whose change feed is written by
// database objects (migration V10's triggers): Verify reports each one
// that is not present and enabled (IssueChangeFeed).
type FeedVerifier interface {
	FeedObjects(db *gorm.DB, env *Env, nsp string) ([]FeedObject, error)
}

// TriggerFeedObjects returns the FeedObjects of a dialect whose change
// feed is the five row triggers of its migrations (SQLite's V10,
// MariaDB's V14; neither database has disabled triggers): each named with
// env's prefix, "present" when hasTrigger reports the trigger on its
// table, "missing" otherwise.
func TriggerFeedObjects(env *Env, hasTrigger func(name, table string) (bool, error)) ([]FeedObject, error) {
	triggers := []struct{ table, name string }{
		{models.TableSessions, "sessions_change_insert"},
		{models.TableSessions, "sessions_change_update"},
		{models.TableSessions, "sessions_change_delete"},
		{models.TableQueue, "queue_change_insert"},
		{models.TableQueue, "queue_change_status"},
	}
	out := make([]FeedObject, 0, len(triggers))
	for _, tr := range triggers {
		table, name := env.Config.Prefix+tr.table, env.Config.Prefix+tr.name
		ok, err := hasTrigger(name, table)
		if err != nil {
			return nil, fmt.Errorf("read change feed trigger %s: %w", name, err)
		}
		o := FeedObject{Table: table, Kind: "trigger", Name: name, State: "present"}
		if !ok {
			o.State = "missing"
		}
		out = append(out, o)
	}
	return out, nil
}

// ChangeFeedClock is implemented by a dialect that can read the
// database's clock as the change feed's triggers write a change's time:
// NowMillisSQL returns a scalar SQL expression of the database's current
// time in Unix milliseconds, on the same clock (and rounding) as the
// feed's `at` column. PurgeChanges measures a change's age with it, so a
// host whose clock is skewed from the database's purges neither early nor
// late. A dialect without it is measured against the Store's host clock.
type ChangeFeedClock interface {
	NowMillisSQL() string
}

// ChangeFeedSequencer is implemented by a dialect whose writers cannot
// give a change its place in the feed when they write it (MariaDB: an
// AUTO_INCREMENT id is taken before its row is visible, and transactions
// commit in any order; there is no transaction id a reader could bound).
// Its triggers write every change with ord = 0, which is not yet in the
// feed: the feed is the rows with ord > 0, and reads and purges see only
// those. SequenceChanges, run by a reader before it reads, gives the
// committed rows with ord = 0 their place: serialised with every other
// run, it gives them (in id order) an ord greater than every ord given
// before and commits, so the rows with ord > 0 only ever grow by a
// suffix of the feed's order (ord, id). Rows of transactions still
// running are left for a later run. db is the Store's handle (not a
// transaction).
type ChangeFeedSequencer interface {
	SequenceChanges(ctx context.Context, db *gorm.DB, env *Env) error
}
