package engine

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo"
)

// List implements repo.Sessions.
func (ss *sessionStore) List(ctx context.Context, p repo.ListParams) (repo.ListPage, error) {
	if ss.scopeErr != nil {
		return repo.ListPage{}, ss.scopeErr
	}
	limit, order, err := listLimitOrder(p)
	if err != nil {
		return repo.ListPage{}, err
	}
	q, col, err := ss.listQuery(ctx, p, order)
	if err != nil {
		return repo.ListPage{}, err
	}
	fetch := func(n int) ([]listRow, error) {
		rows, err := q.Order(col + ", id").Limit(n).Rows()
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		out := make([]listRow, 0, n)
		for rows.Next() {
			var r listRaw
			if err := rows.Scan(&r.id, &r.tenant, &r.parent, &r.kind, &r.state, &r.created, &r.updated); err != nil {
				return nil, err
			}
			out = append(out, r.decode(order))
		}
		return out, rows.Err()
	}
	rows, cut, more, err := cutListPage(fetch, limit)
	if err != nil {
		return repo.ListPage{}, fmt.Errorf("list sessions: %w", dbErr(err))
	}
	page := repo.ListPage{Sessions: make([]repo.SessionRef, 0, cut)}
	var bad corruptRows
	for _, r := range rows[:cut] {
		if r.bad != nil {
			bad = append(bad, r.bad)
			continue
		}
		page.Sessions = append(page.Sessions, r.ref)
	}
	if more {
		last := rows[cut-1].ref
		page.Next = &repo.Cursor{UpdatedAt: last.UpdatedAt, CreatedAt: last.CreatedAt, ID: last.ID}
	}
	if len(bad) > 0 {
		page.Corrupt = bad
		return page, fmt.Errorf("list sessions: %w", bad)
	}
	return page, nil
}

// listLimitOrder validates List's page size and order and fills in their
// defaults.
func listLimitOrder(p repo.ListParams) (int, repo.ListOrder, error) {
	limit := p.Limit
	switch {
	case limit < 0 || limit > repo.MaxListLimit:
		return 0, "", invalidf("list sessions: limit %d outside 0..%d", limit, repo.MaxListLimit)
	case limit == 0:
		limit = repo.DefaultListLimit
	}
	order := p.Order
	switch order {
	case "", repo.OrderUpdated:
		order = repo.OrderUpdated
	case repo.OrderCreated:
	default:
		return 0, "", invalidf("list sessions: unknown order %q", clip(string(order)))
	}
	return limit, order, nil
}

// listQuery returns List's query of the sessions p selects (in the view's
// tenant) after p's cursor, and the timestamp column of order (the page
// is ordered by it and id).
func (ss *sessionStore) listQuery(ctx context.Context, p repo.ListParams, order repo.ListOrder) (*gorm.DB, string, error) {
	tenant := p.TenantID
	if ss.tenant != nil {
		tenant = ss.tenant
	}
	if tenant != nil {
		if err := checkText("tenant id", *tenant, repo.MaxIDLen); err != nil {
			return nil, "", fmt.Errorf("list sessions: %w", err)
		}
	}
	q := ss.db(ctx).Model(&models.Session{}).Select("id", "tenant_id", "parent_id", "session_type", "state", "created_at", "updated_at")
	switch {
	case tenant != nil && *tenant == "":
		q = q.Where("tenant_id IS NULL")
	case tenant != nil:
		q = q.Where("tenant_id = ?", *tenant)
	}
	if len(p.States) > 0 {
		states := make([]string, len(p.States))
		for i, st := range p.States {
			v, err := repo.ParseSessionState(string(st))
			if err != nil {
				return nil, "", fmt.Errorf("list sessions: %w", err)
			}
			states[i] = string(v)
		}
		q = q.Where("state IN ?", states)
	}
	if p.Kind != "" {
		k, err := repo.ParseSessionKind(string(p.Kind))
		if err != nil {
			return nil, "", fmt.Errorf("list sessions: %w", err)
		}
		q = q.Where("session_type = ?", string(k))
	}
	if p.ParentID != nil {
		q = q.Where("parent_id = ?", *p.ParentID)
	}
	if p.UpdatedFrom != nil {
		q = q.Where("updated_at >= ?", p.UpdatedFrom.UTC().Truncate(time.Microsecond))
	}
	if p.UpdatedBefore != nil {
		q = q.Where("updated_at < ?", p.UpdatedBefore.UTC().Truncate(time.Microsecond))
	}
	col := "updated_at"
	if order == repo.OrderCreated {
		col = "created_at"
	}
	if p.After != nil {
		at := p.After.UpdatedAt
		if order == repo.OrderCreated {
			at = p.After.CreatedAt
		}
		if at.IsZero() {
			return nil, "", invalidf("list sessions: the cursor has no %s (a cursor of another order?)", col)
		}
		// A row-value comparison: one range of the (col, id) index.
		cond, args := ss.s.keysetAfter(col, "id", at.UTC().Truncate(time.Microsecond), p.After.ID)
		q = q.Where(cond, args...)
		if tenant != nil && col == "updated_at" && p.ParentID == nil {
			// one range of the (tenant_id, updated_at) index, whose
			// entries end with the primary key id (dialect.PlanHinter:
			// MariaDB otherwise filters the tenant's rows before the cursor)
			if h := ss.s.forceIndex("sessions_tenant_updated"); h != "" {
				q = q.Table(ss.s.quoted(models.TableSessions) + h)
			}
		}
	}
	return q.Session(&gorm.Session{}), col, nil // reused by every fetch
}

