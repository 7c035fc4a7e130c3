package agentstore_test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/agentstore/agentstore/repo"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// bigText returns n bytes of varied printable ASCII and multi-byte UTF-8
// text (deterministic), safe inside a JSON string.
func bigText(n int) string {
	r := rand.New(rand.NewPCG(1, uint64(n)))
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,;:-_/()[]{}'"
	var b bytes.Buffer
	b.Grow(n)
	for b.Len() < n-4 {
		if r.IntN(64) == 0 {
			b.WriteString("é") // 2 bytes
			continue
		}
		b.WriteByte(alphabet[r.IntN(len(alphabet))])
	}
	for b.Len() < n {
		b.WriteByte('z')
	}
	return b.String()
}

// TestHostilePayload5MB: a 5 MB message (Save and AppendMessages) and a
// 5 MB activity input (worker queue, and inside the history and worker item
// of an orchestration ack) round-trip byte for byte on both dialects.
func TestHostilePayload5MB(t *testing.T) {
	forEachDialect(t, func(t *testing.T, h *harness) {
		const size = 5 << 20
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		st := h.New(t)
		text := bigText(size)
		content := []byte(`{"type":"text","text":"` + text + `"}`)

		s := repo.NewSession()
		s.AddMessage(repo.Message{ID: "big-saved", Role: repo.RoleUser, Content: content})
		if err := st.Sessions().Save(ctx, s); err != nil {
			t.Fatalf("save 5 MB message: %v", err)
		}
		if _, err := st.Sessions().AppendMessages(ctx, s.ID, repo.Message{ID: "big-appended", Role: repo.RoleAssistant, Content: content}); err != nil {
			t.Fatalf("append 5 MB message: %v", err)
		}
		got, err := st.Sessions().Load(ctx, s.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Messages) != 2 {
			t.Fatalf("%d messages, want 2", len(got.Messages))
		}
		for _, m := range got.Messages {
			if !bytes.Equal(m.Content, content) {
				t.Fatalf("message %s: %d bytes read back, want the %d bytes written", m.ID, len(m.Content), len(content))
			}
		}

		p := st.Provider()
		if err := p.EnqueueForWorker(ctx, &duroxide.ActivityExecute{Instance: "big", ExecutionID: 1, ID: 1, Name: "act", Input: text}); err != nil {
			t.Fatalf("enqueue 5 MB activity: %v", err)
		}
		l, err := p.FetchWorkItem(ctx, time.Minute, 0, nil, duroxide.TagFilter{})
		if err != nil || l == nil {
			t.Fatalf("fetch 5 MB activity: %v %v", l, err)
		}
		if in := l.Item.(*duroxide.ActivityExecute).Input; in != text {
			t.Fatalf("activity input: %d bytes read back, want %d", len(in), len(text))
		}
		if err := p.AckWorkItem(ctx, l.LockToken, nil); err != nil {
			t.Fatal(err)
		}

		// through an orchestration turn: the scheduled event and the worker item
		if err := p.EnqueueForOrchestrator(ctx, startItem("big", nil), 0); err != nil {
			t.Fatal(err)
		}
		it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		if err != nil || it == nil {
			t.Fatalf("fetch: %v %v", it, err)
		}
		ack := duroxide.OrchestrationAck{ExecutionID: 1,
			HistoryDelta: []duroxide.Event{startedEv("big", 1, 1, nil), ev("big", 1, 2, &duroxide.ActivityScheduledEvent{Name: "act", Input: text})},
			WorkerItems:  []duroxide.WorkItem{&duroxide.ActivityExecute{Instance: "big", ExecutionID: 1, ID: 2, Name: "act", Input: text}},
			Metadata:     runningMeta(nil)}
		if err := p.AckOrchestrationItem(ctx, it.LockToken, ack); err != nil {
			t.Fatalf("ack with 5 MB input: %v", err)
		}
		hist, err := p.Read(ctx, "big")
		if err != nil {
			t.Fatal(err)
		}
		if in := hist[1].Kind.(*duroxide.ActivityScheduledEvent).Input; in != text {
			t.Fatalf("scheduled event input: %d bytes, want %d", len(in), len(text))
		}
		l, err = p.FetchWorkItem(ctx, time.Minute, 0, nil, duroxide.TagFilter{})
		if err != nil || l == nil {
			t.Fatalf("fetch: %v %v", l, err)
		}
		if in := l.Item.(*duroxide.ActivityExecute).Input; in != text {
			t.Fatalf("scheduled activity input: %d bytes, want %d", len(in), len(text))
		}
		relLogf(t, "payloads: 5 MB message (Save + AppendMessages, %d bytes JSON) and 5 MB activity input (worker queue, history event, ack worker item) round-tripped byte for byte", len(content))
	})
}
