package agentstore_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// The fuzz targets below run their seed corpus in every `go test`; run one
// for real with e.g. `go test -run '^$' -fuzz FuzzEventDecode -fuzztime 60s .`

// FuzzEventDecode: decoding any bytes as a history event never panics, and
// whatever decodes re-encodes to JSON that decodes to the same encoding
// (the stored form is stable: a read-modify-write cannot drift).
func FuzzEventDecode(f *testing.F) {
	for _, tail := range eventLiterals {
		f.Add([]byte(evHead + tail))
	}
	for _, s := range []string{``, `{}`, `null`, `[]`, `{"type":"ActivityScheduled"}`, `{"event_id":-1,"type":"OrchestrationCompleted","output":1}`,
		evHead + `"type":"Unknown"}`, evHead + `"type":"OrchestrationFailed","details":{"Application":{"kind":{"Cancelled":{"reason":"x"}},"message":"m"}}}`,
		evHead + `"type":"ActivityScheduled","name":"a\u0000","input":"\ud800"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var e duroxide.Event
		if json.Unmarshal(data, &e) != nil {
			return
		}
		b1, err := json.Marshal(e)
		if err != nil {
			t.Fatalf("decoded event does not encode: %v (input %q)", err, data)
		}
		var e2 duroxide.Event
		if err := json.Unmarshal(b1, &e2); err != nil {
			t.Fatalf("re-encoded event does not decode: %v\n%s", err, b1)
		}
		b2, err := json.Marshal(e2)
		if err != nil || !bytes.Equal(b1, b2) {
			t.Fatalf("event encoding not stable (%v):\n%s\n%s", err, b1, b2)
		}
	})
}

// FuzzWorkItemDecode: the same for worker/orchestrator queue items.
func FuzzWorkItemDecode(f *testing.F) {
	for _, s := range workItemLiterals {
		f.Add([]byte(s))
	}
	for _, s := range []string{``, `{}`, `null`, `{"A":1,"B":2}`, `{"ActivityExecute":null}`, `{"ActivityExecute":[]}`,
		`{"StartOrchestration":{"instance":"","execution_id":-1}}`, `{"QueueMessage":{}}`, `"ActivityExecute"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		w, err := duroxide.UnmarshalWorkItem(data)
		if err != nil {
			return
		}
		if w == nil {
			t.Fatalf("UnmarshalWorkItem(%q) = nil, nil", data)
		}
		b1, err := json.Marshal(w)
		if err != nil {
			t.Fatalf("decoded %s does not encode: %v", w.WorkItemType(), err)
		}
		w2, err := duroxide.UnmarshalWorkItem(b1)
		if err != nil {
			t.Fatalf("re-encoded %s does not decode: %v\n%s", w.WorkItemType(), err, b1)
		}
		b2, err := json.Marshal(w2)
		if err != nil || !bytes.Equal(b1, b2) || w2.WorkItemType() != w.WorkItemType() || w2.RoutingInstance() != w.RoutingInstance() {
			t.Fatalf("work item encoding not stable (%v):\n%s\n%s", err, b1, b2)
		}
	})
}