// cutListPage fetches rows for a page of at most limit rows (sessions and
// corrupt rows together) that ends on a row whose order key reads, so the
// next page can start after it; a run of limit rows or more whose keys do
// not read is returned whole (see repo.Sessions.List). It returns the rows
// fetched, how many of them make the page, and whether a next page may
// follow.
func cutListPage(fetch func(n int) ([]listRow, error), limit int) (rows []listRow, cut int, more bool, err error) {
	n := limit + 1
	for {
		if rows, err = fetch(n); err != nil {
			return nil, 0, false, err
		}
		cut = min(len(rows), limit)
		if len(rows) <= cut {
			break // the last page
		}
		j := cut
		for j > 0 && !rows[j-1].keyOK {
			j--
		}
		if j > 0 {
			cut = j
			break
		}
		k := cut
		for k < len(rows) && !rows[k].keyOK {
			k++
		}
		if k < len(rows) {
			cut = k + 1
			break
		}
		if len(rows) < n {
			cut = len(rows) // the rest of the table: the last page
			break
		}
		n *= 2
	}
	return rows, cut, cut < len(rows) || cut == n, nil
}

// listRaw is one row of List as stored, each column scanned on its own so
// one value that does not decode spoils only its row.
type listRaw struct {
	id, tenant, parent, kind, state sql.NullString
	created, updated                looseTime
}

// looseTime scans a timestamp as stored, whatever the driver hands over
// (a time, or the text SQLite holds): one that does not read is not
// Valid, never a Scan error (so it spoils its row only).
type looseTime struct{ dbTime }

// Scan implements sql.Scanner.
func (l *looseTime) Scan(src any) error {
	if err := l.dbTime.Scan(src); err != nil {
		l.T, l.Valid = time.Time{}, false
	}
	return nil
}

// listRow is a decoded row of List: the session, or the reason it cannot
// be decoded, and whether its order key (timestamp of the order, id) read,
// so that a cursor can follow it.
type listRow struct {
	ref   repo.SessionRef
	bad   *CorruptRowError
	keyOK bool
}

// decode decodes r for List in order.
func (r *listRaw) decode(order repo.ListOrder) listRow {
	var out listRow
	fail := func(column string, err error) {
		if out.bad == nil {
			out.bad = corrupt(models.TableSessions, r.id.String, column, err).(*CorruptRowError)
		}
	}
	id, err := uuid.Parse(r.id.String)
	if err != nil {
		fail("id", fmt.Errorf("id %q is not a UUID", clip(r.id.String)))
	}
	out.ref.ID = id
	at := func(column string, v looseTime) time.Time {
		if !v.Valid || v.T.IsZero() {
			fail(column, errors.New("timestamp cannot be read"))
			return time.Time{}
		}
		return v.T.UTC()
	}
	out.ref.CreatedAt, out.ref.UpdatedAt = at("created_at", r.created), at("updated_at", r.updated)
	key := out.ref.UpdatedAt
	if order == repo.OrderCreated {
		key = out.ref.CreatedAt
	}
	out.keyOK = err == nil && !key.IsZero()
	if kind, err := repo.ParseSessionKind(r.kind.String); err != nil {
		fail("session_type", err)
	} else {
		out.ref.Kind = kind
	}
	if state, err := repo.ParseSessionState(r.state.String); err != nil {
		fail("state", err)
	} else {
		out.ref.State = state
	}
	if r.parent.Valid {
		if p, err := uuid.Parse(r.parent.String); err != nil {
			fail("parent_id", fmt.Errorf("parent id %q is not a UUID", clip(r.parent.String)))
		} else {
			out.ref.ParentID = &p
		}
	}
	out.ref.TenantID = r.tenant.String
	return out
}

