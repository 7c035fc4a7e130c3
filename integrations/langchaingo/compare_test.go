package langchaingo_test

import (
	"context"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/tmc/langchaingo/llms"
	"github.com/tmc/langchaingo/memory"
	"github.com/tmc/langchaingo/memory/sqlite3"
	"github.com/tmc/langchaingo/schema"

	"github.com/agentstore/agentstore"
	lc "github.com/agentstore/agentstore/integrations/langchaingo"
)

// newReference returns langchaingo's bundled SQLite history (memory/sqlite3)
// on a file in t.TempDir(), with WithOverwrite (without it the SQLite
// history ignores Clear and SetMessages; see the README), for session.
func newReference(t *testing.T, ctx context.Context, path, session string) *sqlite3.SqliteChatMessageHistory {
	t.Helper()
	h := sqlite3.NewSqliteChatMessageHistory(
		sqlite3.WithContext(ctx),
		sqlite3.WithDBAddress(path),
		sqlite3.WithSession(session),
		sqlite3.WithOverwrite(),
	)
	t.Cleanup(func() { _ = h.DB.Close() })
	return h
}

// step is one call on a history; its result (messages, or nil) and whether
// it failed are compared between the two histories.
type step struct {
	name string
	do   func(ctx context.Context, h schema.ChatMessageHistory) (any, error)
}

func add(m llms.ChatMessage) func(context.Context, schema.ChatMessageHistory) (any, error) {
	return func(ctx context.Context, h schema.ChatMessageHistory) (any, error) { return nil, h.AddMessage(ctx, m) }
}

func addUser(s string) func(context.Context, schema.ChatMessageHistory) (any, error) {
	return func(ctx context.Context, h schema.ChatMessageHistory) (any, error) {
		return nil, h.AddUserMessage(ctx, s)
	}
}

func addAI(s string) func(context.Context, schema.ChatMessageHistory) (any, error) {
	return func(ctx context.Context, h schema.ChatMessageHistory) (any, error) {
		return nil, h.AddAIMessage(ctx, s)
	}
}

func set(ms ...llms.ChatMessage) func(context.Context, schema.ChatMessageHistory) (any, error) {
	return func(ctx context.Context, h schema.ChatMessageHistory) (any, error) {
		return nil, h.SetMessages(ctx, ms)
	}
}

func clearAll(ctx context.Context, h schema.ChatMessageHistory) (any, error) {
	return nil, h.Clear(ctx)
}

func messages(ctx context.Context, h schema.ChatMessageHistory) (any, error) { return h.Messages(ctx) }

// tricky holds contents that a careless encoding would change: JSON-looking
// text, quotes, escapes, HTML characters, non-ASCII, whitespace, nothing.
var tricky = []string{
	"",
	" ",
	`[{"type":"text","text":"not blocks"}]`,
	`"already quoted"`,
	`{"a":1}`,
	"null",
	"42",
	`back\slash \n not a newline \u0041`,
	"<b>bold</b> & <script>alert(1)</script>",
	"ünïcødé ✓ 🎉 中文 \u200b zero-width \u2028 line separator",
	"line one\nline two\r\n\ttabbed  ",
	strings.Repeat("long ", 20000),
}

// TestCompareWithSQLiteHistory runs one sequence of calls against
// langchaingo's bundled SQLite history and against History (on each
// dialect) and requires the same results from every call: the same
// messages (types and contents, in order) and the same success, across
// adds, Clear and SetMessages. The sequence uses the message types the
// SQLite history keeps (human, ai, system, with content only): it drops the
// others on read, where History returns them (TestRoundTripEveryType).
func TestCompareWithSQLiteHistory(t *testing.T) {
	steps := []step{
		{"Messages of a new history", messages},
		{"Clear of a new history", clearAll},
		{"Messages after Clear of a new history", messages},
		{"AddUserMessage", addUser("hi")},
		{"AddAIMessage", addAI("hello, how can I help?")},
		{"AddMessage system", add(llms.SystemChatMessage{Content: "be brief"})},
		{"AddMessage human", add(llms.HumanChatMessage{Content: "what is 2+2?"})},
		{"AddMessage ai", add(llms.AIChatMessage{Content: "4"})},
		{"AddMessage pointer", add(&llms.HumanChatMessage{Content: "thanks"})},
		{"Messages after adds", messages},
	}
	for i, s := range tricky {
		steps = append(steps, step{fmt.Sprintf("AddUserMessage tricky %d", i), addUser(s)},
			step{fmt.Sprintf("AddAIMessage tricky %d", i), addAI(s)})
	}
	steps = append(steps,
		step{"Messages after tricky contents", messages},
		step{"SetMessages", set(llms.SystemChatMessage{Content: "sys"}, llms.HumanChatMessage{Content: "q"}, llms.AIChatMessage{Content: "a"})},
		step{"Messages after SetMessages", messages},
		step{"AddUserMessage after SetMessages", addUser("next")},
		step{"Messages after SetMessages and add", messages},
		step{"SetMessages one", set(llms.AIChatMessage{Content: "only"})},
		step{"Messages after SetMessages one", messages},
		step{"Clear", clearAll},
		step{"Messages after Clear", messages},
		step{"Clear twice", clearAll},
		step{"AddAIMessage after Clear", addAI("after clear")},
		step{"AddUserMessage after Clear", addUser("and again")},
		step{"Messages after Clear and adds", messages},
		step{"SetMessages after Clear", set(llms.HumanChatMessage{Content: tricky[2]}, llms.AIChatMessage{Content: tricky[9]})},
		step{"Messages at the end", messages},
	)

	dialects(t, func(t *testing.T, st *agentstore.Store) {
		ctx := testContext(t)
		ref := newReference(t, ctx, filepath.Join(t.TempDir(), "reference.db"), "default")
		ours := lc.NewHistory(st)
		for _, s := range steps {
			want, wantErr := s.do(ctx, ref)
			got, gotErr := s.do(ctx, ours)
			if (wantErr == nil) != (gotErr == nil) {
				t.Fatalf("%s: SQLite history error %v, agentstore history error %v", s.name, wantErr, gotErr)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%s: agentstore history returned\n%s\nSQLite history returned\n%s", s.name, show(got), show(want))
			}
		}
	})
}

