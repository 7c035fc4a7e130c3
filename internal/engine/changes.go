package engine

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/agentstore/agentstore/internal/dialect"
	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo"
)

// The session change feed (repo.ChangeFeed, migration V10, docs/changes.md).
//
// The rows are written by the database's triggers on the sessions and
// queue tables, in the writing statement, so every write path (the
// one-statement append, group commit, Save, Fork, cascades) records its
// change in its own transaction without a statement of its own. The feed's
// order is (ord, id). On a single-writer dialect (dialect.ChangeFeedIDOrder)
// ord is 0 and the id is commit order: reads and purges walk the id. On
// PostgreSQL ord is the writing transaction's id raised to the session's
// newest ord, and a read delivers
// only rows below dialect.ChangeFeedVisibility's bound (the snapshot's
// xmin), so a cursor (ord, id) never has a committed row appear behind it.
// On MariaDB (dialect.ChangeFeedSequencer) the triggers write ord 0, not
// in the feed yet; a read first has the dialect place the committed rows
// (the next ord, serialised) and reads only rows with ord > 0.

// ChangeFeed returns the session change feed of the store (every tenant).
func (s *Store) ChangeFeed() repo.ChangeFeed {
	return s.tel.changeFeed(changeFeed{&sessionStore{s: s}})
}

// ChangeFeed returns the change feed of the tenant's sessions.
func (v *TenantView) ChangeFeed() repo.ChangeFeed {
	t := v.tenant
	return v.st.tel.changeFeed(changeFeed{&sessionStore{s: v.st, tenant: &t, scopeErr: v.err}})
}

// changeFeed implements repo.ChangeFeed over a (possibly tenant-scoped)
// session store.
type changeFeed struct{ ss *sessionStore }

var _ repo.ChangeFeed = changeFeed{}

// feedWrote wakes this Store's Watches and tells other Stores (the
// provider's wake-up: NOTIFY on PostgreSQL; SQLite's watchers see the
// commit themselves) that session changes may have committed. Called after
// every session write call, whatever its outcome (a failed call may still
// have committed, and a spurious wake-up costs one read).
func (s *Store) feedWrote() {
	s.provider().feed.notify()
}

// wrote is feedWrote for a call that is not inside WithSessionLock's
// transaction (whose commit the outer call reports).
func (ss *sessionStore) wrote() {
	if ss.tx == nil {
		ss.s.feedWrote()
	}
}

// changeCursorPrefix starts every cursor: a version tag, so the format can
// change without misreading old cursors.
const changeCursorPrefix = "c1."

func encodeChangeCursor(ord, id int64) repo.ChangeCursor {
	return repo.ChangeCursor(changeCursorPrefix + strconv.FormatInt(ord, 10) + "." + strconv.FormatInt(id, 10))
}

// decodeChangeCursor parses a cursor; "" is the start of the feed (0, 0).
func decodeChangeCursor(c repo.ChangeCursor) (ord, id int64, err error) {
	if c == "" {
		return 0, 0, nil
	}
	rest, ok := strings.CutPrefix(string(c), changeCursorPrefix)
	a, b, ok2 := strings.Cut(rest, ".")
	if ok && ok2 {
		ord, err1 := strconv.ParseInt(a, 10, 64)
		id, err2 := strconv.ParseInt(b, 10, 64)
		if err1 == nil && err2 == nil && ord >= 0 && id > 0 && strconv.FormatInt(ord, 10) == a && strconv.FormatInt(id, 10) == b {
			return ord, id, nil
		}
	}
	return 0, 0, invalidf("change cursor %q is malformed (pass back a Cursor or Next the feed returned)", truncateForMsg(string(c)))
}

