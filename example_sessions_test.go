package agentstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/repo"
)

// openExampleStore opens a migrated in-memory SQLite store.
func openExampleStore() *agentstore.Store {
	st, err := agentstore.Open(context.Background(), "sqlite::memory:")
	if err != nil {
		log.Fatal(err)
	}
	if err := st.Migrate(context.Background()); err != nil {
		log.Fatal(err)
	}
	return st
}

func text(s string) json.RawMessage {
	b, _ := json.Marshal([]map[string]string{{"type": "text", "text": s}})
	return b
}

// Save a new session, append to it without reloading, and load it back.
func ExampleStore_Sessions() {
	ctx := context.Background()
	st := openExampleStore()
	defer st.Close()
	sessions := st.Sessions()

	s := repo.NewSession()
	s.AddMessage(repo.Message{ID: "u1", Role: repo.RoleUser, Content: text("What is 2+2?")})
	if err := sessions.Save(ctx, s); err != nil {
		log.Fatal(err)
	}
	// AppendMessages writes only the new rows, however long the session is.
	if _, err := sessions.AppendMessages(ctx, s.ID,
		repo.Message{ID: "a1", Role: repo.RoleAssistant, Content: text("4"),
			Usage: &repo.TokenUsage{InputTokens: 12, OutputTokens: 1}}); err != nil {
		log.Fatal(err)
	}
	got, err := sessions.Load(ctx, s.ID)
	if err != nil {
		log.Fatal(err)
	}
	for _, m := range got.Messages {
		fmt.Printf("%d %s %s %s\n", m.Seq, m.ID, m.Role, m.Content)
	}
	fmt.Println("leaf:", *got.CurrentLeafID, "version:", got.Version, "input tokens:", got.TotalUsage.InputTokens)

	// The copy saved before the append is stale now.
	s.State = repo.StateCompleted
	fmt.Println("stale save is a conflict:", errors.Is(sessions.Save(ctx, s), agentstore.ErrConflict))

	_, err = sessions.Load(ctx, repo.NewSession().ID)
	fmt.Println("missing session:", errors.Is(err, agentstore.ErrNotFound))
	// Output:
	// 1 u1 user [{"text":"What is 2+2?","type":"text"}]
	// 2 a1 assistant [{"text":"4","type":"text"}]
	// leaf: a1 version: 2 input tokens: 12
	// stale save is a conflict: true
	// missing session: true
}

// Fork a session at a message: the child gets a copy of that branch.
func ExampleStore_Sessions_fork() {
	ctx := context.Background()
	st := openExampleStore()
	defer st.Close()
	sessions := st.Sessions()

	s := repo.NewSession()
	for i, role := range []repo.Role{repo.RoleUser, repo.RoleAssistant, repo.RoleUser} {
		s.AddMessage(repo.Message{ID: fmt.Sprintf("m%d", i+1), Role: role, Content: text(fmt.Sprint("turn ", i+1))})
	}
	if err := sessions.Save(ctx, s); err != nil {
		log.Fatal(err)
	}
	fork, err := sessions.Fork(ctx, s.ID, "m2")
	if err != nil {
		log.Fatal(err)
	}
	for _, m := range fork.Messages {
		fmt.Println(m.Seq, m.ID, "sidechain:", m.IsSidechain)
	}
	fmt.Println("parent is the original:", *fork.ParentID == s.ID)
	orig, _ := sessions.Load(ctx, s.ID)
	fmt.Println("original still has", len(orig.Messages), "messages")
	// Output:
	// 1 m1 sidechain: true
	// 2 m2 sidechain: true
	// parent is the original: true
	// original still has 3 messages
}