// TestCompareSessionsIsolated: two histories on one database (two sessions)
// see only their own messages, in both implementations, through adds,
// SetMessages and Clear of one of them.
func TestCompareSessionsIsolated(t *testing.T) {
	dialects(t, func(t *testing.T, st *agentstore.Store) {
		ctx := testContext(t)
		path := filepath.Join(t.TempDir(), "reference.db")
		refA, refB := newReference(t, ctx, path, "a"), newReference(t, ctx, path, "b")
		ourA, ourB := lc.NewHistory(st), lc.NewHistory(st)
		type call struct {
			name string
			onA  bool
			do   func(ctx context.Context, h schema.ChatMessageHistory) (any, error)
		}
		calls := []call{
			{"A add", true, addUser("a1")},
			{"B add", false, addUser("b1")},
			{"A add ai", true, addAI("a2")},
			{"A messages", true, messages},
			{"B messages", false, messages},
			{"B SetMessages", false, set(llms.SystemChatMessage{Content: "b-sys"})},
			{"A messages after B SetMessages", true, messages},
			{"B messages after B SetMessages", false, messages},
			{"A Clear", true, clearAll},
			{"A messages after A Clear", true, messages},
			{"B messages after A Clear", false, messages},
		}
		for _, c := range calls {
			ref, ours := schema.ChatMessageHistory(refB), schema.ChatMessageHistory(ourB)
			if c.onA {
				ref, ours = refA, ourA
			}
			want, wantErr := c.do(ctx, ref)
			got, gotErr := c.do(ctx, ours)
			if (wantErr == nil) != (gotErr == nil) || !reflect.DeepEqual(got, want) {
				t.Fatalf("%s: agentstore history %s (err %v), SQLite history %s (err %v)", c.name, show(got), gotErr, show(want), wantErr)
			}
		}
	})
}

// TestCompareMemories drives langchaingo's memories — ConversationBuffer,
// and ConversationWindowBuffer, which prunes with SetMessages every turn —
// over both histories for a dozen turns and requires the same memory
// variables after every turn, and after the memory's Clear.
func TestCompareMemories(t *testing.T) {
	kinds := []struct {
		name string
		make func(h schema.ChatMessageHistory) schema.Memory
	}{
		{"buffer", func(h schema.ChatMessageHistory) schema.Memory {
			return memory.NewConversationBuffer(memory.WithChatHistory(h))
		}},
		{"buffer returning messages", func(h schema.ChatMessageHistory) schema.Memory {
			return memory.NewConversationBuffer(memory.WithChatHistory(h), memory.WithReturnMessages(true))
		}},
		{"window of 3", func(h schema.ChatMessageHistory) schema.Memory {
			return memory.NewConversationWindowBuffer(3, memory.WithChatHistory(h), memory.WithReturnMessages(true))
		}},
	}
	dialects(t, func(t *testing.T, st *agentstore.Store) {
		ctx := testContext(t)
		for _, k := range kinds {
			t.Run(k.name, func(t *testing.T) {
				ref := k.make(newReference(t, ctx, filepath.Join(t.TempDir(), "reference.db"), "default"))
				ours := k.make(lc.NewHistory(st))
				compare := func(when string) {
					t.Helper()
					want, wantErr := ref.LoadMemoryVariables(ctx, map[string]any{})
					got, gotErr := ours.LoadMemoryVariables(ctx, map[string]any{})
					if wantErr != nil || gotErr != nil {
						t.Fatalf("%s: LoadMemoryVariables: SQLite history %v, agentstore history %v", when, wantErr, gotErr)
					}
					if !reflect.DeepEqual(got, want) {
						t.Fatalf("%s: agentstore history's memory %v, SQLite history's %v", when, got, want)
					}
				}
				compare("before the first turn")
				for turn := range 12 {
					in := map[string]any{"input": fmt.Sprintf("question %d: %s", turn, tricky[turn%len(tricky)])}
					out := map[string]any{"output": fmt.Sprintf("answer %d", turn)}
					if err := ref.SaveContext(ctx, in, out); err != nil {
						t.Fatalf("turn %d: SQLite history SaveContext: %v", turn, err)
					}
					if err := ours.SaveContext(ctx, in, out); err != nil {
						t.Fatalf("turn %d: agentstore history SaveContext: %v", turn, err)
					}
					compare(fmt.Sprintf("after turn %d", turn))
				}
				if err := ref.Clear(ctx); err != nil {
					t.Fatal(err)
				}
				if err := ours.Clear(ctx); err != nil {
					t.Fatal(err)
				}
				compare("after Clear")
			})
		}
	})
}

// show prints a step's result for a failure message.
func show(v any) string {
	ms, ok := v.([]llms.ChatMessage)
	if !ok {
		return fmt.Sprintf("%#v", v)
	}
	if ms == nil {
		return "  nil"
	}
	var b strings.Builder
	for i, m := range ms {
		c := m.GetContent()
		if len(c) > 80 {
			c = c[:80] + "..."
		}
		fmt.Fprintf(&b, "  %d %T %q\n", i, m, c)
	}
	return b.String()
}
