package langchaingo_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/tmc/langchaingo/llms"

	"github.com/agentstore/agentstore"
	lc "github.com/agentstore/agentstore/integrations/langchaingo"
	"github.com/agentstore/agentstore/repo"
)

// customMessage is a llms.ChatMessage implementation of the caller's own.
type customMessage struct {
	typ     llms.ChatMessageType
	content string
	name    string
}

func (m customMessage) GetType() llms.ChatMessageType { return m.typ }
func (m customMessage) GetContent() string            { return m.content }
func (m customMessage) GetName() string               { return m.name }
func (m customMessage) GetID() string                 { return m.name }

// everyType is one message of every langchaingo type and shape, and what
// Messages must return for it.
func everyType() (in, want []llms.ChatMessage) {
	pairs := []struct{ in, want llms.ChatMessage }{
		{llms.HumanChatMessage{Content: "hi"}, nil},
		{llms.SystemChatMessage{Content: "you are terse"}, nil},
		{llms.AIChatMessage{Content: "plain"}, nil},
		{llms.AIChatMessage{}, nil},
		{llms.AIChatMessage{Content: "calling", FunctionCall: &llms.FunctionCall{Name: "lookup", Arguments: `{"q":"go"}`}}, nil},
		{llms.AIChatMessage{Content: "", ToolCalls: []llms.ToolCall{
			{ID: "call_1", Type: "function", FunctionCall: &llms.FunctionCall{Name: "weather", Arguments: `{"city": "Paris", "n": 1.50}`}},
			{ID: "call_2", Type: "function", FunctionCall: &llms.FunctionCall{Name: "noargs", Arguments: ""}},
			{ID: "call_3", Type: "custom"},
			{ID: "call_4", Type: "function", FunctionCall: &llms.FunctionCall{Name: "bad json", Arguments: `{"unterminated": `}},
		}}, nil},
		{llms.AIChatMessage{Content: "no calls", ToolCalls: []llms.ToolCall{}}, nil},
		{llms.AIChatMessage{Content: "answer", ReasoningContent: "first, think <hard> & long"}, nil},
		{llms.AIChatMessage{Content: "all", ReasoningContent: "r", FunctionCall: &llms.FunctionCall{Name: "f"},
			ToolCalls: []llms.ToolCall{{ID: "x", Type: "function", FunctionCall: &llms.FunctionCall{Name: "g", Arguments: "[]"}}}}, nil},
		{llms.GenericChatMessage{Content: "a critique", Role: "critic", Name: "bob"}, nil},
		{llms.GenericChatMessage{Content: "as assistant", Role: "Assistant"}, nil},
		{llms.GenericChatMessage{Content: "no role"}, nil},
		{llms.FunctionChatMessage{Name: "lookup", Content: `{"result":"found"}`}, nil},
		{llms.FunctionChatMessage{Content: "unnamed"}, nil},
		{llms.ToolChatMessage{ID: "call_1", Content: "18°C, sunny"}, nil},
		{llms.ToolChatMessage{Content: ""}, nil},
		{&llms.HumanChatMessage{Content: "pointer human"}, llms.HumanChatMessage{Content: "pointer human"}},
		{&llms.AIChatMessage{Content: "pointer ai", ToolCalls: []llms.ToolCall{{ID: "p"}}}, llms.AIChatMessage{Content: "pointer ai", ToolCalls: []llms.ToolCall{{ID: "p"}}}},
		{&llms.SystemChatMessage{Content: "pointer system"}, llms.SystemChatMessage{Content: "pointer system"}},
		{&llms.GenericChatMessage{Content: "pointer generic", Role: "r", Name: "n"}, llms.GenericChatMessage{Content: "pointer generic", Role: "r", Name: "n"}},
		{&llms.FunctionChatMessage{Content: "pointer function", Name: "f"}, llms.FunctionChatMessage{Content: "pointer function", Name: "f"}},
		{&llms.ToolChatMessage{Content: "pointer tool", ID: "t"}, llms.ToolChatMessage{Content: "pointer tool", ID: "t"}},
		{customMessage{llms.ChatMessageTypeHuman, "custom human", ""}, llms.HumanChatMessage{Content: "custom human"}},
		{customMessage{llms.ChatMessageTypeAI, "custom ai", ""}, llms.AIChatMessage{Content: "custom ai"}},
		{customMessage{llms.ChatMessageTypeSystem, "custom system", ""}, llms.SystemChatMessage{Content: "custom system"}},
		{customMessage{llms.ChatMessageTypeGeneric, "custom generic", "nm"}, llms.GenericChatMessage{Content: "custom generic", Name: "nm"}},
		{customMessage{llms.ChatMessageTypeFunction, "custom function", "fn"}, llms.FunctionChatMessage{Content: "custom function", Name: "fn"}},
		{customMessage{llms.ChatMessageTypeTool, "custom tool", "id7"}, llms.ToolChatMessage{Content: "custom tool", ID: "id7"}},
	}
	for _, s := range tricky {
		pairs = append(pairs, struct{ in, want llms.ChatMessage }{llms.ToolChatMessage{ID: s, Content: s}, nil})
	}
	for _, p := range pairs {
		in = append(in, p.in)
		if p.want == nil {
			p.want = p.in
		}
		want = append(want, p.want)
	}
	return in, want
}