// Load only the tail of a long session, or page through it by sequence number.
func ExampleStore_Sessions_loadOptions() {
	ctx := context.Background()
	st := openExampleStore()
	defer st.Close()
	sessions := st.Sessions()

	s := repo.NewSession()
	if err := sessions.Save(ctx, s); err != nil {
		log.Fatal(err)
	}
	var msgs []repo.Message
	for i := 1; i <= 10; i++ {
		msgs = append(msgs, repo.Message{ID: fmt.Sprint("m", i), Role: repo.RoleUser, Content: text("hi")})
	}
	if _, err := sessions.AppendMessages(ctx, s.ID, msgs...); err != nil {
		log.Fatal(err)
	}
	tail, _ := sessions.Load(ctx, s.ID, repo.LoadOptions{LastN: 3})
	page, _ := sessions.Load(ctx, s.ID, repo.LoadOptions{AfterSeq: 4, Limit: 2})
	fmt.Println("tail:", msgIDsOf(tail.Messages), "page:", msgIDsOf(page.Messages))
	// Output:
	// tail: [m8 m9 m10] page: [m5 m6]
}

func msgIDsOf(ms []repo.Message) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.ID)
	}
	return out
}

// A per-session queue with leases: dequeue, then complete.
func ExampleStore_SessionQueue() {
	ctx := context.Background()
	st := openExampleStore()
	defer st.Close()
	s := repo.NewSession()
	if err := st.Sessions().Save(ctx, s); err != nil {
		log.Fatal(err)
	}
	q := st.SessionQueue()
	for _, job := range []struct {
		content  string
		priority int32
	}{{"low", 0}, {"urgent", 10}, {"low 2", 0}} {
		if _, err := q.Enqueue(ctx, s.ID, job.content, job.priority); err != nil {
			log.Fatal(err)
		}
	}
	for {
		it, err := q.Dequeue(ctx, s.ID, repo.DequeueParams{Owner: "worker-1", Lease: time.Minute})
		if err != nil {
			log.Fatal(err)
		}
		if it == nil {
			break
		}
		fmt.Println(it.Content, it.Status, "attempt", it.Attempts)
		if err := q.Complete(ctx, it.Lease()); err != nil {
			log.Fatal(err)
		}
	}
	// Output:
	// urgent processing attempt 1
	// low processing attempt 1
	// low 2 processing attempt 1
}

// A tenant-scoped view cannot see other tenants' sessions.
func ExampleStore_ForTenant() {
	ctx := context.Background()
	st := openExampleStore()
	defer st.Close()
	acme := st.ForTenant("acme")
	s := repo.NewSession()
	if err := acme.Sessions().Save(ctx, s); err != nil {
		log.Fatal(err)
	}
	_, err := st.ForTenant("globex").Sessions().Load(ctx, s.ID)
	fmt.Println("tenant:", s.TenantID, "other tenant gets not found:", errors.Is(err, agentstore.ErrNotFound))
	page, _ := acme.Sessions().List(ctx, repo.ListParams{})
	fmt.Println("acme sees", len(page.Sessions), "session")
	// Output:
	// tenant: acme other tenant gets not found: true
	// acme sees 1 session
}

// Plans keep their status: a completed plan is history, not the current plan.
func ExampleStore_Sessions_plans() {
	ctx := context.Background()
	st := openExampleStore()
	defer st.Close()
	sessions := st.Sessions()
	s := repo.NewSession()
	now := time.Now()
	s.EnterPlanMode("refactor", "1. split the file\n2. add tests", now)
	s.Todos = []repo.TodoItem{{Content: "split the file", ActiveForm: "splitting the file"}}
	if err := sessions.Save(ctx, s); err != nil {
		log.Fatal(err)
	}
	s.CurrentPlan.Approve(now)
	s.CurrentPlan.Complete(now)
	s.Todos[0].Complete(now)
	if err := sessions.Save(ctx, s); err != nil {
		log.Fatal(err)
	}
	got, _ := sessions.Load(ctx, s.ID)
	plans, _ := sessions.Plans(ctx, s.ID)
	fmt.Println("current plan:", got.CurrentPlan, "history:", plans[0].Status, "todo:", got.Todos[0].Status)
	// Output:
	// current plan: <nil> history: completed todo: completed
}