// truncateForMsg keeps an error message short whatever the input's size.
func truncateForMsg(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

func changeLimit(n int) (int, error) {
	switch {
	case n < 0 || n > repo.MaxPageLimit:
		return 0, invalidf("change feed limit %d outside 0..%d", n, repo.MaxPageLimit)
	case n == 0:
		return repo.DefaultPageLimit, nil
	}
	return n, nil
}

const changeCols = "id, ord, tenant_id, session_id, kind, item_id, state, from_seq, to_seq, version, at"

// feedSupported refuses the change feed on a dialect without
// CapChangeFeed (its schema records no changes).
func (s *Store) feedSupported() error {
	if !s.has(CapChangeFeed) {
		return configf("the %s dialect has no change feed (its schema records no session changes; CapChangeFeed)", s.d.Title())
	}
	return nil
}

// Changes implements repo.ChangeFeed.
func (f changeFeed) Changes(ctx context.Context, p repo.ChangesParams) (repo.ChangesPage, error) {
	page, err := f.changes(ctx, p)
	return page, opErr("changes", err)
}

func (f changeFeed) changes(ctx context.Context, p repo.ChangesParams) (repo.ChangesPage, error) {
	if f.ss.scopeErr != nil {
		return repo.ChangesPage{}, f.ss.scopeErr
	}
	if err := f.ss.s.feedSupported(); err != nil {
		return repo.ChangesPage{}, err
	}
	limit, err := changeLimit(p.Limit)
	if err != nil {
		return repo.ChangesPage{}, fmt.Errorf("read changes: %w", err)
	}
	ord, id, err := decodeChangeCursor(p.After)
	if err != nil {
		return repo.ChangesPage{}, fmt.Errorf("read changes: %w", err)
	}
	if p.TenantID != nil {
		if err := checkID("tenant id", *p.TenantID); err != nil {
			return repo.ChangesPage{}, fmt.Errorf("read changes: %w", err)
		}
	}
	sequenced, err := f.sequence(ctx)
	if err != nil {
		return repo.ChangesPage{}, fmt.Errorf("read changes: %w", err)
	}
	after, args := f.after(ord, id)
	order := f.order()
	q := "SELECT " + changeCols + " FROM " + f.ss.s.quoted(models.TableSessionChanges) + " WHERE " + after + " AND kind <> ?"
	args = append(args, changePurged)
	if sequenced {
		q += " AND ord > 0" // ord 0: not in the feed yet
	}
	if p.SessionID != uuid.Nil {
		q += " AND session_id = ?"
		args = append(args, p.SessionID)
	}
	if p.TenantID != nil {
		q += " AND tenant_id = ?"
		args = append(args, *p.TenantID)
	}
	tc, targs := f.ss.tenantCond("tenant_id")
	q += tc
	args = append(args, targs...)
	if v, ok := f.ss.s.d.(dialect.ChangeFeedVisibility); ok {
		q += " AND ord < (SELECT " + v.VisibleOrdSQL() + ")"
	}
	q += " ORDER BY " + order + " LIMIT " + strconv.Itoa(limit)
	rows, err := f.ss.db(ctx).Raw(q, args...).Rows()
	if err != nil {
		return repo.ChangesPage{}, fmt.Errorf("read changes: %w", dbErr(err))
	}
	out, err := scanChanges(rows)
	if err = translateVia(f.ss.s.db, err); err != nil {
		return repo.ChangesPage{}, fmt.Errorf("read changes: %w", dbErr(err))
	}
	// The horizon is read after the page: a purge that deleted changes
	// after the cursor before the page was read committed its tombstone
	// with them, so it is seen here (one that commits later may report an
	// expiry the page did not suffer; a retry from the cursor then does).
	if p.After != "" {
		if err := f.checkHorizon(ctx, p, ord, id); err != nil {
			return repo.ChangesPage{}, fmt.Errorf("read changes: %w", err)
		}
	}
	page := repo.ChangesPage{Changes: out, Next: p.After}
	if len(out) > 0 {
		page.Next = out[len(out)-1].Cursor
	}
	return page, nil
}

// order returns the ORDER BY list of the feed's order: (ord, id), or on a
// dialect whose feed is in id order (dialect.ChangeFeedIDOrder: ord is 0
// on every row and the table has no (ord, id) index) the id alone, the
// same order by the primary key.
func (f changeFeed) order() string {
	if f.idOrder() {
		return "id"
	}
	return "ord, id"
}

// idOrder reports whether the dialect's feed is in id order
// (dialect.ChangeFeedIDOrder).
func (f changeFeed) idOrder() bool {
	_, ok := f.ss.s.d.(dialect.ChangeFeedIDOrder)
	return ok
}

// after returns the condition "after the cursor (ord, id) in the feed's
// order" (order) and its arguments.
func (f changeFeed) after(ord, id int64) (cond string, args []any) {
	switch {
	case !f.idOrder():
		return "(ord > ? OR (ord = ? AND id > ?))", []any{ord, ord, id}
	case ord > 0: // not a cursor of this database: nothing lies after it
		return "ord > ?", []any{ord}
	}
	return "ord = 0 AND id > ?", []any{id}
}

// sequence has a dialect.ChangeFeedSequencer place the committed changes
// not yet in the feed (ord 0) before a read or a purge, and reports
// whether the dialect is one (its feed is then the rows with ord > 0). A
// read-only Store places nothing: it reads what writable Stores placed.
func (f changeFeed) sequence(ctx context.Context) (bool, error) {
	seq, ok := f.ss.s.d.(dialect.ChangeFeedSequencer)
	if !ok || f.ss.s.cfg.ReadOnly {
		return ok, nil
	}
	if err := seq.SequenceChanges(ctx, f.ss.s.db, f.ss.s.env()); err != nil {
		if ctx.Err() != nil {
			return true, ctx.Err()
		}
		return true, fmt.Errorf("place new changes: %w", dbErr(translateVia(f.ss.s.db, err)))
	}
	return true, nil
}

// changePurged is the kind of a purge's tombstone: a row of the feed table
// that is no change (pages skip it) and marks the purge horizon. Each
// purge batch replaces its scope's tombstone with one at the position
// (ord, id) and time of the last change it deleted; session_id is
// uuid.Nil (the tombstones are one index range of the session index, one
// shard on a distributed database) and tenant_id the purging view's tenant,
// NULL for a purge of the whole feed.
const changePurged = "feed.purged"

// checkHorizon returns a *repo.CursorExpiredError when a tombstone that
// applies to the read lies after the cursor (ord, id).
func (f changeFeed) checkHorizon(ctx context.Context, p repo.ChangesParams, ord, id int64) error {
	q := "SELECT ord, id FROM " + f.ss.s.quoted(models.TableSessionChanges) + " WHERE session_id = ? AND kind = ?"
	args := []any{uuid.Nil, changePurged}
	tenant := p.TenantID
	if f.ss.tenant != nil {
		tenant = f.ss.tenant
	}
	if tenant != nil {
		q += " AND (tenant_id IS NULL OR tenant_id = ?)"
		args = append(args, *tenant)
	}
	q += " AND (ord > ? OR (ord = ? AND id > ?)) ORDER BY ord DESC, id DESC LIMIT 1"
	args = append(args, ord, ord, id)
	var h []struct{ Ord, ID int64 }
	if err := f.ss.db(ctx).Raw(q, args...).Scan(&h).Error; err != nil {
		return dbErr(err)
	}
	if len(h) == 0 {
		return nil
	}
	return &repo.CursorExpiredError{Cursor: p.After, Horizon: encodeChangeCursor(h[0].Ord, h[0].ID)}
}

func scanChanges(rows *sql.Rows) ([]repo.Change, error) {
	defer rows.Close()
	var out []repo.Change
	for rows.Next() {
		var (
			c         repo.Change
			id, ord   int64
			tenant    sql.NullString
			sid, item sql.NullString
			kind      string
			state     sql.NullString
			at        int64
		)
		if err := rows.Scan(&id, &ord, &tenant, &sid, &kind, &item, &state, &c.FromSeq, &c.ToSeq, &c.Version, &at); err != nil {
			return nil, err
		}
		var err error
		if c.SessionID, err = uuid.Parse(sid.String); err != nil {
			return nil, corrupt(models.TableSessionChanges, strconv.FormatInt(id, 10), "session_id", err)
		}
		if item.Valid {
			if c.ItemID, err = uuid.Parse(item.String); err != nil {
				return nil, corrupt(models.TableSessionChanges, strconv.FormatInt(id, 10), "item_id", err)
			}
		}
		if tenant.Valid {
			t := tenant.String
			c.TenantID = &t
		}
		c.Cursor = encodeChangeCursor(ord, id)
		c.Kind = repo.ChangeKind(kind)
		c.State = state.String
		c.Time = time.UnixMilli(at).UTC()
		out = append(out, c)
	}
	return out, rows.Err()
}

// feedRecheck is how often a Watch re-reads the feed when the wake-up
// mechanism is up: a wake-up may not come when the change that held the
// feed back was no session write (on PostgreSQL a transaction of any kind
// that was running when a change committed holds it back until it ends).
const feedRecheck = 250 * time.Millisecond

// Watch implements repo.ChangeFeed.
func (f changeFeed) Watch(ctx context.Context, p repo.ChangesParams, fn func(repo.Change) error) error {
	if fn == nil {
		return opErr("watch_changes", invalidf("watch changes: nil function"))
	}
	if err := f.ss.s.feedSupported(); err != nil {
		return opErr("watch_changes", err)
	}
	if _, err := changeLimit(p.Limit); err != nil {
		return opErr("watch_changes", fmt.Errorf("watch changes: %w", err))
	}
	if _, _, err := decodeChangeCursor(p.After); err != nil {
		return opErr("watch_changes", fmt.Errorf("watch changes: %w", err))
	}
	prov := f.ss.s.provider()
	sig := prov.feed
	if prov.waker != nil {
		prov.waker.Start()
	}
	if sig.waiting != nil {
		sig.waiting(1)
		defer sig.waiting(-1)
	}
	for {
		wake := sig.wait() // before the read: a commit after it wakes us
		page, err := f.changes(ctx, p)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return opErr("watch_changes", err)
		}
		for _, c := range page.Changes {
			if err := fn(c); err != nil {
				return err
			}
			p.After = c.Cursor
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		limit, _ := changeLimit(p.Limit)
		if len(page.Changes) == limit {
			continue
		}
		d := f.ss.s.cfg.PollInterval
		if sig.healthy != nil && sig.healthy() && d < feedRecheck {
			d = feedRecheck
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-wake:
		case <-t.C:
		}
		t.Stop()
	}
}

// PurgeChanges implements repo.ChangeFeed. Each batch is one DELETE of the
// feed's first rows in its order (order) older than the cutoff; a batch
// that deletes fewer than batch rows met a younger change (or the end) and
// ends the purge.
func (f changeFeed) PurgeChanges(ctx context.Context, olderThan time.Duration, batch int) (int, error) {
	n, err := f.purge(ctx, olderThan, batch)
	return n, opErr("purge_changes", err)
}

func (f changeFeed) purge(ctx context.Context, olderThan time.Duration, batch int) (int, error) {
	if f.ss.scopeErr != nil {
		return 0, f.ss.scopeErr
	}
	if err := f.ss.s.feedSupported(); err != nil {
		return 0, err
	}
	olderThan, batch, err := purgeArgs("purge changes", olderThan, repo.DefaultChangeRetention, batch)
	if err != nil {
		return 0, err
	}
	// A change's age is measured on the clock that wrote its time: the
	// database's (not this host's, nor WithClock's).
	cutoff := time.Now().Add(-olderThan).UnixMilli()
	if c, ok := f.ss.s.d.(dialect.ChangeFeedClock); ok {
		var now []struct{ Now int64 }
		if err := f.ss.db(ctx).Raw("SELECT " + c.NowMillisSQL() + " AS now").Scan(&now).Error; err != nil {
			return 0, fmt.Errorf("purge changes: read the database's clock: %w", dbErr(err))
		}
		if len(now) == 1 {
			cutoff = now[0].Now - olderThan.Milliseconds()
		}
	}
	ct := f.ss.s.quoted(models.TableSessionChanges)
	tc, targs := f.ss.tenantCond("tenant_id")
	// The prefix of the feed (in its order) older than the cutoff ends at
	// the first row written at or after it, found once: rows written later
	// are younger still.
	// The committed changes are placed first (a feed nobody reads is
	// purged too); rows still not in the feed (dialect.ChangeFeedSequencer:
	// ord 0, their transactions running) are neither purged nor a bound:
	// they will be placed after every row placed so far.
	sequenced, err := f.sequence(ctx)
	if err != nil {
		return 0, fmt.Errorf("purge changes: %w", err)
	}
	if sequenced {
		tc += " AND ord > 0"
	}
	order := f.order()
	var bound []struct{ Ord, ID int64 }
	if err := f.ss.db(ctx).Raw("SELECT ord, id FROM "+ct+" WHERE at >= ? AND kind <> ?"+tc+" ORDER BY "+order+" LIMIT 1",
		append([]any{cutoff, changePurged}, targs...)...).Scan(&bound).Error; err != nil {
		return 0, fmt.Errorf("purge changes: %w", dbErr(err))
	}
	// The LIMIT inside a derived table: MariaDB refuses LIMIT in an IN
	// subquery (ERROR 1235) and a subquery reading the table it deletes
	// from (1093), and materialises a derived table first.
	stmt := "DELETE FROM " + ct + " WHERE id IN (SELECT id FROM (SELECT id FROM " + ct + " WHERE at < ? AND kind <> ?" + tc
	args := append([]any{cutoff, changePurged}, targs...)
	if len(bound) > 0 {
		stmt += " AND (ord < ? OR (ord = ? AND id < ?))"
		args = append(args, bound[0].Ord, bound[0].Ord, bound[0].ID)
	}
	stmt += " ORDER BY " + order + " LIMIT " + strconv.Itoa(batch) + ") AS b) RETURNING ord, id, at"
	// The batch's tombstone replaces the scope's previous one. Other
	// scopes' tombstones stay (one per tenant that purged, at most).
	var scope any // NULL: the whole feed
	if f.ss.tenant != nil {
		scope = *f.ss.tenant
	}
	dropTomb := "DELETE FROM " + ct + " WHERE session_id = ? AND kind = ? AND tenant_id IS NULL"
	dropArgs := []any{uuid.Nil, changePurged}
	if scope != nil {
		dropTomb = "DELETE FROM " + ct + " WHERE session_id = ? AND kind = ? AND tenant_id = ?"
		dropArgs = append(dropArgs, scope)
	}
	total := 0
	for {
		if err := ctx.Err(); err != nil {
			return total, fmt.Errorf("purge changes: %w", err)
		}
		var n int
		unlock := f.ss.writeLock(ctx)
		err := f.ss.inTx(ctx, func(tx *gorm.DB) error {
			var gone []struct{ Ord, ID, At int64 }
			if err := tx.Raw(stmt, args...).Scan(&gone).Error; err != nil {
				return err
			}
			n = len(gone)
			if n == 0 {
				return nil
			}
			last := gone[0]
			for _, g := range gone[1:] {
				if g.Ord > last.Ord || (g.Ord == last.Ord && g.ID > last.ID) {
					last = g
				}
			}
			if err := tx.Exec(dropTomb, dropArgs...).Error; err != nil {
				return err
			}
			return tx.Exec("INSERT INTO "+ct+" (id, ord, tenant_id, session_id, kind, at) VALUES (?, ?, ?, ?, ?, ?)",
				last.ID, last.Ord, scope, uuid.Nil, changePurged, last.At).Error
		})
		unlock()
		if err != nil {
			return total, fmt.Errorf("purge changes (%d deleted before the failure): %w", total, dbErr(err))
		}
		total += n
		if n < batch {
			return total, nil
		}
	}
}

// tagChange gives the session.updated change that this transaction's
// write of the session row just recorded (V10's trigger) the kinds of what
// the write changed: the change becomes a change of kinds[0] and one more
// change of each further kind follows it (same ord, version, state and
// time; a later id). With appended (the write also appended messages) the
// session.updated change stays and every kind follows it. The change is
// found as the session's newest session.updated change at its current
// version: the caller holds the session's row lock and advanced its
// version in this transaction, so that change is this transaction's (the
// trigger raises its ord to the session's newest, and its id was taken
// after every earlier change of the session committed). Without the feed's
// trigger (dropped; Verify reports it) there is none and nothing is
// written. The statements name the session, so each runs on its shard on
// a distributed database.
func (ss *sessionStore) tagChange(tx *gorm.DB, sessionID uuid.UUID, appended bool, kinds ...repo.ChangeKind) error {
	if len(kinds) == 0 {
		return nil
	}
	ct := ss.s.quoted(models.TableSessionChanges)
	ours := "SELECT id FROM " + ct + " WHERE session_id = ? AND kind = '" + string(repo.ChangeSessionUpdated) +
		"' AND version = (SELECT version FROM " + ss.s.quoted(models.TableSessions) + " WHERE id = ?) ORDER BY ord DESC, id DESC LIMIT 1"
	extra := kinds[1:]
	if appended {
		extra = kinds
	}
	for _, k := range extra {
		if err := tx.Exec("INSERT INTO "+ct+" (ord, tenant_id, session_id, kind, state, from_seq, to_seq, version, at)"+
			" SELECT ord, tenant_id, session_id, ?, state, to_seq, to_seq, version, at FROM "+ct+
			" WHERE session_id = ? AND id = ("+ours+")", string(k), sessionID, sessionID, sessionID).Error; err != nil {
			return dbErr(err)
		}
	}
	if appended {
		return nil
	}
	return dbErr(tx.Exec("UPDATE "+ct+" SET kind = ? WHERE session_id = ? AND id = ("+ours+")",
		string(kinds[0]), sessionID, sessionID, sessionID).Error)
}