// TestRoundTripEveryType: every message type and shape of package llms
// (and pointers to them, and a caller's own implementation) comes back from
// Messages exactly, through AddMessage and through SetMessages, and from a
// new History (and Store) on the same session; and each is stored as the
// documented agentstore role with its content as a JSON string.
func TestRoundTripEveryType(t *testing.T) {
	dialects(t, func(t *testing.T, st *agentstore.Store) {
		ctx := testContext(t)
		in, want := everyType()
		h := lc.NewHistory(st)
		for i, m := range in {
			if err := h.AddMessage(ctx, m); err != nil {
				t.Fatalf("AddMessage %d (%T): %v", i, m, err)
			}
		}
		requireMessages(t, ctx, h, want)
		requireMessages(t, ctx, lc.NewHistory(st, lc.WithSessionID(h.SessionID())), want)

		s, err := st.Sessions().Load(ctx, h.SessionID())
		if err != nil {
			t.Fatal(err)
		}
		wantRoles := map[llms.ChatMessageType]repo.Role{
			llms.ChatMessageTypeHuman: repo.RoleUser, llms.ChatMessageTypeAI: repo.RoleAssistant,
			llms.ChatMessageTypeSystem: repo.RoleSystem, llms.ChatMessageTypeTool: repo.RoleTool,
			llms.ChatMessageTypeFunction: repo.RoleTool,
		}
		genericRoles := map[string]repo.Role{"critic": repo.RoleUser, "Assistant": repo.RoleAssistant, "": repo.RoleUser, "r": repo.RoleUser}
		for i, m := range s.Messages {
			role, ok := wantRoles[want[i].GetType()]
			if g, isGeneric := want[i].(llms.GenericChatMessage); isGeneric {
				role, ok = genericRoles[g.Role]
			}
			if !ok || m.Role != role {
				t.Errorf("message %d (%T): stored role %q, want %q", i, want[i], m.Role, role)
			}
			var text string
			if err := json.Unmarshal(m.Content, &text); err != nil || text != want[i].GetContent() {
				t.Errorf("message %d: stored content %.80s is not the JSON string of the content (%v)", i, m.Content, err)
			}
			var md map[string]map[string]any
			if err := json.Unmarshal(m.Metadata, &md); err != nil || md[lc.MetadataKey]["type"] != string(want[i].GetType()) {
				t.Errorf("message %d: metadata %s lacks %s.type %q (%v)", i, m.Metadata, lc.MetadataKey, want[i].GetType(), err)
			}
		}

		h2 := lc.NewHistory(st)
		if err := h2.SetMessages(ctx, in); err != nil {
			t.Fatalf("SetMessages: %v", err)
		}
		requireMessages(t, ctx, h2, want)
		if err := h2.SetMessages(ctx, in[:3]); err != nil {
			t.Fatalf("SetMessages: %v", err)
		}
		requireMessages(t, ctx, h2, want[:3])
	})
}

