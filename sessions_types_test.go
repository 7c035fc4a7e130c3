package agentstore_test

import (
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/repo"
)

// The enum parsers are pure functions: one table, no database.
func TestSessionsParseEnumsLenient(t *testing.T) {
	t.Parallel()
	ok := []struct {
		parse func(string) (string, error)
		in    string
		want  string
	}{
		{func(s string) (string, error) { v, err := repo.ParseSessionState(s); return string(v), err }, "waitingfortools", "waiting_for_tools"},
		{func(s string) (string, error) { v, err := repo.ParseSessionState(s); return string(v), err }, "Canceled", "cancelled"},
		{func(s string) (string, error) { v, err := repo.ParsePlanStatus(s); return string(v), err }, "in_progress", "executing"},
		{func(s string) (string, error) { v, err := repo.ParsePlanStatus(s); return string(v), err }, "inprogress", "executing"},
		{func(s string) (string, error) { v, err := repo.ParsePlanStatus(s); return string(v), err }, "canceled", "cancelled"},
		{func(s string) (string, error) { v, err := repo.ParseTodoStatus(s); return string(v), err }, "done", "completed"},
		{func(s string) (string, error) { v, err := repo.ParseTodoStatus(s); return string(v), err }, "inprogress", "in_progress"},
		{func(s string) (string, error) { v, err := repo.ParseQueueStatus(s); return string(v), err }, "canceled", "cancelled"},
		{func(s string) (string, error) { v, err := repo.ParseCompactTrigger(s); return string(v), err }, "automatic", "auto"},
		{func(s string) (string, error) { v, err := repo.ParseRole(s); return string(v), err }, "System", "system"},
		{func(s string) (string, error) { v, err := repo.ParseRole(s); return string(v), err }, "TOOL", "tool"},
		{func(s string) (string, error) { v, err := repo.ParseRole(s); return string(v), err }, " Assistant ", "assistant"},
		{func(s string) (string, error) { v, err := repo.ParseSessionKind(s); return string(v), err }, "SUBAGENT", "subagent"},
	}
	for _, c := range ok {
		got, err := c.parse(c.in)
		if err != nil || got != c.want {
			t.Errorf("parse %q = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	bad := []func() error{
		func() error { _, err := repo.ParseSessionState("paused"); return err },
		func() error { _, err := repo.ParsePlanStatus(""); return err },
		func() error { _, err := repo.ParseTodoStatus("blocked"); return err },
		func() error { _, err := repo.ParseQueueStatus("dead"); return err },
		func() error { _, err := repo.ParseCompactTrigger("sometimes"); return err },
		func() error { _, err := repo.ParseRole("developer"); return err },
		func() error { _, err := repo.ParseSessionKind("robot"); return err },
	}
	for i, f := range bad {
		if err := f(); !errors.Is(err, agentstore.ErrInvalidInput) {
			t.Errorf("bad case %d: %v, want ErrInvalidInput", i, err)
		}
	}
}

func TestSessionsChangesTracking(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := repo.NewSession()
	s.Todos = []repo.TodoItem{{ID: uuid.New(), Content: "a", CreatedAt: now}}
	s.CompactHistory = []repo.CompactRecord{{ID: uuid.New(), Summary: "c"}}
	s.EnterPlanMode("p", "x", now)
	if ch := s.Changes(); !ch.Todos || !ch.Plan || len(ch.NewCompacts) != 1 {
		t.Fatalf("never stored: %+v", ch)
	}
	s.MarkClean()
	if ch := s.Changes(); ch.Todos || ch.Plan || len(ch.NewCompacts) != 0 {
		t.Fatalf("clean: %+v", ch)
	}
	s.Todos[0].Start(now)
	s.CompactHistory = append(s.CompactHistory, repo.CompactRecord{Summary: "d"})
	s.CurrentPlan.Approve(now)
	if ch := s.Changes(); !ch.Todos || !ch.Plan || len(ch.NewCompacts) != 1 || ch.NewCompacts[0].Summary != "d" {
		t.Fatalf("after edits: %+v", ch)
	}
}
