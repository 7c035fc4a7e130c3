package repo

import "time"

// The message tree. A session's messages form a tree through ParentID:
// appending without a ParentID hangs a message under the previous one (the
// first of a batch under the session's current leaf), so a plain
// conversation is one path. Sessions.Rewind moves the current leaf back to
// an earlier message (the next append continues from there: "regenerate");
// AppendMessagesWith with AppendOptions.SiblingOf appends a sibling of a
// message ("edit message N"). Neither deletes or rewrites a message: every
// alternative stays stored, one branch per leaf, listed by
// Sessions.Branches and read by Sessions.LoadBranch.
//
// What is per branch and what is session-wide:
//   - Messages, and compact summary messages (IsCompactSummary; appended
//     without a ParentID they start a new root, so the history before a
//     compaction is a tree, and a branch, of its own), belong to their
//     branch.
//   - Summaries and compaction records carry a message id the caller sets
//     (SummarySnapshot.LeafMessageID, CompactRecord.LogicalParentID) that
//     can name their place in the tree; the store does not interpret it.
//     Both are stored per session and listed whatever the current branch:
//     Rewind neither hides nor deletes them.
//   - Session-wide, and never changed by Rewind or an edit: the session's
//     Summary (the last AddSummary's text), todos, plans, state, config,
//     permissions, error, static context hash, expiry, tenant, type and
//     the token totals and cost (usage of every appended message, on any
//     branch, counts).

// RewindOptions configures Sessions.Rewind.
type RewindOptions struct {
	// ExpectedVersion, when > 0, makes the rewind strict: it moves the
	// leaf only if the stored version equals ExpectedVersion (the version
	// is then ExpectedVersion+1), and is otherwise a *StaleVersionError
	// carrying the stored version, with nothing written. 0 rewinds
	// whatever the version. A leaf already at the target is never stale
	// (see Sessions.Rewind).
	ExpectedVersion int64
}

// Branch is one branch of a session's message tree, as Sessions.Branches
// lists it: the path from a leaf message to its root through ParentID.
type Branch struct {
	// LeafID and LeafSeq name the branch's last message; LeafCreatedAt is
	// its CreatedAt.
	LeafID        string
	LeafSeq       int64
	LeafCreatedAt time.Time
	// RootID is the first message of the path: the one whose ParentID is
	// nil or names no stored message of the session (or, on a cycle of
	// parent ids a caller wrote, the last message before the walk from the
	// leaf would repeat one).
	RootID string
	// Length is the number of messages on the path, leaf and root
	// included: how many LoadBranch(LeafID) returns.
	Length int64
	// ForkPointID is the first message on the walk from the leaf to the
	// root that is on the current branch: the last message the branch
	// shares with the current one, where it forks off. It is LeafID for
	// the current branch, and "" when the branch shares no message with
	// the current one (another tree, such as the history before a
	// compaction) or the session has no current leaf.
	ForkPointID string
	// Current reports that LeafID is the session's current leaf.
	Current bool
}
