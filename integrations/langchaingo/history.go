// Package langchaingo is an agentstore-backed chat message history for
// github.com/tmc/langchaingo: History implements langchaingo's
// schema.ChatMessageHistory over agentstore's session store, on SQLite or
// PostgreSQL, so langchaingo's memories (memory.ConversationBuffer,
// ConversationWindowBuffer, ConversationTokenBuffer) and chains keep their
// conversation in an agentstore database.
//
// One History is one agentstore session (repo.Session): every langchaingo
// message is one agentstore message of it, in order. The mapping is
// lossless for every message type of package llms (see AddMessage), so
// Messages returns exactly what was added. Clear and SetMessages replace
// the conversation the way langchaingo's bundled SQLite history
// (memory/sqlite3, with WithOverwrite) does.
//
// It is a module of its own (github.com/agentstore/agentstore/integrations/langchaingo)
// so that agentstore itself does not depend on langchaingo.
package langchaingo

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/tmc/langchaingo/llms"
	"github.com/tmc/langchaingo/schema"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/repo"
)

// createAttempts bounds how often a write retries after losing a race to
// create or replace the history's session: a write that finds no session
// creates it, and one that loses that race appends to (or replaces) the
// session the winner created. Only a session id that another tenant holds
// (or a session deleted and created again under the write, time after
// time) keeps losing; the write then returns the store's last error
// (ErrDuplicate for the other tenant's id).
const createAttempts = 4

// History is a langchaingo chat message history (schema.ChatMessageHistory)
// stored in one agentstore session. Its methods are safe for concurrent use,
// also by several Histories (in one or several processes) on the same
// session.
//
// The session belongs to the history: the first write creates it (a main
// session in state created, with the history's tenant when it has one),
// and Clear and SetMessages delete it together with everything agentstore
// keeps under it (its messages and also any todos, plans, summaries,
// compaction records, queue items and child sessions someone else added).
// Give each conversation a session of its own.
type History struct {
	st       *agentstore.Store
	tenant   string
	scoped   bool
	id       uuid.UUID
	idFromOp bool
}

// Statically assert that History implements langchaingo's interface.
var _ schema.ChatMessageHistory = (*History)(nil)

// Option configures a History made by NewHistory.
type Option func(*History)

// WithSessionID makes the history use the agentstore session id. Without
// it, NewHistory picks a new random (version 7) UUID; read it with
// SessionID to find the conversation again later.
func WithSessionID(id uuid.UUID) Option {
	return func(h *History) { h.id = id; h.idFromOp = true }
}

// WithTenant keeps the history in the tenant-scoped view of the Store
// (Store.ForTenant(tenant)): the session is created with that tenant id,
// and a session of another tenant (or without tenant) is invisible to it —
// Messages returns no messages and Clear deletes nothing, while AddMessage
// and SetMessages fail with agentstore.ErrDuplicate, since the session id is
// taken. An invalid tenant id (empty, longer than repo.MaxIDLen bytes, not
// valid UTF-8 or holding a NUL byte) makes every method fail with
// agentstore.ErrInvalidInput.
func WithTenant(tenant string) Option {
	return func(h *History) { h.tenant = tenant; h.scoped = true }
}

// NewHistory returns the history stored in st (which must be non-nil and
// migrated: see agentstore.Store.Migrate). It runs no SQL: the session is
// created by the first write.
func NewHistory(st *agentstore.Store, opts ...Option) *History {
	h := &History{st: st}
	for _, o := range opts {
		o(h)
	}
	if !h.idFromOp {
		h.id = uuid.Must(uuid.NewV7())
	}
	return h
}

// SessionID returns the id of the agentstore session the history is stored
// in.
func (h *History) SessionID() uuid.UUID { return h.id }

// sessions is the session repository of the history's view.
func (h *History) sessions() repo.Sessions {
	if h.scoped {
		return h.st.ForTenant(h.tenant).Sessions()
	}
	return h.st.Sessions()
}

// newSession is the session the history creates, holding msgs.
func (h *History) newSession(msgs []repo.Message) *repo.Session {
	s := repo.NewSession()
	s.ID = h.id
	for _, m := range msgs {
		s.AddMessage(m)
	}
	return s
}

// AddMessage appends message to the history as one agentstore message,
// creating the session when it does not exist (in the same transaction as
// the message). Each langchaingo message type maps to an agentstore role:
// human to user, ai to assistant, system to system, tool and function to
// tool, and generic to the role its Role field names (user, assistant,
// system or tool, case-insensitively; also human and ai) or else to user.
// The content is stored as a JSON string (the plain-text form of agentstore
// message content), byte for byte; the langchaingo type and the fields that
// are not content (an AI message's FunctionCall, ToolCalls and
// ReasoningContent, a generic message's Role and Name, a function
// message's Name, a tool message's ID) are kept in the message's metadata
// under the key "langchaingo". The llms message structs are accepted as
// values or pointers; any other implementation of llms.ChatMessage is stored
// by its GetType and GetContent (and GetName for generic and function
// messages, GetID for tool messages) and read back as the llms struct of
// its type.
//
// A nil message, a type other than the six of package llms
// (llms.ErrUnexpectedChatMessageType) or text that is not valid UTF-8 is
// refused with agentstore.ErrInvalidInput before anything is written, and
// so is what the store refuses (for example a NUL character; see
// repo.Sessions). The store's other errors are returned wrapped (errors.Is
// works).
func (h *History) AddMessage(ctx context.Context, message llms.ChatMessage) error {
	m, err := encodeMessage(message)
	if err != nil {
		return fmt.Errorf("langchaingo history %s: AddMessage: %w", h.id, err)
	}
	return h.wrap("AddMessage", h.append(ctx, m))
}

