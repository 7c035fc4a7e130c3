package engine

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

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
// order is (ord, id). On a single-writer dialect ord is 0 and the
// AUTOINCREMENT id is commit order. On PostgreSQL ord is the writing
// transaction's id raised to the session's newest ord, and a read delivers
// only rows below dialect.ChangeFeedVisibility's bound (the snapshot's
// xmin), so a cursor (ord, id) never has a committed row appear behind it.

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
	q := "SELECT " + changeCols + " FROM " + f.ss.s.quoted(models.TableSessionChanges) + " WHERE (ord > ? OR (ord = ? AND id > ?))"
	args := []any{ord, ord, id}
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
	q += " ORDER BY ord, id LIMIT " + strconv.Itoa(limit)
	rows, err := f.ss.db(ctx).Raw(q, args...).Rows()
	if err != nil {
		return repo.ChangesPage{}, fmt.Errorf("read changes: %w", dbErr(err))
	}
	out, err := scanChanges(rows)
	if err = translateVia(f.ss.s.db, err); err != nil {
		return repo.ChangesPage{}, fmt.Errorf("read changes: %w", dbErr(err))
	}
	page := repo.ChangesPage{Changes: out, Next: p.After}
	if len(out) > 0 {
		page.Next = out[len(out)-1].Cursor
	}
	return page, nil
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
// feed's first rows (by the (ord, id) index) older than the cutoff; a
// batch that deletes fewer than batch rows met a younger change (or the
// end) and ends the purge.
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
	cutoff := time.Now().Add(-olderThan).UnixMilli()
	ct := f.ss.s.quoted(models.TableSessionChanges)
	tc, targs := f.ss.tenantCond("tenant_id")
	// The prefix of the feed (in its order) older than the cutoff ends at
	// the first row written at or after it, found once: rows written later
	// are younger still.
	var bound []struct{ Ord, ID int64 }
	if err := f.ss.db(ctx).Raw("SELECT ord, id FROM "+ct+" WHERE at >= ?"+tc+" ORDER BY ord, id LIMIT 1",
		append([]any{cutoff}, targs...)...).Scan(&bound).Error; err != nil {
		return 0, fmt.Errorf("purge changes: %w", dbErr(err))
	}
	stmt := "DELETE FROM " + ct + " WHERE id IN (SELECT id FROM " + ct + " WHERE at < ?" + tc
	args := append([]any{cutoff}, targs...)
	if len(bound) > 0 {
		stmt += " AND (ord < ? OR (ord = ? AND id < ?))"
		args = append(args, bound[0].Ord, bound[0].Ord, bound[0].ID)
	}
	stmt += " ORDER BY ord, id LIMIT " + strconv.Itoa(batch) + ")"
	total := 0
	for {
		if err := ctx.Err(); err != nil {
			return total, fmt.Errorf("purge changes: %w", err)
		}
		unlock := f.ss.writeLock(ctx)
		res := f.ss.db(ctx).Exec(stmt, args...)
		unlock()
		if res.Error != nil {
			return total, fmt.Errorf("purge changes (%d deleted before the failure): %w", total, dbErr(res.Error))
		}
		total += int(res.RowsAffected)
		if res.RowsAffected < int64(batch) {
			return total, nil
		}
	}
}