// TestReopen: a history is found again by its session id from a new Store
// on the same database file.
func TestReopen(t *testing.T) {
	ctx := testContext(t)
	path := t.TempDir() + "/reopen.db"
	st := openMigrated(t, "sqlite:"+path)
	in, want := everyType()
	h := lc.NewHistory(st)
	if err := h.SetMessages(ctx, in); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st2 := openMigrated(t, "sqlite:"+path)
	requireMessages(t, ctx, lc.NewHistory(st2, lc.WithSessionID(h.SessionID())), want)
}

// TestRefusedInput: messages the history cannot store without loss are
// refused with ErrInvalidInput before anything is written; a SetMessages
// with one of them keeps the old conversation.
func TestRefusedInput(t *testing.T) {
	dialects(t, func(t *testing.T, st *agentstore.Store) {
		ctx := testContext(t)
		h := lc.NewHistory(st)
		kept := []llms.ChatMessage{llms.HumanChatMessage{Content: "kept"}, llms.AIChatMessage{Content: "also kept"}}
		if err := h.SetMessages(ctx, kept); err != nil {
			t.Fatal(err)
		}
		bad := []struct {
			name  string
			msg   llms.ChatMessage
			extra error
		}{
			{"nil", nil, nil},
			{"nil pointer", (*llms.AIChatMessage)(nil), nil},
			{"unknown type", customMessage{typ: "robot", content: "beep"}, llms.ErrUnexpectedChatMessageType},
			{"invalid UTF-8 content", llms.HumanChatMessage{Content: "a\xffb"}, nil},
			{"invalid UTF-8 tool call argument", llms.AIChatMessage{ToolCalls: []llms.ToolCall{{FunctionCall: &llms.FunctionCall{Arguments: "\xc3"}}}}, nil},
			{"invalid UTF-8 reasoning", llms.AIChatMessage{ReasoningContent: "\xff"}, nil},
			{"invalid UTF-8 generic role", llms.GenericChatMessage{Role: "\xfe"}, nil},
			{"invalid UTF-8 tool id", llms.ToolChatMessage{ID: "\xfe"}, nil},
			{"NUL in content", llms.HumanChatMessage{Content: "a\x00b"}, nil},
			{"NUL in function name", llms.FunctionChatMessage{Name: "f\x00", Content: "x"}, nil},
		}
		for _, b := range bad {
			err := h.AddMessage(ctx, b.msg)
			if !errors.Is(err, agentstore.ErrInvalidInput) || (b.extra != nil && !errors.Is(err, b.extra)) {
				t.Errorf("AddMessage %s: %v, want ErrInvalidInput", b.name, err)
			}
			err = h.SetMessages(ctx, []llms.ChatMessage{llms.HumanChatMessage{Content: "new"}, b.msg})
			if !errors.Is(err, agentstore.ErrInvalidInput) {
				t.Errorf("SetMessages with %s: %v, want ErrInvalidInput", b.name, err)
			}
			requireMessages(t, ctx, h, kept)
		}
		if err := h.AddUserMessage(ctx, "a\xffb"); !errors.Is(err, agentstore.ErrInvalidInput) {
			t.Errorf("AddUserMessage invalid UTF-8: %v, want ErrInvalidInput", err)
		}
		if err := h.AddAIMessage(ctx, "a\x00b"); !errors.Is(err, agentstore.ErrInvalidInput) {
			t.Errorf("AddAIMessage NUL: %v, want ErrInvalidInput", err)
		}
		requireMessages(t, ctx, h, kept)

		// Refused input never creates the session.
		fresh := lc.NewHistory(st)
		if err := fresh.AddMessage(ctx, nil); !errors.Is(err, agentstore.ErrInvalidInput) {
			t.Fatalf("AddMessage nil: %v", err)
		}
		if err := fresh.AddUserMessage(ctx, "\x00"); !errors.Is(err, agentstore.ErrInvalidInput) {
			t.Fatalf("AddUserMessage NUL: %v", err)
		}
		if _, err := st.Sessions().Load(ctx, fresh.SessionID()); !errors.Is(err, agentstore.ErrNotFound) {
			t.Fatalf("session after refused adds: %v, want ErrNotFound", err)
		}
	})
}