// FuzzMessageContent: arbitrary bytes as message content (and usage) on a
// real SQLite store. AppendMessages either refuses the content with
// ErrInvalidInput or stores it so that Load returns exactly the same
// bytes. Bytes written straight into the content and usage columns (a row
// damaged outside the store) load either normally or as a CorruptRowError
// naming the row — never a panic, never another error.
func FuzzMessageContent(f *testing.F) {
	for _, s := range []string{`"hi"`, `{"type":"text","text":"x"}`, `[{"type":"tool_use","id":"t","input":{}}]`, ``, `{`, `nul\x00`,
		`"\u0000"`, "\"\xff\"", `{"a":1,"a":2}`, ` {"x" : [1, 2.50, 1e400]} `, `"\ud800"`, `null`, strings.Repeat("[", 2000)} {
		f.Add([]byte(s))
	}
	ctx := context.Background()
	st, err := agentstore.Open(ctx, "sqlite:"+filepath.Join(f.TempDir(), "fuzz.db"))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = st.Close() })
	if err := st.Migrate(ctx); err != nil {
		f.Fatal(err)
	}
	s := repo.NewSession()
	if err := st.Sessions().Save(ctx, s); err != nil {
		f.Fatal(err)
	}
	mt := `"` + st.TablePrefix() + models.TableMessages + `"`
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := st.Sessions().AppendMessages(ctx, s.ID, repo.Message{Role: repo.RoleUser, Content: data})
		switch {
		case errors.Is(err, agentstore.ErrInvalidInput):
		case err != nil:
			t.Fatalf("append %q: %v (want success or ErrInvalidInput)", data, err)
		default:
			seq := got[0].Seq
			back, err := st.Sessions().Load(ctx, s.ID, repo.LoadOptions{AfterSeq: seq - 1, Limit: 1})
			if err != nil {
				t.Fatalf("load after append of %q: %v", data, err)
			}
			if !bytes.Equal(back.Messages[0].Content, data) {
				t.Fatalf("content %q read back as %q", data, back.Messages[0].Content)
			}
		}
		// Damage a row directly: content, then usage.
		if _, err := st.Sessions().AppendMessages(ctx, s.ID, repo.Message{Role: repo.RoleUser, Content: []byte(`"ok"`)}); err != nil {
			t.Fatal(err)
		}
		head, err := st.Sessions().Load(ctx, s.ID, repo.LoadOptions{LastN: 1})
		if err != nil {
			t.Fatal(err)
		}
		seq := head.Messages[0].Seq
		for _, col := range []string{"content", "usage"} {
			if err := st.DB(ctx).Exec(`UPDATE `+mt+` SET `+col+` = ? WHERE session_id = ? AND seq = ?`, string(data), s.ID, seq).Error; err != nil {
				t.Fatal(err)
			}
			back, err := st.Sessions().Load(ctx, s.ID, repo.LoadOptions{AfterSeq: seq - 1})
			var ce *agentstore.CorruptRowError
			switch {
			case err == nil:
				if col == "content" && !bytes.Equal(back.Messages[0].Content, data) {
					t.Fatalf("damaged content %q loaded as %q", data, back.Messages[0].Content)
				}
			case errors.As(err, &ce):
				if ce.Table != models.TableMessages || ce.RowID != s.ID.String()+"/"+itoa(seq) || ce.Column != col {
					t.Fatalf("corrupt %s %q reported as %s/%s/%s", col, data, ce.Table, ce.RowID, ce.Column)
				}
			default:
				t.Fatalf("load of damaged %s %q: %v (want success or CorruptRowError)", col, data, err)
			}
			if err := st.DB(ctx).Exec(`UPDATE `+mt+` SET content = '"ok"', usage = NULL WHERE session_id = ? AND seq = ?`, s.ID, seq).Error; err != nil {
				t.Fatal(err)
			}
		}
	})
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }

// FuzzDSNErrorsHidePassword: whatever the password, in whichever DSN form,
// neither ParseDSN's error nor RedactDSN's result contains it.
func FuzzDSNErrorsHidePassword(f *testing.F) {
	for _, s := range []string{"s3cret-pw", "p@ss:w/rd?x=1#y", "with space", "%zz%41", "\x00\xff", "password=inner"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, pw string) {
		if len(pw) < 6 || strings.ContainsAny(pw, "\x00") || strings.Contains(pw, "x") || strings.TrimSpace(pw) != pw {
			// "x" would match the redaction mask; libpq trims surrounding spaces.
			return // too short to be told apart from the rest of the DSN
		}
		for _, dsn := range []string{
			"postgres://u:" + pw + "@h:5432/d",
			"postgres://u:" + url.QueryEscape(pw) + "@h:5432/d",
			"postgres://u@h/d?password=" + url.QueryEscape(pw),
			"host=h user=u password=" + pw,
			"mysql://u:" + pw + "@h/d",
		} {
			if strings.Count(dsn, pw) != 1 {
				continue // the password overlaps the rest of the DSN
			}
			if _, _, err := agentstore.ParseDSN(dsn); err != nil && strings.Contains(err.Error(), pw) {
				t.Fatalf("ParseDSN error leaks the password %q: %v", pw, err)
			}
			if red := agentstore.RedactDSN(dsn); strings.Contains(red, pw) {
				t.Fatalf("RedactDSN(%q) = %q leaks the password", dsn, red)
			}
		}
	})
}
