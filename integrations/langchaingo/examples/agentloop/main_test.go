package main

import (
	"bytes"
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestRun runs the agent loop twice on one SQLite file, the second run
// going on with the first run's session, and checks the answers and the
// stored transcript (tool calls and results included).
func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "agentloop.db")

	var first bytes.Buffer
	if err := run(ctx, &first, dsn, "", "What's the weather in Paris?"); err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`session ([0-9a-f-]{36}):`).FindStringSubmatch(first.String())
	if m == nil {
		t.Fatalf("no session id in the output:\n%s", first.String())
	}
	var second bytes.Buffer
	if err := run(ctx, &second, dsn, m[1], "And in Oslo?"); err != nil {
		t.Fatal(err)
	}
	want := `assistant: In Oslo it is 4°C and snowing.

session ` + m[1] + `:
  system You answer weather questions with the weather tool.
  human  What's the weather in Paris?
  ai     calls call_2 weather({"city":"Paris"})
  tool   call_2 -> 18°C and sunny
  ai     In Paris it is 18°C and sunny.
  human  And in Oslo?
  ai     calls call_6 weather({"city":"Oslo"})
  tool   call_6 -> 4°C and snowing
  ai     In Oslo it is 4°C and snowing.
`
	if got := second.String(); got != want {
		t.Fatalf("second run printed\n%s\nwant\n%s", got, want)
	}
	if !strings.HasPrefix(first.String(), "assistant: In Paris it is 18°C and sunny.\n") {
		t.Fatalf("first run printed\n%s", first.String())
	}
}
