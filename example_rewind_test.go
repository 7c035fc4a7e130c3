package agentstore_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestExampleRewindRuns builds and runs examples/rewind (on SQLite) and
// checks what it prints: the regenerated and the edited replies are
// branches next to the first one, which it goes back to with nothing lost
// and the state set at creation kept.
func TestExampleRewindRuns(t *testing.T) {
	t.Parallel()
	bin := testBinary(t, "rewind")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Dir = t.TempDir()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("examples/rewind: %v\n%s", err, out)
	}
	for _, want := range []string{
		"rewound to u2 (version 3)\n",
		"3 branches:\n",
		"leaf a2: 4 messages from u1, forks off the current branch after a1\n",
		"leaf a2-retry: 4 messages from u1, forks off the current branch after a1\n",
		"leaf a2-edit: 4 messages from u1, the current branch\n",
		"    u2-edit   user      A line about the mountains.\n",
		"back on the first answer: current branch u1 > a1 > u2 > a2; 7 messages stored; state active; " +
			`config {"model":"small","system":"You are a poet."}` + "\n",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("examples/rewind did not print %q:\n%s", want, out)
		}
	}
}
