package engine

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/agentstore/agentstore/internal/dialect"
	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo"
)

// lockSuffix is appended to a SELECT that must lock the row (see
// Store.forUpdate).
func (ss *sessionStore) lockSuffix() string { return ss.s.forUpdate() }

// param returns a placeholder typed as typ (see Store.castParam).
func (ss *sessionStore) param(typ string) string { return ss.s.castParam(typ) }

// sessionHead is the part of the session row appends need.
type sessionHead struct {
	LastSeq       int64
	MessageCount  int64
	Version       int64
	CurrentLeafID sql.NullString
}

// lockHead reads (and on PostgreSQL row-locks) the session row; ErrNotFound
// if it is missing or outside the view's tenant.
func (ss *sessionStore) lockHead(tx *gorm.DB, id uuid.UUID) (sessionHead, error) {
	tc, targs := ss.tenantCond("tenant_id")
	var h sessionHead
	found, err := newDirectTx(tx).queryRow("SELECT last_seq, message_count, version, current_leaf_id FROM "+ss.s.quoted(models.TableSessions)+
		" WHERE id = ?"+tc+ss.lockSuffix(), append([]any{id}, targs...), &h.LastSeq, &h.MessageCount, &h.Version, &h.CurrentLeafID)
	if err != nil {
		return h, err
	}
	if !found {
		return h, ss.notFound("session", id)
	}
	return h, nil
}

// directTx runs the append path's statements on a transaction's
// connection without gorm's per-call statement building (the SQL scan for
// placeholders, a reflected AddVar per argument, a cloned Statement; for
// Raw().Scan also the rendering of every statement with its arguments for
// the row recorder), which cost an append about a fifth of its CPU. The
// statement still goes through the store's connection pool (so SQLite's
// parameter rewrite applies) and is reported to the store's gorm logger
// with its rows affected, as gorm reports it; driver errors are mapped by
// dbErr as before.
type directTx struct {
	tx       *gorm.DB
	numbered bool // placeholders are $1, $2, … (the dialector binds that way)
}

func newDirectTx(tx *gorm.DB) directTx {
	var b strings.Builder
	tx.Dialector.BindVarTo(&b, &gorm.Statement{DB: tx, Vars: []any{nil}}, nil)
	return directTx{tx: tx, numbered: b.String() != "?"}
}

// plainArgs replaces uuid.UUID arguments (and non-nil *uuid.UUID) by their
// text form, in place: the form their Value method gives every driver, so
// the stored value is the same, but pgx encodes a string directly where a
// uuid.UUID first fails its typed encode plans (building an error each
// time) before it falls back to calling Value.
func plainArgs(args []any) {
	for i, a := range args {
		switch v := a.(type) {
		case uuid.UUID:
			args[i] = v.String()
		case *uuid.UUID:
			if v != nil {
				args[i] = v.String()
			}
		}
	}
}