// TestClearDeletesSession: Clear deletes the session and everything under
// it (documented), SetMessages with no messages is Clear, and the next write
// creates the session again.
func TestClearDeletesSession(t *testing.T) {
	dialects(t, func(t *testing.T, st *agentstore.Store) {
		ctx := testContext(t)
		h := lc.NewHistory(st)
		if err := h.AddUserMessage(ctx, "one"); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Sessions().SetTodos(ctx, h.SessionID(), []repo.TodoItem{{Content: "t", ActiveForm: "t", Status: repo.TodoPending}}); err != nil {
			t.Fatal(err)
		}
		if err := h.Clear(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Sessions().Load(ctx, h.SessionID()); !errors.Is(err, agentstore.ErrNotFound) {
			t.Fatalf("Load after Clear: %v, want ErrNotFound", err)
		}
		if err := h.AddAIMessage(ctx, "two"); err != nil {
			t.Fatal(err)
		}
		s, err := st.Sessions().Load(ctx, h.SessionID())
		if err != nil {
			t.Fatal(err)
		}
		if len(s.Messages) != 1 || len(s.Todos) != 0 || s.Messages[0].Seq != 1 {
			t.Fatalf("after Clear and add: %d messages (first seq %d), %d todos; want 1 message at seq 1, no todos",
				len(s.Messages), s.Messages[0].Seq, len(s.Todos))
		}
		if err := h.SetMessages(ctx, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Sessions().Load(ctx, h.SessionID()); !errors.Is(err, agentstore.ErrNotFound) {
			t.Fatalf("Load after SetMessages(nil): %v, want ErrNotFound", err)
		}
		requireMessages(t, ctx, h, nil)
	})
}

// TestForeignMessages: messages another agentstore client appended to the
// session (content blocks, no langchaingo metadata) are read by role with
// the text of their text blocks, and the history appends after them.
func TestForeignMessages(t *testing.T) {
	dialects(t, func(t *testing.T, st *agentstore.Store) {
		ctx := testContext(t)
		s := repo.NewSession()
		if err := st.Sessions().Save(ctx, s); err != nil {
			t.Fatal(err)
		}
		_, err := st.Sessions().AppendMessages(ctx, s.ID,
			repo.Message{Role: repo.RoleSystem, Content: json.RawMessage(`"system prompt"`)},
			repo.Message{Role: repo.RoleUser, Content: json.RawMessage(`[{"type":"text","text":"look at "},{"type":"image","source":{"data":"..."}},{"type":"text","text":"this"}]`),
				Metadata: json.RawMessage(`{"client":"other"}`)},
			repo.Message{Role: repo.RoleAssistant, Content: json.RawMessage(`[{"type":"text","text":"ok"},{"type":"tool_use","id":"t1","name":"x","input":{}}]`),
				Metadata: json.RawMessage(`["not","an","object"]`)},
			repo.Message{Role: repo.RoleTool, Content: json.RawMessage(`[]`)},
		)
		if err != nil {
			t.Fatal(err)
		}
		h := lc.NewHistory(st, lc.WithSessionID(s.ID))
		if err := h.AddUserMessage(ctx, "mine"); err != nil {
			t.Fatal(err)
		}
		requireMessages(t, ctx, h, []llms.ChatMessage{
			llms.SystemChatMessage{Content: "system prompt"},
			llms.HumanChatMessage{Content: "look at this"},
			llms.AIChatMessage{Content: "ok"},
			llms.ToolChatMessage{Content: ""},
			llms.HumanChatMessage{Content: "mine"},
		})
	})
}

// TestUnreadableMetadata: a message whose langchaingo metadata is not what
// the history writes is reported as ErrCorruptRow naming the message,
// never skipped.
func TestUnreadableMetadata(t *testing.T) {
	for _, md := range []string{`{"langchaingo":{"type":"robot"}}`, `{"langchaingo":5}`, `{"langchaingo":{}}`, `{"langchaingo":{"type":"ai","tool_calls":"x"}}`} {
		t.Run(md, func(t *testing.T) {
			ctx := testContext(t)
			st := newSQLite(t)
			h := lc.NewHistory(st)
			if err := h.AddUserMessage(ctx, "fine"); err != nil {
				t.Fatal(err)
			}
			_, err := st.Sessions().AppendMessages(ctx, h.SessionID(),
				repo.Message{ID: "odd-one", Role: repo.RoleAssistant, Content: json.RawMessage(`"x"`), Metadata: json.RawMessage(md)})
			if err != nil {
				t.Fatal(err)
			}
			ms, err := h.Messages(ctx)
			if !errors.Is(err, agentstore.ErrCorruptRow) || !strings.Contains(err.Error(), `"odd-one"`) || ms != nil {
				t.Fatalf("Messages: %v, %v; want ErrCorruptRow naming odd-one and no messages", ms, err)
			}
		})
	}
}

// TestTenant: a tenant's history creates its session with the tenant; the
// same session id seen from another tenant is empty, its Clear deletes
// nothing, and its writes are ErrDuplicate; an invalid tenant is
// ErrInvalidInput.
func TestTenant(t *testing.T) {
	dialects(t, func(t *testing.T, st *agentstore.Store) {
		ctx := testContext(t)
		acme := lc.NewHistory(st, lc.WithTenant("acme"))
		want := []llms.ChatMessage{llms.HumanChatMessage{Content: "acme's"}}
		if err := acme.SetMessages(ctx, want); err != nil {
			t.Fatal(err)
		}
		s, err := st.ForTenant("acme").Sessions().Load(ctx, acme.SessionID())
		if err != nil || s.TenantID != "acme" {
			t.Fatalf("session in tenant acme: %v (tenant %q)", err, s.TenantID)
		}
		other := lc.NewHistory(st, lc.WithTenant("other"), lc.WithSessionID(acme.SessionID()))
		requireMessages(t, ctx, other, nil)
		if err := other.Clear(ctx); err != nil {
			t.Fatalf("other tenant's Clear: %v", err)
		}
		if err := other.AddUserMessage(ctx, "intruder"); !errors.Is(err, agentstore.ErrDuplicate) {
			t.Fatalf("other tenant's AddUserMessage: %v, want ErrDuplicate", err)
		}
		if err := other.SetMessages(ctx, []llms.ChatMessage{llms.AIChatMessage{Content: "intruder"}}); !errors.Is(err, agentstore.ErrDuplicate) {
			t.Fatalf("other tenant's SetMessages: %v, want ErrDuplicate", err)
		}
		requireMessages(t, ctx, acme, want)
		requireMessages(t, ctx, lc.NewHistory(st, lc.WithSessionID(acme.SessionID())), want) // the unscoped store sees it

		bad := lc.NewHistory(st, lc.WithTenant(""))
		if err := bad.AddUserMessage(ctx, "x"); !errors.Is(err, agentstore.ErrInvalidInput) {
			t.Fatalf("empty tenant AddUserMessage: %v, want ErrInvalidInput", err)
		}
		if _, err := bad.Messages(ctx); !errors.Is(err, agentstore.ErrInvalidInput) {
			t.Fatalf("empty tenant Messages: %v, want ErrInvalidInput", err)
		}
	})
}

// TestSessionID: without WithSessionID every history gets a new version 7
// UUID; WithSessionID is used as given.
func TestSessionID(t *testing.T) {
	st := newSQLite(t)
	a, b := lc.NewHistory(st), lc.NewHistory(st)
	if a.SessionID() == b.SessionID() || a.SessionID().Version() != 7 {
		t.Fatalf("session ids %s and %s: want two distinct version 7 UUIDs", a.SessionID(), b.SessionID())
	}
	id := uuid.New()
	if got := lc.NewHistory(st, lc.WithSessionID(id)).SessionID(); got != id {
		t.Fatalf("WithSessionID(%s): SessionID %s", id, got)
	}
}

// TestConcurrentWriters: writers racing to create the session each land
// every message in its own order (run with -race); SetMessages racing with
// readers is atomic: a reader sees one whole conversation, never a mix or
// an empty one.
func TestConcurrentWriters(t *testing.T) {
	dialects(t, func(t *testing.T, st *agentstore.Store) {
		ctx := testContext(t)
		id := uuid.New()
		const writers, each = 6, 8
		var wg sync.WaitGroup
		errs := make(chan error, writers*each)
		for w := range writers {
			wg.Go(func() {
				h := lc.NewHistory(st, lc.WithSessionID(id))
				for i := range each {
					if err := h.AddUserMessage(ctx, fmt.Sprintf("w%d-%d", w, i)); err != nil {
						errs <- err
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("concurrent AddUserMessage: %v", err)
		}
		ms, err := lc.NewHistory(st, lc.WithSessionID(id)).Messages(ctx)
		if err != nil || len(ms) != writers*each {
			t.Fatalf("Messages: %d messages, %v; want %d", len(ms), err, writers*each)
		}
		next := make([]int, writers)
		for _, m := range ms {
			var w, i int
			if _, err := fmt.Sscanf(m.GetContent(), "w%d-%d", &w, &i); err != nil || i != next[w] {
				t.Fatalf("message %q out of its writer's order (want w%d-%d)", m.GetContent(), w, next[w])
			}
			next[w]++
		}

		conv := func(tag string) []llms.ChatMessage {
			var out []llms.ChatMessage
			for i := range 5 {
				out = append(out, llms.HumanChatMessage{Content: fmt.Sprintf("%s%d", tag, i)}, llms.AIChatMessage{Content: tag})
			}
			return out
		}
		x, y := conv("x"), conv("y")
		h := lc.NewHistory(st)
		if err := h.SetMessages(ctx, x); err != nil {
			t.Fatal(err)
		}
		var rw sync.WaitGroup
		stop := make(chan struct{})
		bad := make(chan string, 4)
		for range 2 {
			rw.Go(func() {
				r := lc.NewHistory(st, lc.WithSessionID(h.SessionID()))
				for {
					select {
					case <-stop:
						return
					default:
					}
					ms, err := r.Messages(ctx)
					if err != nil {
						bad <- err.Error()
						return
					}
					if !reflect.DeepEqual(ms, x) && !reflect.DeepEqual(ms, y) {
						bad <- fmt.Sprintf("reader saw %d messages:\n%s", len(ms), show(ms))
						return
					}
				}
			})
		}
		for i := range 15 {
			next := x
			if i%2 == 0 {
				next = y
			}
			if err := h.SetMessages(ctx, next); err != nil {
				t.Fatalf("SetMessages %d: %v", i, err)
			}
		}
		close(stop)
		rw.Wait()
		close(bad)
		for b := range bad {
			t.Fatal(b)
		}
	})
}

// requireMessages fails t unless h's Messages returns want exactly.
func requireMessages(t *testing.T, ctx context.Context, h *lc.History, want []llms.ChatMessage) {
	t.Helper()
	got, err := h.Messages(ctx)
	if err != nil {
		t.Fatalf("Messages: %v", err)
	}
	if !reflect.DeepEqual(got, want) {
		n := max(len(got), len(want))
		for i := range n {
			var g, w llms.ChatMessage
			if i < len(got) {
				g = got[i]
			}
			if i < len(want) {
				w = want[i]
			}
			if !reflect.DeepEqual(g, w) {
				t.Fatalf("Messages: %d messages, want %d; first difference at %d:\n got  %#v\n want %#v", len(got), len(want), i, g, w)
			}
		}
		t.Fatalf("Messages: %#v, want %#v", got, want)
	}
}
