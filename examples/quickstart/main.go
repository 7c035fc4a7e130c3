// Command quickstart opens an embedded SQLite store (or PostgreSQL with
// --dsn), migrates it (printing each migration it applied) and verifies the
// schema, then walks through the agent-session store:
// it creates a session, appends messages, forks it, sets todos and a plan,
// enqueues and dequeues work, reloads the session, and prints what it did.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/repo"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

func run() error {
	dir, err := os.MkdirTemp("", "agentstore-quickstart-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	dsn := flag.String("dsn", "sqlite:"+filepath.Join(dir, "agent.db"), "agentstore DSN (sqlite:PATH or postgres://...)")
	flag.Parse()

	ctx := context.Background()
	st, err := agentstore.Open(ctx, *dsn)
	if err != nil {
		return err
	}
	defer st.Close()
	fmt.Printf("opened %s store at %s\n", st.Dialect(), agentstore.RedactDSN(*dsn))
	before, err := st.MigrationStatus(ctx)
	if err != nil {
		return err
	}
	if err := st.Migrate(ctx); err != nil {
		return err
	}
	after, err := st.MigrationStatus(ctx)
	if err != nil {
		return err
	}
	for _, m := range after.Applied[len(before.Applied):] {
		fmt.Printf("applied migration V%d %s\n", m.Version, m.Description)
	}
	fmt.Printf("migrated from schema version %d to %d (tables prefixed %q)\n", before.Current, after.Current, st.TablePrefix())
	rep, err := st.Verify(ctx)
	if err != nil {
		return err
	}
	if !rep.OK() {
		return fmt.Errorf("schema verification found %d issue(s):\n%s", len(rep.Issues), rep)
	}
	fmt.Printf("verified %d tables: schema matches the models (version %d)\n", rep.Tables, rep.DatabaseVersion)
	return sessionsTour(ctx, st)
}

// text returns a content array holding one text block.
func text(s string) json.RawMessage {
	b, _ := json.Marshal([]map[string]string{{"type": "text", "text": s}})
	return b
}

func sessionsTour(ctx context.Context, st *agentstore.Store) error {
	sessions, queue := st.ForTenant("quickstart").Sessions(), st.ForTenant("quickstart").SessionQueue()

	// 1. Create a session with a first user message.
	s := repo.NewSession()
	s.State = repo.StateActive
	s.Config = json.RawMessage(`{"model":"claude-sonnet-4-5","max_tokens":16384}`)
	s.AddMessage(repo.Message{ID: "u1", Role: repo.RoleUser, Content: text("Refactor the parser, please.")})
	if err := sessions.Save(ctx, s); err != nil {
		return fmt.Errorf("save session: %w", err)
	}
	fmt.Printf("created session %s (tenant %s, version %d)\n", s.ID, s.TenantID, s.Version)

	// 2. Append messages: only the new rows are written.
	appended, err := sessions.AppendMessages(ctx, s.ID,
		repo.Message{ID: "a1", Role: repo.RoleAssistant, Content: text("Sure. Here is a plan."),
			Usage: &repo.TokenUsage{InputTokens: 120, OutputTokens: 15, CacheReadInputTokens: 100}},
		repo.Message{ID: "u2", Role: repo.RoleUser, Content: text("Go ahead.")})
	if err != nil {
		return fmt.Errorf("append: %w", err)
	}
	for _, m := range appended {
		fmt.Printf("appended message %s as seq %d (parent %s)\n", m.ID, m.Seq, *m.ParentID)
	}

	// 3. Fork at the assistant's answer: a child session with a copy of that branch.
	fork, err := sessions.Fork(ctx, s.ID, "a1")
	if err != nil {
		return fmt.Errorf("fork: %w", err)
	}
	fmt.Printf("forked session %s at a1: %d messages, parent %s\n", fork.ID, len(fork.Messages), *fork.ParentID)

	// 4. Todos and a plan (reload first: the appends bumped the version).
	s, err = sessions.Load(ctx, s.ID)
	if err != nil {
		return fmt.Errorf("load: %w", err)
	}
	now := time.Now()
	s.EnterPlanMode("parser refactor", "1. split lexer\n2. add tests", now)
	s.CurrentPlan.Approve(now)
	s.Todos = []repo.TodoItem{
		{Content: "Split the lexer", ActiveForm: "Splitting the lexer", Status: repo.TodoInProgress},
		{Content: "Add tests", ActiveForm: "Adding tests"},
	}
	if err := sessions.Save(ctx, s); err != nil {
		return fmt.Errorf("save todos and plan: %w", err)
	}
	fmt.Printf("set %d todos and plan %q (%s), version %d\n", len(s.Todos), *s.CurrentPlan.Name, s.CurrentPlan.Status, s.Version)

	// 5. Queue: enqueue two inputs, dequeue the most urgent under a lease, complete it.
	if _, err := queue.Enqueue(ctx, s.ID, "run the test suite", 0); err != nil {
		return fmt.Errorf("enqueue: %w", err)
	}
	if _, err := queue.Enqueue(ctx, s.ID, "user interrupt: stop", 10); err != nil {
		return fmt.Errorf("enqueue: %w", err)
	}
	item, err := queue.Dequeue(ctx, s.ID, repo.DequeueParams{Owner: "quickstart", Lease: time.Minute})
	if err != nil {
		return fmt.Errorf("dequeue: %w", err)
	}
	fmt.Printf("dequeued %q (priority %d, attempt %d, leased until %s)\n", item.Content, item.Priority, item.Attempts,
		item.LeasedUntil.Format(time.RFC3339))
	if err := queue.Complete(ctx, item.Lease()); err != nil {
		return fmt.Errorf("complete: %w", err)
	}
	pending, err := queue.PendingQueue(ctx, s.ID)
	if err != nil {
		return fmt.Errorf("pending: %w", err)
	}
	fmt.Printf("completed it; %d item(s) still pending\n", len(pending))

	// 6. Reload and print.
	got, err := sessions.Load(ctx, s.ID)
	if err != nil {
		return fmt.Errorf("reload: %w", err)
	}
	fmt.Printf("reloaded session %s: state %s, version %d, %d messages, leaf %s, tokens in/out/cache-read %d/%d/%d\n",
		got.ID, got.State, got.Version, len(got.Messages), *got.CurrentLeafID,
		got.TotalUsage.InputTokens, got.TotalUsage.OutputTokens, got.TotalUsage.CacheReadInputTokens)
	for _, m := range got.Messages {
		fmt.Printf("  #%d %-9s %s\n", m.Seq, m.Role, m.Content)
	}
	for _, t := range got.Todos {
		fmt.Printf("  todo %-12s %s\n", t.Status, t.Content)
	}
	fmt.Printf("  plan %q: %s\n", *got.CurrentPlan.Name, got.CurrentPlan.Status)
	return nil
}