// corruptRows is the error of a List page holding undecodable rows: it
// names each and matches ErrCorruptRow (errors.As finds the first
// *CorruptRowError).
type corruptRows []*CorruptRowError

func (e corruptRows) Error() string {
	var b strings.Builder
	if len(e) == 1 {
		b.WriteString("1 row of the page cannot be decoded")
	} else {
		fmt.Fprintf(&b, "%d rows of the page cannot be decoded", len(e))
	}
	b.WriteString(" (listed in ListPage.Corrupt; the page's other rows and its Next cursor are complete): ")
	for i, c := range e {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(c.Error())
	}
	return b.String()
}

func (e corruptRows) Unwrap() []error {
	out := make([]error, len(e))
	for i, c := range e {
		out[i] = c
	}
	return out
}

// ListChildren implements repo.Sessions.
func (ss *sessionStore) ListChildren(ctx context.Context, parentID uuid.UUID) ([]uuid.UUID, error) {
	if ss.scopeErr != nil {
		return nil, ss.scopeErr
	}
	q := ss.db(ctx).Model(&models.Session{}).Where("parent_id = ?", parentID)
	if ss.tenant != nil {
		q = q.Where("tenant_id = ?", *ss.tenant)
	}
	ids := []uuid.UUID{}
	if err := q.Order("created_at, id").Pluck("id", &ids).Error; err != nil {
		return nil, fmt.Errorf("list children of %s: %w", parentID, dbErr(err))
	}
	return ids, nil
}

// childPage runs the keyset query of one page of a child table (or of
// child sessions): rows of q after the cursor c in (created_at, id)
// order, at most limit+1 of them into dest.
func (s *Store) childPage(q *gorm.DB, c *pageCursor, limit int, dest any) error {
	if c != nil {
		id, err := uuid.Parse(c.ID)
		if err != nil || c.T.IsZero() {
			return invalidf("page cursor holds no (created_at, id)")
		}
		// A row-value comparison: one range of the (.., created_at, id) index.
		cond, args := s.keysetAfter("created_at", "id", c.T.UTC(), id)
		q = q.Where(cond, args...)
	}
	return q.Order("created_at, id").Limit(limit + 1).Find(dest).Error
}

// ListChildrenPage implements repo.Sessions.
func (ss *sessionStore) ListChildrenPage(ctx context.Context, parentID uuid.UUID, p repo.PageParams) ([]uuid.UUID, string, error) {
	if ss.scopeErr != nil {
		return nil, "", ss.scopeErr
	}
	limit, err := pageLimit(p)
	if err != nil {
		return nil, "", fmt.Errorf("list children of %s: %w", parentID, err)
	}
	c, err := decodeCursor(p, curChildren)
	if err != nil {
		return nil, "", fmt.Errorf("list children of %s: %w", parentID, err)
	}
	q := ss.db(ctx).Model(&models.Session{}).Select("id", "created_at").Where("parent_id = ?", parentID)
	if ss.tenant != nil {
		q = q.Where("tenant_id = ?", *ss.tenant)
	}
	var rows []models.Session
	if err := ss.s.childPage(q, c, limit, &rows); err != nil {
		return nil, "", fmt.Errorf("list children of %s: %w", parentID, dbErr(err))
	}
	next := ""
	if len(rows) > limit {
		rows = rows[:limit]
		last := rows[limit-1]
		next = encodeCursor(pageCursor{Kind: curChildren, T: last.CreatedAt.UTC(), ID: last.ID.String()})
	}
	ids := make([]uuid.UUID, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
	}
	return ids, next, nil
}