// AddUserMessage adds a human message (llms.HumanChatMessage) holding text.
func (h *History) AddUserMessage(ctx context.Context, text string) error {
	return h.AddMessage(ctx, llms.HumanChatMessage{Content: text})
}

// AddAIMessage adds an AI message (llms.AIChatMessage) holding text.
func (h *History) AddAIMessage(ctx context.Context, text string) error {
	return h.AddMessage(ctx, llms.AIChatMessage{Content: text})
}

// append appends m, creating the session when it does not exist.
func (h *History) append(ctx context.Context, m repo.Message) error {
	ss := h.sessions()
	var err error
	for range createAttempts {
		_, err = ss.AppendMessages(ctx, h.id, m)
		if errors.Is(err, agentstore.ErrStaleVersion) {
			// A non-strict append that found no session, whose session was
			// created before the store looked again, reports a stale
			// version 0 (agentstore v0.2.0, PostgreSQL); nothing was
			// written: append again.
			continue
		}
		if !errors.Is(err, agentstore.ErrNotFound) {
			return err
		}
		if err = ss.Save(ctx, h.newSession([]repo.Message{m})); !errors.Is(err, agentstore.ErrDuplicate) {
			return err
		}
		// Another writer created the session first: append to it.
	}
	return err
}

// Clear removes every message: it deletes the history's session (and
// everything stored under it; see History). A history without a session
// is left as it is. The next write creates the session again.
func (h *History) Clear(ctx context.Context) error {
	_, err := h.sessions().Delete(ctx, h.id)
	return h.wrap("Clear", err)
}

// Messages returns the history's messages, oldest first, exactly as they
// were added (see AddMessage), or nil when there are none. Messages that
// another agentstore client appended to the session (without the
// "langchaingo" metadata) are read by role — user as human, assistant as
// ai, system as system, tool as tool — with the content's text: a JSON
// string as it is, an array of content blocks as the concatenated "text"
// of its blocks (other blocks are left out). A message that cannot be read
// (its "langchaingo" metadata is not what AddMessage writes) is an error
// matching agentstore.ErrCorruptRow naming the session and the message.
func (h *History) Messages(ctx context.Context) ([]llms.ChatMessage, error) {
	s, err := h.sessions().Load(ctx, h.id)
	if errors.Is(err, agentstore.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, h.wrap("Messages", err)
	}
	var out []llms.ChatMessage
	for _, m := range s.Messages {
		cm, err := decodeMessage(m)
		if err != nil {
			return nil, fmt.Errorf("langchaingo history %s: Messages: message %q (seq %d): %w", h.id, m.ID, m.Seq, err)
		}
		out = append(out, cm)
	}
	return out, nil
}

// SetMessages replaces the history's messages with messages, in one
// transaction: the session is deleted (with everything stored under it;
// see History) and created again holding exactly messages, so a reader
// sees the old conversation or the new one, never a mix. Every message is
// checked first (see AddMessage): when one is refused nothing is written.
// An empty messages is Clear.
func (h *History) SetMessages(ctx context.Context, messages []llms.ChatMessage) error {
	msgs := make([]repo.Message, 0, len(messages))
	for i, cm := range messages {
		m, err := encodeMessage(cm)
		if err != nil {
			return fmt.Errorf("langchaingo history %s: SetMessages: message %d: %w", h.id, i, err)
		}
		msgs = append(msgs, m)
	}
	if len(msgs) == 0 {
		return h.Clear(ctx)
	}
	return h.wrap("SetMessages", h.replace(ctx, msgs))
}

// replace deletes the session and saves a new one holding msgs in one
// transaction, or creates it when there is none.
func (h *History) replace(ctx context.Context, msgs []repo.Message) error {
	ss := h.sessions()
	var err error
	for range createAttempts {
		locked := false
		err = ss.WithSessionLock(ctx, h.id, func(ctx context.Context, tx repo.Sessions) error {
			locked = true
			if _, err := tx.Delete(ctx, h.id); err != nil {
				return err
			}
			return tx.Save(ctx, h.newSession(msgs))
		})
		if locked || !errors.Is(err, agentstore.ErrNotFound) {
			return err
		}
		// No session: create it holding msgs (one transaction).
		if err = ss.Save(ctx, h.newSession(msgs)); !errors.Is(err, agentstore.ErrDuplicate) {
			return err
		}
		// Another writer created the session first: replace it.
	}
	return err
}

// wrap names the history and the operation in a store error.
func (h *History) wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("langchaingo history %s: %s: %w", h.id, op, err)
}