// bind rewrites the ? placeholders of q (none may be inside a literal)
// the way the dialector binds them.
func (d directTx) bind(q string) string {
	if !d.numbered {
		return q
	}
	var b strings.Builder
	b.Grow(len(q) + 16)
	n := 0
	for i := 0; i < len(q); i++ {
		if q[i] == '?' {
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteByte(q[i])
	}
	return b.String()
}

func (d directTx) trace(t0 time.Time, q string, args []any, rows int64, err error) {
	d.tx.Logger.Trace(d.tx.Statement.Context, t0, func() (string, int64) { return d.tx.Dialector.Explain(q, args...), rows }, err)
}

// exec runs a statement and returns its rows affected.
func (d directTx) exec(q string, args ...any) (int64, error) {
	n, err := d.execRaw(q, args...)
	if err != nil {
		return 0, dbErr(err)
	}
	return n, nil
}

// execRaw is exec with the driver's error as it came.
func (d directTx) execRaw(q string, args ...any) (int64, error) {
	q = d.bind(q)
	plainArgs(args)
	t0 := time.Now()
	res, err := d.tx.Statement.ConnPool.ExecContext(d.tx.Statement.Context, q, args...)
	n := int64(-1)
	if err == nil {
		n, err = res.RowsAffected()
	}
	d.trace(t0, q, args, n, err)
	return n, translateVia(d.tx, err)
}

// queryRow runs a query and scans its first row into dest; found reports
// whether there was a row.
func (d directTx) queryRow(q string, args []any, dest ...any) (bool, error) {
	n, err := d.each(q, args, func(rows *sql.Rows, i int64) error {
		if i > 0 {
			return nil
		}
		return rows.Scan(dest...)
	})
	if err != nil {
		return false, dbErr(err)
	}
	return n > 0, nil
}

// each runs a query and hands every row (and its index) to scan; it
// returns the number of rows and the driver's error as it came.
func (d directTx) each(q string, args []any, scan func(rows *sql.Rows, i int64) error) (n int64, err error) {
	q = d.bind(q)
	plainArgs(args)
	t0 := time.Now()
	defer func() { d.trace(t0, q, args, n, err) }()
	rows, err := d.tx.Statement.ConnPool.QueryContext(d.tx.Statement.Context, q, args...)
	if err != nil {
		return 0, translateVia(d.tx, err)
	}
	defer func() {
		if cerr := rows.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	for rows.Next() {
		if err := scan(rows, n); err != nil {
			return n, err
		}
		n++
	}
	return n, translateVia(d.tx, rows.Err())
}

// jsonArg is the statement argument of a JSON column: what j.Value()
// returns (NULL when empty, else the text).
func jsonArg(j models.JSON) any {
	if len(j) == 0 {
		return nil
	}
	return string(j)
}

// appendCols are the message columns an append writes, in appendRows'
// argument order and appendInsertSelect's SELECT list.
const appendCols = `session_id, seq, id, parent_id, role, content, is_sidechain, is_compact_summary, "usage", metadata, model,` +
	` request_id, environment, created_at`

// appendRowsPer is the number of rows per INSERT statement of an append
// (at most 14 parameters a row: 7,000 per statement, within every
// dialect's limit). On the fast path a batch of up to this many messages is
// one statement.
const appendRowsPer = 500

// appendValues returns the WITH item "v(...) AS (VALUES ...)" holding the
// message rows (row i numbered i+1: its seq is the old last_seq plus that
// number) and its arguments. Every parameter is typed (castParam), as
// a VALUES list outside an INSERT gives PostgreSQL no column to infer from.
func (ss *sessionStore) appendValues(rows []models.Message) (string, []any) {
	p := ss.param
	rest := ", " + p("text") + ", " + p("text") + ", " + p("text") + ", " + p("json") + ", " + p("boolean") + ", " +
		p("boolean") + ", " + p("jsonb") + ", " + p("jsonb") + ", " + p("text") + ", " + p("text") + ", " + p("jsonb") + ", " +
		p("timestamptz") + ")"
	var b strings.Builder
	b.Grow(96 + len(rows)*(len(rest)+10))
	b.WriteString("v(n, mid, mparent, mrole, mcontent, msc, mcs, musage, mmeta, mmodel, mreq, menv, mat) AS (VALUES ")
	args := make([]any, 0, len(rows)*12)
	for i := range rows {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteByte('(')
		b.WriteString(strconv.Itoa(i + 1))
		b.WriteString(rest)
		m := &rows[i]
		// JSON columns as the strings (or NULLs) their Value methods
		// return: pgx otherwise plans, and fails, a typed encoding of
		// each Valuer before it falls back to calling Value.
		args = append(args, m.ID, m.ParentID, m.Role, jsonArg(models.JSON(m.Content)), m.IsSidechain, m.IsCompactSummary,
			jsonArg(m.Usage), jsonArg(m.Metadata), m.Model, m.RequestID, jsonArg(m.Environment), m.CreatedAt)
	}
	b.WriteByte(')')
	return b.String(), args
}

// appendInsertSelect returns "INSERT INTO messages (...) SELECT ... FROM ",
// to be followed by the session row's source (alias src: its id, old
// last_seq and old current_leaf_id) and v (appendValues). A message's seq
// is the old last_seq plus its number; the first message of the batch
// without a parent that is not a compact summary hangs under the old leaf
// (appendMessages already set the later ones' parents to the previous message).
func (ss *sessionStore) appendInsertSelect(src string) string {
	return "INSERT INTO " + ss.s.quoted(models.TableMessages) + " (" + appendCols + ") SELECT " + src + ".id, " + src +
		".last_seq + v.n, v.mid, COALESCE(v.mparent, CASE WHEN v.n = 1 AND NOT v.mcs THEN " + src + ".current_leaf_id END)," +
		" v.mrole, v.mcontent, v.msc, v.mcs, v.musage, v.mmeta, v.mmodel, v.mreq, v.menv, v.mat FROM "
}

// AppendMessages implements repo.Sessions.
func (ss *sessionStore) AppendMessages(ctx context.Context, sessionID uuid.UUID, msgs ...repo.Message) ([]repo.Message, error) {
	return ss.appendMessages(ctx, sessionID, repo.AppendOptions{}, msgs, false)
}

// AppendMessagesWith implements repo.Sessions.
func (ss *sessionStore) AppendMessagesWith(ctx context.Context, sessionID uuid.UUID, o repo.AppendOptions, msgs ...repo.Message) ([]repo.Message, error) {
	if o.SiblingOf != "" {
		return ss.appendSibling(ctx, sessionID, o, msgs) // sessions_branches.go
	}
	return ss.appendMessages(ctx, sessionID, o, msgs, false)
}

// errBatchStored is the in-transaction signal that an insert of the batch
// hit a stored message id (the transaction is rolled back; the replay check
// runs in a new one).
var errBatchStored = errors.New("a message id of the batch is stored")

// errAppendAgain: a non-strict append found no session row, but the
// session exists now (created by a concurrent write after the append's
// statement began); the append runs again, up to appendAttempts times.
var errAppendAgain = errors.New("the session was created concurrently: append again")

// appendAttempts bounds the runs of one append that meets errAppendAgain.
const appendAttempts = 3

// appendMessages appends msgs; rootFirst stores a first message without a
// ParentID as a root instead of under the current leaf (an edit of a root,
// see appendSibling).
func (ss *sessionStore) appendMessages(ctx context.Context, sessionID uuid.UUID, o repo.AppendOptions, msgs []repo.Message, rootFirst bool) ([]repo.Message, error) {
	if ss.scopeErr != nil {
		return nil, ss.scopeErr
	}
	if o.ExpectedVersion < 0 {
		return nil, invalidf("append messages to %s: negative expected version", sessionID)
	}
	if len(msgs) == 0 {
		// Nothing to write, but the session must exist (and, strict, be
		// at the expected version).
		var err error
		if o.ExpectedVersion > 0 {
			err = ss.staleOrMissing(ss.db(ctx), sessionID, o.ExpectedVersion)
			var sv *repo.StaleVersionError
			if errors.As(err, &sv) && sv.Stored == o.ExpectedVersion {
				err = nil
			}
		} else if ok, e := ss.sessionExists(ss.db(ctx), sessionID); e != nil || !ok {
			err = ss.missing("session", sessionID, e)
		}
		if err != nil {
			return nil, fmt.Errorf("append messages to %s: %w", sessionID, err)
		}
		return []repo.Message{}, nil
	}
	out := make([]repo.Message, len(msgs))
	copy(out, msgs)
	callerIDs := true
	now := ss.s.now()
	var usage repo.TokenUsage
	for i := range out {
		m := &out[i]
		if err := checkMessage(i, m, ss.s.cfg.maxContent); err != nil {
			return nil, fmt.Errorf("append messages to %s: %w", sessionID, err)
		}
		if m.ID == "" {
			m.ID = uuid.NewString()
			callerIDs = false
		}
		if m.CreatedAt.IsZero() {
			m.CreatedAt = now
		}
		m.CreatedAt = m.CreatedAt.UTC().Truncate(time.Microsecond)
		if m.Usage != nil {
			usage = usage.Add(*m.Usage)
		}
	}
	if err := checkMessageIDs(msgs, nil); err != nil {
		return nil, fmt.Errorf("append messages to %s: %w", sessionID, err)
	}
	// Parents: a message after the first without one (and not a compact
	// summary) hangs under the previous message; the first one's parent,
	// the old leaf, is read by the statement that inserts it.
	inheritFirst := out[0].ParentID == nil && !out[0].IsCompactSummary && !rootFirst
	for i := 1; i < len(out); i++ {
		if m := &out[i]; m.ParentID == nil && !m.IsCompactSummary {
			p := out[i-1].ID
			m.ParentID = &p
		}
	}
	rows := make([]models.Message, len(out))
	for i := range out {
		rows[i] = messageRow(sessionID, 0, &out[i])
	}
	k := int64(len(out))
	unlock := ss.writeLock(ctx)
	defer unlock()
	st := ss.s.quoted(models.TableSessions)
	set := ` message_count = s.message_count + ?, current_leaf_id = ?,
 total_input_tokens = s.total_input_tokens + ?, total_output_tokens = s.total_output_tokens + ?,
 total_cache_read_tokens = s.total_cache_read_tokens + ?, total_cache_creation_tokens = s.total_cache_creation_tokens + ?,
 ` + monotonicUpdatedAt("s.updated_at") + `, version = s.version + 1`
	setArgs := []any{k, out[len(out)-1].ID, usage.InputTokens, usage.OutputTokens, usage.CacheReadInputTokens,
		usage.CacheCreationInputTokens, now, now}
	var (
		h        sessionHead // the old last_seq and current_leaf_id
		replayed []repo.Message
		err      error
	)
	// notAdvanced handles a session that is missing or (strict) at another
	// version: a retry of a batch that landed returns the stored messages.
	notAdvanced := func(tx *gorm.DB) error {
		if callerIDs {
			stored, ok, err := ss.replayBatch(tx, sessionID, msgs, out)
			if err != nil && !errors.Is(err, ErrDuplicate) {
				return err
			}
			if ok {
				replayed = stored
				return nil
			}
		}
		err := ss.staleOrMissing(tx, sessionID, o.ExpectedVersion)
		var sv *repo.StaleVersionError
		if o.ExpectedVersion == 0 && errors.As(err, &sv) {
			// Not strict, and the session exists now: it was created
			// after the statement's snapshot (a concurrent first write).
			return errAppendAgain
		}
		return err
	}
	for attempt := 1; ; attempt++ {
		replayed = nil
		if fp, ok := ss.s.d.(dialect.AppendStatement); ok && ss.s.has(CapFastPaths) && len(rows) <= appendRowsPer && !rootFirst {
			// Fast path, one autocommit statement (one round trip): lock the
			// row, advance it (only at the expected version when strict) and
			// insert the messages after its old head.
			tc, targs := ss.tenantCond("tenant_id")
			if o.ExpectedVersion > 0 {
				tc += " AND version = ?"
				targs = append(targs, o.ExpectedVersion)
			}
			vals, args := ss.appendValues(rows)
			args = append(append(append(append(args, k), setArgs...), sessionID), targs...)
			q := fp.AppendOneSQL(vals, st, set, tc, ss.appendInsertSelect("a"))
			var found bool
			one := func(db *gorm.DB) error {
				var err error
				found, err = newDirectTx(db).queryRow(q, args, &h.LastSeq, &h.CurrentLeafID)
				return err
			}
			if ss.tx != nil {
				// Inside WithSessionLock: in a savepoint, so a failed
				// statement does not abort the caller's transaction.
				err = ss.inTx(ctx, one)
			} else {
				err = one(ss.db(ctx))
			}
			switch {
			case errors.Is(err, ErrDuplicate):
				err = errBatchStored
			case err == nil && !found:
				err = ss.inTx(ctx, notAdvanced)
				if err == nil && replayed == nil {
					// Not reachable: notAdvanced either replays or fails.
					err = fmt.Errorf("session %s was not advanced: %w", sessionID, ErrRetryable)
				}
			}
		} else {
			// General path: lockHead locks the row (FOR UPDATE, or the single
			// writer's write transaction), so reading the head and updating it
			// later cannot interleave. (An INSERT ... SELECT from the session
			// row instead of the read drops a statement, but on SQLite its
			// RETURNING costs more than the read: 180-200 vs 150-170 µs per
			// append in the same loop.)
			var wrote bool // the transaction wrote rows of this append
			apply := func(tx *gorm.DB) error {
				wrote, replayed = false, nil
				var err error
				h, err = ss.lockHead(tx, sessionID)
				switch {
				case errors.Is(err, ErrNotFound):
					return notAdvanced(tx)
				case err != nil:
					return err
				case o.ExpectedVersion > 0 && h.Version != o.ExpectedVersion:
					return notAdvanced(tx)
				}
				wrote = true
				args := append([]any{h.LastSeq + k}, setArgs...)
				if _, err := newDirectTx(tx).exec("UPDATE "+st+" AS s SET last_seq = ?,"+set+" WHERE id = ?", append(args, sessionID)...); err != nil {
					return err
				}
				for i := range rows {
					rows[i].Seq = h.LastSeq + int64(i) + 1
				}
				if inheritFirst {
					rows[0].ParentID = nil
					if h.CurrentLeafID.Valid {
						l := h.CurrentLeafID.String
						rows[0].ParentID = &l
					}
				}
				if err := ss.appendRows(tx, rows); err != nil {
					if errors.Is(err, ErrDuplicate) {
						return errBatchStored
					}
					return err
				}
				return nil
			}
			if ss.s.groupCommit() && ss.tx == nil {
				// Concurrent appends of the Store share write transactions
				// (see appendBatch).
				err = ss.s.gc.appends.do(ctx, ss.s.gcFlushes(), ss.s.gc.appendSeq.Add(1), appendReq{ss: ss, apply: apply, wrote: &wrote},
					func(ctx context.Context, r appendReq) error { return r.ss.inTx(ctx, r.apply) },
					ss.s.appendBatch)
			} else {
				err = ss.inTx(ctx, apply)
			}
		}
		if !errors.Is(err, errAppendAgain) || attempt == appendAttempts {
			break
		}
	}
	if errors.Is(err, errAppendAgain) {
		err = fmt.Errorf("session %s was created by a concurrent write %d times in a row; nothing was written: %w", sessionID, appendAttempts, ErrRetryable)
	}
	if errors.Is(err, errBatchStored) {
		// The batch (or part of it) is stored: a retry returns it, any
		// other overlap is a conflict naming the id.
		err = ss.inTx(ctx, func(tx *gorm.DB) error {
			stored, ok, err := ss.replayBatch(tx, sessionID, msgs, out)
			if ok {
				replayed = stored
			} else if err == nil {
				// The colliding row is gone again (deleted meanwhile).
				err = fmt.Errorf("a message id of the batch collided with a row that is gone now; nothing was written: %w", ErrRetryable)
			}
			return err
		})
	}
	if err != nil {
		return nil, fmt.Errorf("append messages to %s: %w", sessionID, dbErr(err))
	}
	if replayed != nil {
		return replayed, nil
	}
	if inheritFirst && h.CurrentLeafID.Valid {
		l := h.CurrentLeafID.String
		out[0].ParentID = &l
	}
	for i := range out {
		out[i].Seq = h.LastSeq + int64(i) + 1
	}
	return out, nil
}

// appendRows inserts the message rows of an append with multi-row INSERTs
// of every column (as gorm's CreateInBatches of the same models would,
// without its per-call reflection and statement building; see directTx).
func (ss *sessionStore) appendRows(tx *gorm.DB, rows []models.Message) error {
	d := newDirectTx(tx)
	head := "INSERT INTO " + ss.s.quoted(models.TableMessages) + " (" + appendCols + ") VALUES "
	const tuple = "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
	for start := 0; start < len(rows); start += appendRowsPer {
		chunk := rows[start:min(len(rows), start+appendRowsPer)]
		var b strings.Builder
		b.Grow(len(head) + len(chunk)*(len(tuple)+2))
		b.WriteString(head)
		args := make([]any, 0, len(chunk)*14)
		for i := range chunk {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(tuple)
			m := &chunk[i]
			// JSON columns as the strings (or NULLs) their Value methods
			// return: pgx otherwise plans, and fails, a typed encoding of
			// each Valuer before it falls back to calling Value.
			args = append(args, m.SessionID, m.Seq, m.ID, m.ParentID, m.Role, jsonArg(models.JSON(m.Content)), m.IsSidechain,
				m.IsCompactSummary, jsonArg(m.Usage), jsonArg(m.Metadata), m.Model, m.RequestID, jsonArg(m.Environment), m.CreatedAt)
		}
		if _, err := d.exec(b.String(), args...); err != nil {
			return err
		}
	}
	return nil
}

// replayBatch checks whether the batch (as the caller passed it: msgs; as
// prepared: out) is already stored in the session: ok and the stored
// messages, in batch order, when every message is stored under its id with
// the same role, content, flags and (when the caller set one) parent id;
// otherwise an ErrDuplicate naming the first stored id that differs, or the
// one stored while others are not; nil error and !ok when none is stored.
func (ss *sessionStore) replayBatch(tx *gorm.DB, sessionID uuid.UUID, msgs, out []repo.Message) ([]repo.Message, bool, error) {
	ids := make([]string, len(out))
	for i := range out {
		ids[i] = out[i].ID
	}
	tc, targs := ss.inTenantCond()
	rows, err := tx.Raw("SELECT "+messageCols+" FROM "+ss.s.quoted(models.TableMessages)+" WHERE session_id = ? AND id IN ?"+tc,
		append([]any{sessionID, ids}, targs...)...).Rows()
	if err != nil {
		return nil, false, dbErr(err)
	}
	defer rows.Close()
	stored, err := scanMessages(rows, sessionID, int64(len(ids)), ss.s.has(CapValidatedJSON))
	err = translateVia(ss.s.db, err)
	if err != nil {
		return nil, false, err
	}
	if len(stored) == 0 {
		return nil, false, nil
	}
	byID := make(map[string]repo.Message, len(stored))
	for _, m := range stored {
		byID[m.ID] = m
	}
	res := make([]repo.Message, len(out))
	var missing string
	for i := range out {
		m, found := byID[out[i].ID]
		if !found {
			if missing == "" {
				missing = out[i].ID
			}
			continue
		}
		want := &msgs[i]
		role, _ := repo.ParseRole(string(want.Role))
		if m.Role != role || string(m.Content) != string(want.Content) || m.IsCompactSummary != want.IsCompactSummary ||
			m.IsSidechain != want.IsSidechain || (want.ParentID != nil && (m.ParentID == nil || *m.ParentID != *want.ParentID)) {
			return nil, false, fmt.Errorf("message %q is stored in session %s (seq %d) with other content: %w",
				clip(m.ID), sessionID, m.Seq, ErrDuplicate)
		}
		res[i] = m
	}
	if missing != "" {
		for i := range res {
			if res[i].Seq != 0 {
				return nil, false, fmt.Errorf("message %q is stored in session %s (seq %d) but message %q of the batch is not: "+
					"the batch differs from the stored one: %w", clip(res[i].ID), sessionID, res[i].Seq, clip(missing), ErrDuplicate)
			}
		}
	}
	return res, true, nil
}

// Fork implements repo.Sessions.
func (ss *sessionStore) Fork(ctx context.Context, sessionID uuid.UUID, atMessageID string) (*repo.Session, error) {
	if ss.scopeErr != nil {
		return nil, ss.scopeErr
	}
	if atMessageID != "" {
		if err := checkID("fork message id", atMessageID); err != nil {
			return nil, fmt.Errorf("fork session %s: %w", sessionID, err)
		}
	}
	newID, err := uuid.NewV7()
	if err != nil {
		return nil, fmt.Errorf("fork session %s: new id: %w", sessionID, err)
	}
	now := ss.s.now()
	mt := ss.s.quoted(models.TableMessages)
	var out *repo.Session
	unlock := ss.writeLock(ctx)
	err = ss.inTx(ctx, func(tx *gorm.DB) error {
		// Lock the origin: a concurrent Delete of it waits for the fork
		// or makes it ErrNotFound, never a foreign-key error.
		if _, err := ss.lockHead(tx, sessionID); err != nil {
			return err
		}
		var src models.Session
		q := tx.Where("id = ?", sessionID)
		if ss.tenant != nil {
			q = q.Where("tenant_id = ?", *ss.tenant)
		}
		if err := q.Take(&src).Error; err != nil {
			return dbErr(err)
		}
		at := atMessageID
		if at == "" && src.CurrentLeafID != nil {
			at = *src.CurrentLeafID
		}
		var atSeq *int64
		if at != "" {
			var seqs []int64
			if err := tx.Model(&models.Message{}).Where("session_id = ? AND id = ?", sessionID, at).Pluck("seq", &seqs).Error; err != nil {
				return dbErr(err)
			}
			if len(seqs) == 0 {
				return fmt.Errorf("message %q: %w", clip(at), ErrNotFound)
			}
			atSeq = &seqs[0]
		}
		child := models.Session{
			ID: newID, ParentID: &src.ID, SessionType: string(repo.KindMain), TenantID: src.TenantID,
			State: string(repo.StateCreated), Config: src.Config, Permissions: src.Permissions, Summary: src.Summary,
			StaticContextHash: src.StaticContextHash, ForkedFromSessionID: &src.ID, ForkedFromSeq: atSeq,
			TotalCostUSD: models.Decimal{}, CreatedAt: now, UpdatedAt: now, ExpiresAt: src.ExpiresAt, Version: 1,
		}
		if at != "" {
			child.CurrentLeafID = &at
		}
		if err := tx.Omit(clause.Associations).Create(&child).Error; err != nil {
			return dbErr(err)
		}
		if at != "" {
			res := tx.Exec(`WITH RECURSIVE branch(seq, parent_id, depth) AS (
 SELECT seq, parent_id, 0 FROM `+mt+` WHERE session_id = ? AND id = ?
 UNION ALL
 SELECT m.seq, m.parent_id, b.depth + 1 FROM `+mt+` m JOIN branch b ON m.session_id = ? AND m.id = b.parent_id
 WHERE b.depth < ?)
INSERT INTO `+mt+` (`+messageCols+`, session_id)
SELECT ROW_NUMBER() OVER (ORDER BY seq), id, parent_id, role, content, TRUE, is_compact_summary, usage, metadata,
 model, request_id, environment, created_at, `+ss.param("uuid")+`
FROM `+mt+` WHERE session_id = ? AND seq IN (SELECT seq FROM branch)`,
				sessionID, at, sessionID, src.MessageCount+1, newID, sessionID)
			if res.Error != nil {
				return dbErr(res.Error)
			}
			n := res.RowsAffected
			if err := tx.Exec("UPDATE "+ss.s.quoted(models.TableSessions)+" SET last_seq = ?, message_count = ? WHERE id = ?",
				n, n, newID).Error; err != nil {
				return dbErr(err)
			}
		}
		// Read the fork back in the same transaction: if it cannot be
		// read (a corrupt row on the branch), no fork is left behind.
		var err error
		out, err = ss.loadTx(tx, newID, repo.LoadOptions{})
		return err
	})
	unlock()
	if err != nil {
		return nil, fmt.Errorf("fork session %s: %w", sessionID, dbErr(err))
	}
	out.MarkClean()
	return out, nil
}

// WithSessionLock implements repo.Sessions.
func (ss *sessionStore) WithSessionLock(ctx context.Context, id uuid.UUID, fn func(ctx context.Context, tx repo.Sessions) error) error {
	if ss.scopeErr != nil {
		return ss.scopeErr
	}
	if fn == nil {
		return invalidf("lock session %s: nil function", id)
	}
	defer ss.writeLock(ctx)()
	err := ss.inTx(ctx, func(tx *gorm.DB) error {
		if _, err := ss.lockHead(tx, id); err != nil {
			return err
		}
		inner := &sessionStore{s: ss.s, tenant: ss.tenant, tx: tx}
		if err := fn(ctx, sessionsAPI{inner}); err != nil {
			return &fnError{err}
		}
		return nil
	})
	var fe *fnError
	if err != nil && !errors.As(err, &fe) {
		return fmt.Errorf("lock session %s: %w", id, dbErr(err))
	}
	return err
}

// AddSummary implements repo.Sessions.
func (ss *sessionStore) AddSummary(ctx context.Context, snap repo.SummarySnapshot) (repo.SummarySnapshot, error) {
	if ss.scopeErr != nil {
		return snap, ss.scopeErr
	}
	if err := checkText("summary", snap.Summary, 0); err != nil {
		return snap, fmt.Errorf("add summary to %s: %w", snap.SessionID, err)
	}
	if snap.LeafMessageID != nil {
		if err := checkID("leaf message id", *snap.LeafMessageID); err != nil {
			return snap, fmt.Errorf("add summary to %s: %w", snap.SessionID, err)
		}
	}
	now := ss.s.now()
	if snap.ID == uuid.Nil {
		id, err := uuid.NewV7()
		if err != nil {
			return snap, err
		}
		snap.ID = id
	}
	if snap.CreatedAt.IsZero() {
		snap.CreatedAt = now
	}
	snap.CreatedAt = snap.CreatedAt.UTC().Truncate(time.Microsecond)
	defer ss.writeLock(ctx)()
	err := ss.inTx(ctx, func(tx *gorm.DB) error {
		tc, targs := ss.tenantCond("tenant_id")
		res := tx.Exec("UPDATE "+ss.s.quoted(models.TableSessions)+
			" SET summary = ?, "+monotonicUpdatedAt("updated_at")+", version = version + 1 WHERE id = ?"+tc,
			append([]any{snap.Summary, now, now, snap.SessionID}, targs...)...)
		if res.Error != nil {
			return dbErr(res.Error)
		}
		if res.RowsAffected == 0 {
			return ss.notFound("session", snap.SessionID)
		}
		return dbErr(tx.Omit(clause.Associations).Create(&models.Summary{ID: snap.ID, SessionID: snap.SessionID,
			Summary: snap.Summary, LeafMessageID: snap.LeafMessageID, CreatedAt: snap.CreatedAt}).Error)
	})
	if err != nil {
		return snap, fmt.Errorf("add summary to %s: %w", snap.SessionID, dbErr(err))
	}
	return snap, nil
}

// GetSummaries implements repo.Sessions.
func (ss *sessionStore) GetSummaries(ctx context.Context, sessionID uuid.UUID) ([]repo.SummarySnapshot, error) {
	if ss.scopeErr != nil {
		return nil, ss.scopeErr
	}
	tc, targs := ss.inTenantCond()
	var rows []models.Summary
	db := ss.db(ctx)
	if err := db.Where("session_id = ?"+tc, append([]any{sessionID}, targs...)...).
		Order("created_at, id").Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("get summaries of %s: %w", sessionID, dbErr(err))
	}
	if len(rows) == 0 {
		if ok, err := ss.sessionExists(db, sessionID); err != nil || !ok {
			return nil, ss.missing("get summaries of", sessionID, err)
		}
	}
	out := make([]repo.SummarySnapshot, 0, len(rows))
	for _, r := range rows {
		out = append(out, repo.SummarySnapshot{ID: r.ID, SessionID: r.SessionID, Summary: r.Summary,
			LeafMessageID: r.LeafMessageID, CreatedAt: r.CreatedAt.UTC()})
	}
	return out, nil
}

// missing turns a failed existence check into the operation's error.
func (ss *sessionStore) missing(op string, id uuid.UUID, err error) error {
	if err != nil {
		return fmt.Errorf("%s %s: %w", op, id, dbErr(err))
	}
	return ss.notFound(op, id)
}

// SetTodos implements repo.Sessions.
func (ss *sessionStore) SetTodos(ctx context.Context, sessionID uuid.UUID, todos []repo.TodoItem) ([]repo.TodoItem, error) {
	if ss.scopeErr != nil {
		return nil, ss.scopeErr
	}
	if err := checkTodos(todos); err != nil {
		return nil, fmt.Errorf("set todos of %s: %w", sessionID, err)
	}
	now := ss.s.now()
	var out []repo.TodoItem
	defer ss.writeLock(ctx)()
	err := ss.inTx(ctx, func(tx *gorm.DB) error {
		tc, targs := ss.tenantCond("tenant_id")
		res := tx.Exec("UPDATE "+ss.s.quoted(models.TableSessions)+" SET "+monotonicUpdatedAt("updated_at")+", version = version + 1 WHERE id = ?"+tc,
			append([]any{now, now, sessionID}, targs...)...)
		if res.Error != nil {
			return dbErr(res.Error)
		}
		if res.RowsAffected == 0 {
			return ss.notFound("session", sessionID)
		}
		var err error
		out, err = ss.replaceTodos(tx, sessionID, todos, now)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("set todos of %s: %w", sessionID, dbErr(err))
	}
	return out, nil
}

// replaceTodos makes the session's todos equal to todos, by id: stored
// items are updated, new ones inserted, the others removed — except rows
// whose status this version cannot decode, which are kept. It fills in ids,
// defaults and positions of todos in place and returns a copy.
func (ss *sessionStore) replaceTodos(tx *gorm.DB, sessionID uuid.UUID, todos []repo.TodoItem, now time.Time) ([]repo.TodoItem, error) {
	rows := make([]models.Todo, len(todos))
	ids := make([]uuid.UUID, len(todos))
	for i := range todos {
		t := &todos[i]
		if t.ID == uuid.Nil {
			t.ID = uuid.New()
		}
		if t.Status == "" {
			t.Status = repo.TodoPending
		} else {
			t.Status, _ = repo.ParseTodoStatus(string(t.Status))
		}
		if t.CreatedAt.IsZero() {
			t.CreatedAt = now
		}
		t.SessionID = sessionID
		ids[i] = t.ID
		rows[i] = models.Todo{ID: t.ID, SessionID: sessionID, Position: int64(i), Content: t.Content, ActiveForm: t.ActiveForm,
			Status: string(t.Status), PlanID: t.PlanID, CreatedAt: t.CreatedAt.UTC().Truncate(time.Microsecond),
			StartedAt: utcPtr(t.StartedAt), CompletedAt: utcPtr(t.CompletedAt)}
	}
	tt := ss.s.quoted(models.TableTodos)
	del := "DELETE FROM " + tt + " WHERE session_id = ? AND status IN ?"
	args := []any{sessionID, knownTodoStatuses()}
	if len(ids) > 0 {
		del += " AND id NOT IN ?"
		args = append(args, ids)
	}
	if err := tx.Exec(del, args...).Error; err != nil {
		return nil, dbErr(err)
	}
	if len(rows) > 0 {
		res := tx.Omit(clause.Associations).Clauses(clause.OnConflict{
			Columns: []clause.Column{{Name: "id"}},
			Where: clause.Where{Exprs: []clause.Expression{clause.Expr{
				SQL: tt + ".session_id = excluded.session_id"}}},
			DoUpdates: clause.AssignmentColumns([]string{"position", "content", "active_form", "status", "plan_id",
				"created_at", "started_at", "completed_at"}),
		}).Create(&rows)
		if res.Error != nil {
			return nil, dbErr(res.Error)
		}
		if res.RowsAffected < int64(len(rows)) {
			return nil, fmt.Errorf("a todo id of the list is stored under another session: %w", ErrDuplicate)
		}
	}
	return append([]repo.TodoItem(nil), todos...), nil
}

// writePlan makes plan the session's only active plan: any other active
// plan is recorded as cancelled, then plan is inserted or updated by id.
func (ss *sessionStore) writePlan(tx *gorm.DB, sessionID uuid.UUID, plan *repo.Plan, now time.Time) error {
	pt := ss.s.quoted(models.TablePlans)
	q := "UPDATE " + pt + " SET status = ?, completed_at = ? WHERE session_id = ? AND status IN ?"
	args := []any{string(repo.PlanCancelled), now, sessionID, activePlanStatuses()}
	if plan != nil {
		if plan.ID == uuid.Nil {
			plan.ID = uuid.New()
		}
		q += " AND id <> ?"
		args = append(args, plan.ID)
	}
	if err := tx.Exec(q, args...).Error; err != nil {
		return dbErr(err)
	}
	if plan == nil {
		return nil
	}
	if plan.Status == "" {
		plan.Status = repo.PlanDraft
	} else {
		plan.Status, _ = repo.ParsePlanStatus(string(plan.Status))
	}
	if plan.CreatedAt.IsZero() {
		plan.CreatedAt = now
	}
	plan.SessionID = sessionID
	row := models.Plan{ID: plan.ID, SessionID: sessionID, Name: plan.Name, Content: plan.Content, Status: string(plan.Status),
		Error: plan.Error, CreatedAt: plan.CreatedAt.UTC().Truncate(time.Microsecond), ApprovedAt: utcPtr(plan.ApprovedAt),
		StartedAt: utcPtr(plan.StartedAt), CompletedAt: utcPtr(plan.CompletedAt)}
	res := tx.Omit(clause.Associations).Clauses(clause.OnConflict{
		Columns: []clause.Column{{Name: "id"}},
		Where: clause.Where{Exprs: []clause.Expression{clause.Expr{
			SQL: pt + ".session_id = excluded.session_id"}}},
		DoUpdates: clause.AssignmentColumns([]string{"name", "content", "status", "error", "approved_at", "started_at", "completed_at"}),
	}).Create(&row)
	if res.Error != nil {
		return dbErr(res.Error)
	}
	if res.RowsAffected == 0 {
		return fmt.Errorf("plan %s is stored under another session: %w", plan.ID, ErrDuplicate)
	}
	return nil
}

// Plans implements repo.Sessions.
func (ss *sessionStore) Plans(ctx context.Context, sessionID uuid.UUID) ([]repo.Plan, error) {
	if ss.scopeErr != nil {
		return nil, ss.scopeErr
	}
	tc, targs := ss.inTenantCond()
	db := ss.db(ctx)
	var rows []models.Plan
	if err := db.Where("session_id = ?"+tc, append([]any{sessionID}, targs...)...).
		Order("created_at, id").Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("plans of %s: %w", sessionID, dbErr(err))
	}
	if len(rows) == 0 {
		if ok, err := ss.sessionExists(db, sessionID); err != nil || !ok {
			return nil, ss.missing("plans of", sessionID, err)
		}
	}
	out := make([]repo.Plan, 0, len(rows))
	for i := range rows {
		p, err := planFromRow(&rows[i])
		if err != nil {
			return nil, fmt.Errorf("plans of %s: %w", sessionID, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// CleanupExpired implements repo.Sessions.
func (ss *sessionStore) CleanupExpired(ctx context.Context, batchSize int) (int, error) {
	if ss.scopeErr != nil {
		return 0, ss.scopeErr
	}
	if batchSize < 0 {
		return 0, invalidf("cleanup expired: negative batch size")
	}
	if batchSize == 0 {
		batchSize = defaultCleanupBatch
	}
	st := ss.s.quoted(models.TableSessions)
	tc, targs := ss.tenantCond("tenant_id")
	lock := ss.s.forUpdateSkip("")
	now := ss.s.now()
	total := 0
	for {
		// One transaction per batch: pick (and on PostgreSQL lock, skipping
		// rows another sweeper holds) up to batchSize expired ids, then
		// delete them. The count is the ids picked, so a child that is
		// expired itself counts once on every dialect, whether the FK
		// cascade or the DELETE reached it first.
		args := append([]any{now}, targs...)
		args = append(args, batchSize)
		var ids, expired []uuid.UUID
		unlock := ss.writeLock(ctx)
		err := ss.inTx(ctx, func(tx *gorm.DB) error {
			if err := tx.Raw("SELECT id FROM "+st+" WHERE expires_at IS NOT NULL AND expires_at < ?"+tc+
				" ORDER BY expires_at, id LIMIT ?"+lock, args...).Scan(&ids).Error; err != nil {
				return err
			}
			if len(ids) == 0 {
				return nil
			}
			// The expired sessions this batch deletes: the picked ones and
			// their expired descendants (the cascade reaches them), locked
			// so that a concurrent sweeper that deleted one of them first
			// makes it drop out here instead of being counted twice.
			if err := tx.Raw(`WITH RECURSIVE d(id) AS (SELECT id FROM `+st+` WHERE id IN ?
 UNION SELECT c.id FROM `+st+` c JOIN d ON c.parent_id = d.id)
SELECT id FROM `+st+` WHERE id IN (SELECT id FROM d) AND expires_at IS NOT NULL AND expires_at < ?`+ss.lockSuffix(),
				ids, now).Scan(&expired).Error; err != nil {
				return err
			}
			return tx.Exec("DELETE FROM "+st+" WHERE id IN ?", ids).Error
		})
		unlock()
		if err != nil {
			return total, fmt.Errorf("cleanup expired sessions: %w", dbErr(err))
		}
		total += len(expired)
		if len(ids) < batchSize {
			return total, nil
		}
	}
}
