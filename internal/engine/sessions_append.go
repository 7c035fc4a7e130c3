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

	"github.com/agentstore/agentstore/internal/dialect"
	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo"
)

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
		if err := ss.checkAppendTarget(ctx, sessionID, o.ExpectedVersion); err != nil {
			return nil, fmt.Errorf("append messages to %s: %w", sessionID, err)
		}
		return []repo.Message{}, nil
	}
	a, err := ss.prepareAppend(sessionID, o, msgs, rootFirst)
	if err != nil {
		return nil, fmt.Errorf("append messages to %s: %w", sessionID, err)
	}
	unlock := ss.writeLock(ctx)
	defer unlock()
	err = a.run(ctx)
	if errors.Is(err, errBatchStored) {
		err = a.replayStored(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("append messages to %s: %w", sessionID, dbErr(err))
	}
	return a.result(), nil
}

// checkAppendTarget is the check of an append of no messages: nothing to
// write, but the session must exist (and, strict, be at the expected
// version).
func (ss *sessionStore) checkAppendTarget(ctx context.Context, sessionID uuid.UUID, expected int64) error {
	if expected > 0 {
		err := ss.staleOrMissing(ss.db(ctx), sessionID, expected)
		var sv *repo.StaleVersionError
		if errors.As(err, &sv) && sv.Stored == expected {
			return nil
		}
		return err
	}
	if ok, err := ss.sessionExists(ss.db(ctx), sessionID); err != nil || !ok {
		return ss.missing("session", sessionID, err)
	}
	return nil
}

// appendJob is one append on its way: the batch as the caller passed it
// and as prepared, its message rows, the session row's SET list, and the
// outcome (the old head, or the stored batch of a replayed retry).
type appendJob struct {
	ss        *sessionStore
	sessionID uuid.UUID
	o         repo.AppendOptions
	msgs      []repo.Message // as the caller passed them
	out       []repo.Message // prepared: ids, times, parents after the first
	rows      []models.Message
	// callerIDs: the caller named every message (so a retry can be
	// recognised); inheritFirst: the first message hangs under the old leaf
	callerIDs, inheritFirst bool
	// fast is the dialect's one-statement append when this append can use
	// it (CapFastPaths, a batch of at most appendRowsPer, not rootFirst)
	fast dialect.AppendStatement
	// the session row's advance: " message_count = ..., version = ..." and
	// its arguments (k, the new leaf, the usage sums, the clock twice)
	set     string
	setArgs []any

	h        sessionHead    // the old last_seq and current_leaf_id
	replayed []repo.Message // the stored batch, when this is a retry of one
	wrote    bool           // the transaction path wrote rows of this append
}

