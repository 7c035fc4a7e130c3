package agentstore_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestExampleFeedRuns builds and runs examples/feed (on SQLite: a writer
// Store and a watching Store on one file) and checks that the watcher
// printed every change of the session, in commit order, each once, and
// stopped at the deletion.
func TestExampleFeedRuns(t *testing.T) {
	t.Parallel()
	bin := testBinary(t, "feed")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Dir = t.TempDir()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("examples/feed: %v\n%s", err, out)
	}
	var kinds []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] != "resume" {
			kinds = append(kinds, line)
		}
	}
	want := []string{
		"session.created  v1",
		"session.updated  v2: messages 1..2 appended",
		"todos.changed    v3",
		"queue.item       queue item * is pending",
		"queue.item       queue item * is processing",
		"queue.item       queue item * is completed",
		"session.updated  v4: messages 3..3 appended",
		"session.deleted  v4",
	}
	if len(kinds) != len(want) {
		t.Fatalf("examples/feed printed %d changes, want %d:\n%s", len(kinds), len(want), out)
	}
	for i, w := range want {
		pre, post, _ := strings.Cut(w, "*")
		if !strings.HasPrefix(kinds[i], pre) || !strings.HasSuffix(kinds[i], post) {
			t.Errorf("change %d: %q, want %q", i, kinds[i], w)
		}
	}
	if !strings.Contains(string(out), "resume with --after c1.0.8") {
		t.Errorf("no resume cursor printed:\n%s", out)
	}
}
