package engine

import (
	"context"
	"database/sql"
	"fmt"
	"slices"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo"
)

// Edit and rewind as moves of the current leaf in the message tree (see
// repo.Sessions.Rewind, Branches, LoadBranch and AppendOptions.SiblingOf).
// No message is ever rewritten or deleted here: a rewind writes the session
// row's current_leaf_id, an edit is an append whose first message takes the
// edited message's parent.

// Rewind implements repo.Sessions.
func (ss *sessionStore) Rewind(ctx context.Context, sessionID uuid.UUID, toMessageID string, o repo.RewindOptions) (int64, error) {
	if ss.scopeErr != nil {
		return 0, ss.scopeErr
	}
	if err := checkID("rewind message id", toMessageID); err != nil {
		return 0, fmt.Errorf("rewind session %s: %w", sessionID, err)
	}
	if o.ExpectedVersion < 0 {
		return 0, invalidf("rewind session %s: negative expected version", sessionID)
	}
	now := ss.s.now()
	var version int64
	defer ss.writeLock(ctx)()
	err := ss.inTx(ctx, func(tx *gorm.DB) error {
		// The row lock (or the single writer's transaction) orders the
		// rewind with appends, saves and other rewinds of the session.
		h, err := ss.lockHead(tx, sessionID)
		if err != nil {
			return err
		}
		d := newDirectTx(tx)
		var seq int64
		found, err := d.queryRow("SELECT seq FROM "+ss.s.quoted(models.TableMessages)+" WHERE session_id = ? AND id = ?",
			[]any{sessionID, toMessageID}, &seq)
		if err != nil {
			return err
		}
		if !found {
			return fmt.Errorf("the session holds no such message: %w", ErrNotFound)
		}
		if h.CurrentLeafID.Valid && h.CurrentLeafID.String == toMessageID {
			// Already there (a retry whose first attempt landed, or a
			// no-op): nothing to write, never stale.
			version = h.Version
			return nil
		}
		if o.ExpectedVersion > 0 && h.Version != o.ExpectedVersion {
			return &repo.StaleVersionError{SessionID: sessionID, Expected: o.ExpectedVersion, Stored: h.Version}
		}
		if _, err := d.exec("UPDATE "+ss.s.quoted(models.TableSessions)+" SET current_leaf_id = ?, "+
			monotonicUpdatedAt("updated_at")+", version = version + 1 WHERE id = ?",
			toMessageID, now, now, sessionID); err != nil {
			return err
		}
		version = h.Version + 1
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("rewind session %s to message %q: %w", sessionID, clip(toMessageID), dbErr(err))
	}
	return version, nil
}

// appendSibling is AppendMessagesWith with o.SiblingOf: the first message
// of msgs takes the stored parent of message o.SiblingOf (read first:
// messages are never rewritten, so it cannot change before the append
// runs), and the append does the rest (a root's sibling is stored as a
// root: rootFirst).
func (ss *sessionStore) appendSibling(ctx context.Context, sessionID uuid.UUID, o repo.AppendOptions, msgs []repo.Message) ([]repo.Message, error) {
	if ss.scopeErr != nil {
		return nil, ss.scopeErr
	}
	fail := func(err error) ([]repo.Message, error) {
		return nil, fmt.Errorf("append messages to %s as siblings of message %q: %w", sessionID, clip(o.SiblingOf), err)
	}
	if err := checkID("sibling-of message id", o.SiblingOf); err != nil {
		return nil, fmt.Errorf("append messages to %s: %w", sessionID, err)
	}
	switch {
	case o.ExpectedVersion < 0:
		return fail(invalidf("negative expected version"))
	case len(msgs) == 0:
		return fail(invalidf("no message to append: an edit appends at least the new version of the message"))
	case msgs[0].ParentID != nil:
		return fail(invalidf("message 0 sets ParentID %q: SiblingOf gives it the edited message's parent; set one or the other",
			clip(*msgs[0].ParentID)))
	case msgs[0].ID == o.SiblingOf:
		return fail(invalidf("message 0 has the edited message's id: message ids are unique in a session, give the new version an id of its own"))
	}
	// Every message is checked before any SQL (appendMessages checks them
	// again: cheap, and it keeps that function whole).
	for i := range msgs {
		if err := checkMessage(i, &msgs[i], ss.s.cfg.maxContent); err != nil {
			return fail(err)
		}
	}
	if err := checkMessageIDs(msgs, nil); err != nil {
		return fail(err)
	}
	parent, err := ss.messageParent(ss.db(ctx), sessionID, o.SiblingOf)
	if err != nil {
		return fail(err)
	}
	batch := slices.Clone(msgs)
	batch[0].ParentID = parent
	out, err := ss.appendMessages(ctx, sessionID, repo.AppendOptions{ExpectedVersion: o.ExpectedVersion}, batch, parent == nil)
	if err != nil {
		return nil, err
	}
	if parent == nil && out[0].ParentID != nil {
		// A retry's replay (the replay check compares a parent only when
		// one is asked for): the id is stored, but not as a root.
		return fail(fmt.Errorf("message %q is stored in session %s (seq %d) under parent %q, not as a sibling of %q: %w",
			clip(out[0].ID), sessionID, out[0].Seq, clip(*out[0].ParentID), clip(o.SiblingOf), ErrDuplicate))
	}
	return out, nil
}

// messageParent returns the stored parent id of message id of the session
// (nil for a root); ErrNotFound naming the session when it does not exist
// (in the view's tenant), and ErrNotFound when the session holds no
// message of that id (the caller's error names it).
func (ss *sessionStore) messageParent(db *gorm.DB, sessionID uuid.UUID, id string) (*string, error) {
	tc, targs := ss.inTenantCond()
	var rows []struct{ ParentID *string }
	if err := db.Raw("SELECT parent_id FROM "+ss.s.quoted(models.TableMessages)+" WHERE session_id = ? AND id = ?"+tc,
		append([]any{sessionID, id}, targs...)...).Scan(&rows).Error; err != nil {
		return nil, dbErr(err)
	}
	if len(rows) == 0 {
		if ok, err := ss.sessionExists(db, sessionID); err != nil || !ok {
			return nil, ss.missing("session", sessionID, err)
		}
		return nil, fmt.Errorf("the session holds no such message: %w", ErrNotFound)
	}
	return rows[0].ParentID, nil
}

// branchHead is the part of the session row the branch reads need.
type branchHead struct {
	LastSeq       int64
	MessageCount  int64
	CurrentLeafID *string
}

// readBranchHead reads the session row (in the view's tenant) for the
// branch reads; ErrNotFound when it is missing.
func (ss *sessionStore) readBranchHead(tx *gorm.DB, sessionID uuid.UUID) (branchHead, error) {
	tc, targs := ss.tenantCond("tenant_id")
	var rows []branchHead
	if err := tx.Raw("SELECT last_seq, message_count, current_leaf_id FROM "+ss.s.quoted(models.TableSessions)+" WHERE id = ?"+tc,
		append([]any{sessionID}, targs...)...).Scan(&rows).Error; err != nil {
		return branchHead{}, dbErr(err)
	}
	if len(rows) == 0 {
		return branchHead{}, ss.notFound("session", sessionID)
	}
	return rows[0], nil
}

// LoadBranch implements repo.Sessions.
func (ss *sessionStore) LoadBranch(ctx context.Context, sessionID uuid.UUID, messageID string, opts ...repo.LoadOptions) ([]repo.Message, error) {
	if ss.scopeErr != nil {
		return nil, ss.scopeErr
	}
	if err := checkID("branch message id", messageID); err != nil {
		return nil, fmt.Errorf("load branch of session %s: %w", sessionID, err)
	}
	o, refused := loadOptions(opts)
	if refused != "" {
		return nil, invalidf("load branch of session %s: %s", sessionID, refused)
	}
	o.CurrentBranch = true
	var out []repo.Message
	err := ss.s.readTx(ss.db(ctx), func(tx *gorm.DB) error {
		h, err := ss.readBranchHead(tx, sessionID)
		if err != nil {
			return err
		}
		// loadMessages walks from the row's current leaf: hand it one
		// whose leaf is messageID.
		row := models.Session{ID: sessionID, LastSeq: h.LastSeq, MessageCount: h.MessageCount, CurrentLeafID: &messageID}
		if out, err = ss.loadMessages(tx, &row, o); err != nil {
			return err
		}
		if len(out) > 0 {
			return nil
		}
		// Empty: the message is missing, or the options left nothing.
		var n int64
		if err := tx.Raw("SELECT COUNT(*) FROM "+ss.s.quoted(models.TableMessages)+" WHERE session_id = ? AND id = ? AND seq <= ?",
			sessionID, messageID, h.LastSeq).Scan(&n).Error; err != nil {
			return dbErr(err)
		}
		if n == 0 {
			return fmt.Errorf("the session holds no such message: %w", ErrNotFound)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("load branch of session %s at message %q: %w", sessionID, clip(messageID), dbErr(err))
	}
	return out, nil
}

// treeNode is one message of Branches' in-memory tree.
type treeNode struct {
	seq      int64
	id       string
	parent   int // index of the stored parent, -1 for none
	created  dbTime
	children int
	// The memo of the walk from this message to its root: length, root
	// index, fork point index (-1 for none); done when computed.
	length     int64
	root, fork int
	state      uint8 // 0 unvisited, 1 on the walk's stack, 2 done
}

// Branches implements repo.Sessions.
func (ss *sessionStore) Branches(ctx context.Context, sessionID uuid.UUID) ([]repo.Branch, error) {
	if ss.scopeErr != nil {
		return nil, ss.scopeErr
	}
	var (
		h     branchHead
		nodes []treeNode
	)
	err := ss.s.readTx(ss.db(ctx), func(tx *gorm.DB) error {
		var err error
		if h, err = ss.readBranchHead(tx, sessionID); err != nil {
			return err
		}
		nodes, err = ss.readTree(tx, sessionID, h)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list branches of session %s: %w", sessionID, dbErr(err))
	}
	return branchesOf(nodes, h.CurrentLeafID), nil
}

// readTree reads the seq, id, parent id and created_at of every message of
// the session up to the row's last_seq, in seq order, and links parents.
func (ss *sessionStore) readTree(tx *gorm.DB, sessionID uuid.UUID, h branchHead) ([]treeNode, error) {
	rows, err := tx.Raw("SELECT seq, id, parent_id, created_at FROM "+ss.s.quoted(models.TableMessages)+
		" WHERE session_id = ? AND seq <= ? ORDER BY seq", sessionID, h.LastSeq).Rows()
	if err != nil {
		return nil, dbErr(err)
	}
	defer rows.Close()
	nodes := make([]treeNode, 0, min(h.MessageCount, 100000))
	parents := make([]sql.NullString, 0, cap(nodes))
	for rows.Next() {
		var (
			n       treeNode
			parent  sql.NullString
			created any
		)
		if err := rows.Scan(&n.seq, &n.id, &parent, &created); err != nil {
			return nil, dbErr(translateVia(ss.s.db, err))
		}
		if err := n.created.Scan(created); err != nil {
			return nil, corrupt(models.TableMessages, fmt.Sprintf("%s/%d", sessionID, n.seq), "created_at", err)
		}
		nodes = append(nodes, n)
		parents = append(parents, parent)
	}
	if err := rows.Err(); err != nil {
		return nil, dbErr(translateVia(ss.s.db, err))
	}
	byID := make(map[string]int, len(nodes))
	for i := range nodes {
		byID[nodes[i].id] = i
	}
	for i := range nodes {
		nodes[i].parent = -1
		if parents[i].Valid {
			if p, ok := byID[parents[i].String]; ok {
				nodes[i].parent = p
				nodes[p].children++
			}
		}
	}
	return nodes, nil
}

// branchesOf computes the branches of the tree: one per leaf (no
// children), and one for the current leaf when it has children.
func branchesOf(nodes []treeNode, currentLeaf *string) []repo.Branch {
	cur := -1
	if currentLeaf != nil {
		for i := range nodes {
			if nodes[i].id == *currentLeaf {
				cur = i
				break
			}
		}
	}
	// The current branch: the walk from the current leaf to its root
	// (stopping at a message already visited, as every branch walk does).
	onCurrent := make([]bool, len(nodes))
	for i := cur; i >= 0 && !onCurrent[i]; i = nodes[i].parent {
		onCurrent[i] = true
	}
	for i := range nodes {
		walkToRoot(nodes, i, onCurrent)
	}
	out := []repo.Branch{}
	for i := range nodes {
		n := &nodes[i]
		if n.children > 0 && i != cur {
			continue
		}
		b := repo.Branch{LeafID: n.id, LeafSeq: n.seq, LeafCreatedAt: n.created.T, RootID: nodes[n.root].id,
			Length: n.length, Current: i == cur}
		if n.fork >= 0 {
			b.ForkPointID = nodes[n.fork].id
		}
		out = append(out, b)
	}
	return out
}

// walkToRoot fills the memo (length, root, fork) of node start and of every
// message on its walk, in time linear in the messages it had not visited
// before. A message's walk is itself then its parent's walk, except on a
// cycle of parent ids: a walk stops before it would repeat a message, so
// the walk from a message on a cycle goes once around it and ends at the
// cycle message whose parent it is.
func walkToRoot(nodes []treeNode, start int, onCurrent []bool) {
	if nodes[start].state == 2 {
		return
	}
	var stack []int
	i := start
	for i >= 0 && nodes[i].state == 0 {
		nodes[i].state = 1
		stack = append(stack, i)
		i = nodes[i].parent
	}
	if i >= 0 && nodes[i].state == 1 {
		// A cycle: the stack from i to its top. Every message on it walks
		// once around: the length of the cycle, ending at the message
		// before it on the way round (the one whose parent it is); the
		// cycle is all on the current branch or all off it (a walk that
		// reaches it goes all the way round).
		k := slices.Index(stack, i)
		cycle := stack[k:]
		for j, c := range cycle {
			n := &nodes[c]
			n.length = int64(len(cycle))
			n.root = cycle[(j+len(cycle)-1)%len(cycle)]
			n.fork = -1
			if onCurrent[c] {
				n.fork = c
			}
			n.state = 2
		}
		stack = stack[:k]
	}
	for j := len(stack) - 1; j >= 0; j-- {
		c := stack[j]
		n := &nodes[c]
		if p := n.parent; p >= 0 {
			n.length, n.root, n.fork = nodes[p].length+1, nodes[p].root, nodes[p].fork
		} else {
			n.length, n.root, n.fork = 1, c, -1
		}
		if onCurrent[c] {
			n.fork = c
		}
		n.state = 2
	}
}

// Rewind implements repo.Sessions.
func (a sessionsAPI) Rewind(ctx context.Context, sessionID uuid.UUID, toMessageID string, o repo.RewindOptions) (int64, error) {
	defer a.ss.wrote()
	v, err := a.ss.Rewind(ctx, sessionID, toMessageID, o)
	return v, opErr("rewind_session", err)
}

// Branches implements repo.Sessions.
func (a sessionsAPI) Branches(ctx context.Context, sessionID uuid.UUID) ([]repo.Branch, error) {
	bs, err := a.ss.Branches(ctx, sessionID)
	return bs, opErr("list_branches", err)
}

// LoadBranch implements repo.Sessions.
func (a sessionsAPI) LoadBranch(ctx context.Context, sessionID uuid.UUID, messageID string, opts ...repo.LoadOptions) ([]repo.Message, error) {
	msgs, err := a.ss.LoadBranch(ctx, sessionID, messageID, opts...)
	return msgs, opErr("load_branch", err)
}