// prepareAppend validates msgs and prepares the append: ids and creation
// times filled in, the parents of the messages after the first (a message
// without one that is not a compact summary hangs under the previous
// message; the first one's parent, the old leaf, is read by the statement
// that inserts it), the message rows and the session row's SET list.
func (ss *sessionStore) prepareAppend(sessionID uuid.UUID, o repo.AppendOptions, msgs []repo.Message, rootFirst bool) (*appendJob, error) {
	a := &appendJob{ss: ss, sessionID: sessionID, o: o, msgs: msgs, out: make([]repo.Message, len(msgs)), callerIDs: true}
	copy(a.out, msgs)
	now := ss.s.now()
	var usage repo.TokenUsage
	for i := range a.out {
		m := &a.out[i]
		if err := checkMessage(i, m, ss.s.cfg.maxContent); err != nil {
			return nil, err
		}
		if m.ID == "" {
			m.ID = uuid.NewString()
			a.callerIDs = false
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
		return nil, err
	}
	a.inheritFirst = a.out[0].ParentID == nil && !a.out[0].IsCompactSummary && !rootFirst
	for i := 1; i < len(a.out); i++ {
		if m := &a.out[i]; m.ParentID == nil && !m.IsCompactSummary {
			p := a.out[i-1].ID
			m.ParentID = &p
		}
	}
	a.rows = make([]models.Message, len(a.out))
	for i := range a.out {
		a.rows[i] = messageRow(sessionID, 0, &a.out[i])
		if err := ss.s.sealMessageRow(&a.rows[i]); err != nil {
			return nil, err
		}
	}
	if fp, ok := ss.s.d.(dialect.AppendStatement); ok && ss.s.has(CapFastPaths) && len(a.rows) <= appendRowsPer && !rootFirst {
		a.fast = fp
	}
	a.set = ` message_count = s.message_count + ?, current_leaf_id = ?,
 total_input_tokens = s.total_input_tokens + ?, total_output_tokens = s.total_output_tokens + ?,
 total_cache_read_tokens = s.total_cache_read_tokens + ?, total_cache_creation_tokens = s.total_cache_creation_tokens + ?,
 ` + monotonicUpdatedAt("s.updated_at") + `, version = s.version + 1`
	a.setArgs = []any{int64(len(a.out)), a.out[len(a.out)-1].ID, usage.InputTokens, usage.OutputTokens, usage.CacheReadInputTokens,
		usage.CacheCreationInputTokens, now, now}
	return a, nil
}

// run writes the append: the one-statement fast path or the transaction
// path, again (up to appendAttempts runs) while the session turns out to
// have been created concurrently.
func (a *appendJob) run(ctx context.Context) error {
	for attempt := 1; ; attempt++ {
		a.replayed = nil
		var err error
		if a.fast != nil {
			err = a.runStatement(ctx)
		} else {
			err = a.runTx(ctx)
		}
		if !errors.Is(err, errAppendAgain) {
			return err
		}
		if attempt == appendAttempts {
			return fmt.Errorf("session %s was created by a concurrent write %d times in a row; nothing was written: %w",
				a.sessionID, appendAttempts, ErrRetryable)
		}
	}
}

// runStatement is the fast path, one autocommit statement (one round
// trip): lock the row, advance it (only at the expected version when
// strict) and insert the messages after its old head.
func (a *appendJob) runStatement(ctx context.Context) error {
	ss := a.ss
	tc, targs := ss.tenantCond("tenant_id")
	if a.o.ExpectedVersion > 0 {
		tc += " AND version = ?"
		targs = append(targs, a.o.ExpectedVersion)
	}
	vals, args := ss.appendValues(a.rows)
	args = append(append(append(append(args, int64(len(a.rows))), a.setArgs...), a.sessionID), targs...)
	q := a.fast.AppendOneSQL(vals, ss.s.quoted(models.TableSessions), a.set, tc, ss.appendInsertSelect("a"))
	var found bool
	one := func(db *gorm.DB) error {
		var err error
		found, err = newDirectTx(db).queryRow(q, args, &a.h.LastSeq, &a.h.CurrentLeafID)
		return err
	}
	var err error
	if ss.tx != nil {
		// Inside WithSessionLock: in a savepoint, so a failed
		// statement does not abort the caller's transaction.
		err = ss.inTx(ctx, one)
	} else {
		err = one(ss.db(ctx))
	}
	switch {
	case errors.Is(err, ErrDuplicate):
		return errBatchStored
	case err == nil && !found:
		err = ss.inTx(ctx, a.notAdvanced)
		if err == nil && a.replayed == nil {
			// Not reachable: notAdvanced either replays or fails.
			err = fmt.Errorf("session %s was not advanced: %w", a.sessionID, ErrRetryable)
		}
	}
	return err
}

// runTx is the general path: apply in a transaction of its own, or, with
// CapGroupCommit, in one shared with the Store's concurrent appends (see
// appendBatch).
func (a *appendJob) runTx(ctx context.Context) error {
	ss := a.ss
	if ss.s.groupCommit() && ss.tx == nil {
		return ss.s.gc.appends.do(ctx, ss.s.gcFlushes(), ss.s.gc.appendSeq.Add(1), appendReq{ss: ss, apply: a.apply, wrote: &a.wrote, job: a},
			func(ctx context.Context, r appendReq) error { return r.ss.inTx(ctx, r.apply) },
			ss.s.appendBatch)
	}
	return ss.inTx(ctx, a.apply)
}

// apply is the transaction path's append in tx: lockHead locks the row
// (FOR UPDATE, or the single writer's write transaction), so reading the
// head and updating it later cannot interleave. (An INSERT ... SELECT from
// the session row instead of the read drops a statement, but on SQLite
// its RETURNING costs more than the read: 180-200 vs 150-170 µs per append
// in the same loop.)
func (a *appendJob) apply(tx *gorm.DB) error { return a.applyIn(tx, nil) }

// applyIn is apply, in a flush of several appends when f is not nil: the
// head of a session that an earlier append of the flush advanced (in the
// same view) is f's, not read again (this transaction holds the row's lock
// since that read, so the row is as the flush left it), and the message
// rows wait in f to be inserted with the other rows of their session at
// the flush's end (appendFlush.insert). Before a read that must see the
// flush's earlier rows (notAdvanced's replay check) those are inserted.
func (a *appendJob) applyIn(tx *gorm.DB, f *appendFlush) error {
	a.wrote, a.replayed = false, nil
	var err error
	key := appendKey{session: a.sessionID}
	if t := a.ss.tenant; t != nil {
		key.tenant, key.scoped = *t, true
	}
	h, known := f.head(key)
	if known {
		a.h = h
	} else {
		a.h, err = a.ss.lockHead(tx, a.sessionID)
	}
	switch {
	case errors.Is(err, ErrNotFound):
		if err := f.insert(tx); err != nil {
			return err
		}
		return a.notAdvanced(tx)
	case err != nil:
		return err
	case a.o.ExpectedVersion > 0 && a.h.Version != a.o.ExpectedVersion:
		if err := f.insert(tx); err != nil {
			return err
		}
		return a.notAdvanced(tx)
	}
	a.wrote = true
	args := append([]any{a.h.LastSeq + int64(len(a.rows))}, a.setArgs...)
	if _, err := newDirectTx(tx).exec("UPDATE "+a.ss.s.quoted(models.TableSessions)+" AS s SET last_seq = ?,"+a.set+" WHERE id = ?",
		append(args, a.sessionID)...); err != nil {
		return err
	}
	for i := range a.rows {
		a.rows[i].Seq = a.h.LastSeq + int64(i) + 1
	}
	if a.inheritFirst {
		a.rows[0].ParentID = nil
		if a.h.CurrentLeafID.Valid {
			l := a.h.CurrentLeafID.String
			a.rows[0].ParentID = &l
		}
	}
	if f != nil {
		f.add(key, a)
		return nil
	}
	if err := a.ss.appendRows(tx, a.rows); err != nil {
		if errors.Is(err, ErrDuplicate) {
			return errBatchStored
		}
		return err
	}
	return nil
}

// appendKey is a session in a view (its tenant scope).
type appendKey struct {
	session uuid.UUID
	tenant  string
	scoped  bool
}

// appendFlush is what a flush of several appends (appendBatch) keeps
// between them: the head each session's row has after the flush's appends
// so far, and their message rows not inserted yet, by session in append
// order. A nil *appendFlush keeps nothing (an append alone).
type appendFlush struct {
	heads map[appendKey]sessionHead
	order []appendKey
	rows  map[appendKey][]models.Message
	ss    map[appendKey]*sessionStore
	// cross: one statement may concern several sessions (lockHeads reads
	// every session of the flush at once, insert writes every session's
	// rows in one INSERT). Only where the dialect itself has no
	// one-statement append (MariaDB): a PostgreSQL Store with
	// CapFastPaths switched off keeps one session per statement, so a
	// Citus deployment routes each to one shard.
	cross bool
}

// head returns the head of key's row as the flush left it.
func (f *appendFlush) head(key appendKey) (sessionHead, bool) {
	if f == nil {
		return sessionHead{}, false
	}
	h, ok := f.heads[key]
	return h, ok
}

// add records a's advance of key's row (as apply's UPDATE made it) and
// keeps its rows for insert.
func (f *appendFlush) add(key appendKey, a *appendJob) {
	k := int64(len(a.rows))
	f.heads[key] = sessionHead{LastSeq: a.h.LastSeq + k, MessageCount: a.h.MessageCount + k, Version: a.h.Version + 1,
		CurrentLeafID: sql.NullString{String: a.out[len(a.out)-1].ID, Valid: true}}
	if _, ok := f.rows[key]; !ok {
		f.order = append(f.order, key)
		f.ss[key] = a.ss
	}
	f.rows[key] = append(f.rows[key], a.rows...)
}

// lockHeads reads and row-locks, in one statement, the session row of
// every append of reqs that runs through applyIn, in id order (the order
// in which any other flush or single append of the row would lock it, so
// two flushes of several Stores do not deadlock each other on it), and
// records each row as the head of the keys that see it (an unscoped view,
// or a view of the row's tenant). A key whose row is missing or outside
// its view is left unknown: applyIn then reads it as an append alone does
// and reports ErrNotFound.
func (f *appendFlush) lockHeads(tx *gorm.DB, reqs []*gcReq[uint64, appendReq]) error {
	if f == nil || !f.cross {
		return nil
	}
	var ss *sessionStore
	keys := map[uuid.UUID][]appendKey{}
	var ids []any
	for _, r := range reqs {
		a := r.in.job
		if a == nil {
			continue
		}
		ss = a.ss
		key := appendKey{session: a.sessionID}
		if t := a.ss.tenant; t != nil {
			key.tenant, key.scoped = *t, true
		}
		if _, ok := keys[key.session]; !ok {
			ids = append(ids, a.sessionID)
		}
		keys[key.session] = append(keys[key.session], key)
	}
	if len(ids) < 2 {
		return nil // one session: applyIn's own read is the same statement
	}
	_, err := newDirectTx(tx).each("SELECT id, tenant_id, last_seq, message_count, version, current_leaf_id FROM "+ss.s.quoted(models.TableSessions)+
		" WHERE id IN ("+placeholders(len(ids))+") ORDER BY id"+ss.lockSuffix(), ids, func(rows *sql.Rows, _ int64) error {
		var id uuid.UUID
		var tenant sql.NullString
		var h sessionHead
		if err := rows.Scan(&id, &tenant, &h.LastSeq, &h.MessageCount, &h.Version, &h.CurrentLeafID); err != nil {
			return err
		}
		for _, key := range keys[id] {
			if !key.scoped || (tenant.Valid && tenant.String == key.tenant) {
				f.heads[key] = h
			}
		}
		return nil
	})
	return dbErr(err)
}

// insert inserts the rows kept so far: each session's in one statement
// (appendRows; a session's rows only, so Citus routes it to one shard),
// or with cross every session's in one.
func (f *appendFlush) insert(tx *gorm.DB) error {
	if f == nil {
		return nil
	}
	if f.cross && len(f.order) > 1 {
		var all []models.Message
		for _, key := range f.order {
			all = append(all, f.rows[key]...)
			delete(f.rows, key)
		}
		ss := f.ss[f.order[0]]
		f.order = f.order[:0]
		if len(all) == 0 {
			return nil
		}
		return ss.appendRows(tx, all)
	}
	for _, key := range f.order {
		if rows := f.rows[key]; len(rows) > 0 {
			if err := f.ss[key].appendRows(tx, rows); err != nil {
				return err
			}
		}
		delete(f.rows, key)
	}
	f.order = f.order[:0]
	return nil
}

// notAdvanced handles a session that is missing or (strict) at another
// version: a retry of a batch that landed returns the stored messages.
func (a *appendJob) notAdvanced(tx *gorm.DB) error {
	if a.callerIDs {
		stored, ok, err := a.ss.replayBatch(tx, a.sessionID, a.msgs, a.out)
		if err != nil && !errors.Is(err, ErrDuplicate) {
			return err
		}
		if ok {
			a.replayed = stored
			return nil
		}
	}
	err := a.ss.staleOrMissing(tx, a.sessionID, a.o.ExpectedVersion)
	var sv *repo.StaleVersionError
	if a.o.ExpectedVersion == 0 && errors.As(err, &sv) {
		// Not strict, and the session exists now: it was created
		// after the statement's snapshot (a concurrent first write).
		return errAppendAgain
	}
	return err
}

// replayStored handles errBatchStored: the batch (or part of it) is
// stored; a retry returns it, any other overlap is a conflict naming the
// id.
func (a *appendJob) replayStored(ctx context.Context) error {
	return a.ss.inTx(ctx, func(tx *gorm.DB) error {
		stored, ok, err := a.ss.replayBatch(tx, a.sessionID, a.msgs, a.out)
		if ok {
			a.replayed = stored
		} else if err == nil {
			// The colliding row is gone again (deleted meanwhile).
			err = fmt.Errorf("a message id of the batch collided with a row that is gone now; nothing was written: %w", ErrRetryable)
		}
		return err
	})
}

// result is the appended batch: the stored one of a replayed retry, else
// the prepared messages with their seqs after the old head and the first
// one's inherited parent.
func (a *appendJob) result() []repo.Message {
	if a.replayed != nil {
		return a.replayed
	}
	if a.inheritFirst && a.h.CurrentLeafID.Valid {
		l := a.h.CurrentLeafID.String
		a.out[0].ParentID = &l
	}
	for i := range a.out {
		a.out[i].Seq = a.h.LastSeq + int64(i) + 1
	}
	return a.out
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
	stored, err := ss.s.scanMessages(rows, sessionID, int64(len(ids)), ss.s.has(CapValidatedJSON))
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

// appendReq is one AppendMessages call on the transaction path: apply runs
// the whole append (read and lock the head, advance it, insert the
// messages) in the transaction it is given and sets *wrote once it has
// written a row; its results stay in the caller's variables.
type appendReq struct {
	ss    *sessionStore
	apply func(tx *gorm.DB) error
	wrote *bool
	job   *appendJob
}

// appendBatch runs several appends in one write transaction (one commit,
// one WAL write of the pages they share), one after the other in queue
// order, each checked against the session row as it stands after the ones
// before it. An append that ends before writing anything (its session is
// missing, or at another version: apply's own replay and stale checks,
// reads only) gets that outcome and the others go on. Any other failure —
// a statement error, a message id already stored (the append had written
// its session row) — rolls the whole transaction back and returns the
// error, so that every call of the flush runs again alone (see
// committer.flush) and gets the outcome of its own transaction.
//
// Where the database has row locks and no one-statement append
// (CapRowLocks without CapFastPaths: MariaDB), the flush reads a session's
// row once, however many of its appends it holds, and inserts each
// session's messages in one statement at its end (appendFlush): for k
// appends to one session BEGIN, the read, k UPDATEs (one session.updated
// change each), one INSERT and COMMIT, where one append alone is BEGIN,
// read, UPDATE, INSERT, COMMIT. Where the dialect itself has no
// one-statement append (MariaDB; appendFlush.cross), a flush of appends to
// several sessions reads and locks all their rows in one statement (in id
// order) and inserts all their messages in one: for k appends to n
// sessions BEGIN, one read, k UPDATEs, one INSERT, COMMIT.
func (s *Store) appendBatch(ctx context.Context, reqs []*gcReq[uint64, appendReq]) error {
	var f *appendFlush
	if s.has(CapRowLocks) && !s.has(CapFastPaths) {
		f = &appendFlush{heads: map[appendKey]sessionHead{}, rows: map[appendKey][]models.Message{}, ss: map[appendKey]*sessionStore{},
			cross: !s.d.Capabilities().Has(CapFastPaths)}
	}
	return s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := f.lockHeads(tx, reqs); err != nil {
			return err
		}
		for _, r := range reqs {
			var err error
			if f != nil && r.in.job != nil {
				err = r.in.job.applyIn(tx, f)
			} else {
				err = r.in.apply(tx)
			}
			var stale *repo.StaleVersionError
			if err != nil && (*r.in.wrote || !(errors.Is(err, ErrNotFound) || errors.As(err, &stale))) {
				return err
			}
			r.err = err
		}
		return f.insert(tx)
	})
}
