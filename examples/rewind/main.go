// Command rewind shows edit and regenerate on the session store's message
// tree: it opens an embedded SQLite store (or PostgreSQL with --dsn),
// records a short conversation, regenerates the last reply (Rewind to the
// question, append a new reply), edits the question (append a sibling with
// AppendOptions.SiblingOf, then its reply), lists the branches with their
// paths, and goes back to the first answer. Nothing is deleted: every
// version stays readable.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/uuid"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/repo"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "rewind:", err)
		os.Exit(1)
	}
}

// msg returns a message with one text block.
func msg(id string, role repo.Role, text string) repo.Message {
	b, _ := json.Marshal([]map[string]string{{"type": "text", "text": text}})
	return repo.Message{ID: id, Role: role, Content: b}
}

// textOf returns the text of a message's first block.
func textOf(m repo.Message) string {
	var blocks []struct{ Text string }
	if json.Unmarshal(m.Content, &blocks) != nil || len(blocks) == 0 {
		return string(m.Content)
	}
	return blocks[0].Text
}

func run() error {
	dir, err := os.MkdirTemp("", "agentstore-rewind-")
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
	if err := st.Migrate(ctx); err != nil {
		return err
	}
	sessions := st.Sessions()

	// A session with state set at creation, and a conversation.
	s := repo.NewSession()
	s.State = repo.StateActive
	s.Config = json.RawMessage(`{"model":"small","system":"You are a poet."}`)
	if err := sessions.Save(ctx, s); err != nil {
		return err
	}
	if _, err := sessions.AppendMessages(ctx, s.ID,
		msg("u1", repo.RoleUser, "Hello!"),
		msg("a1", repo.RoleAssistant, "Hello. What shall I write?"),
		msg("u2", repo.RoleUser, "A line about the sea."),
		msg("a2", repo.RoleAssistant, "The sea is wide and grey.")); err != nil {
		return err
	}
	fmt.Println("conversation:")
	if err := printBranch(ctx, sessions, s.ID, "a2"); err != nil {
		return err
	}

	// Regenerate: go back to the question, append another reply.
	v, err := sessions.Rewind(ctx, s.ID, "u2", repo.RewindOptions{})
	if err != nil {
		return err
	}
	fmt.Printf("rewound to u2 (version %d)\n", v)
	if _, err := sessions.AppendMessages(ctx, s.ID, msg("a2-retry", repo.RoleAssistant, "Waves fold the light.")); err != nil {
		return err
	}

	// Edit the question: a sibling of u2 (same parent, a1) and the reply
	// to it. Strict: only if nobody wrote since the Load.
	cur, err := sessions.Load(ctx, s.ID, repo.LoadOptions{CurrentBranch: true})
	if err != nil {
		return err
	}
	if _, err := sessions.AppendMessagesWith(ctx, s.ID,
		repo.AppendOptions{SiblingOf: "u2", ExpectedVersion: cur.Version},
		msg("u2-edit", repo.RoleUser, "A line about the mountains."),
		msg("a2-edit", repo.RoleAssistant, "Stone shoulders hold the snow.")); err != nil {
		return err
	}

	// The alternatives: one branch per leaf, each readable in full.
	branches, err := sessions.Branches(ctx, s.ID)
	if err != nil {
		return err
	}
	fmt.Printf("%d branches:\n", len(branches))
	for _, b := range branches {
		where := "the current branch"
		if !b.Current {
			where = "forks off the current branch after " + b.ForkPointID
		}
		fmt.Printf("leaf %s: %d messages from %s, %s\n", b.LeafID, b.Length, b.RootID, where)
		if err := printBranch(ctx, sessions, s.ID, b.LeafID); err != nil {
			return err
		}
	}

	// Back to the first answer: the leaf moves, nothing is lost.
	if _, err := sessions.Rewind(ctx, s.ID, "a2", repo.RewindOptions{}); err != nil {
		return err
	}
	back, err := sessions.Load(ctx, s.ID, repo.LoadOptions{CurrentBranch: true})
	if err != nil {
		return err
	}
	ids := make([]string, len(back.Messages))
	for i, m := range back.Messages {
		ids[i] = m.ID
	}
	fmt.Printf("back on the first answer: current branch %s; %d messages stored; state %s; config %s\n",
		strings.Join(ids, " > "), back.MessageCount, back.State, back.Config)
	return nil
}

// printBranch prints the path from the root to leaf.
func printBranch(ctx context.Context, sessions repo.Sessions, id uuid.UUID, leaf string) error {
	msgs, err := sessions.LoadBranch(ctx, id, leaf)
	if err != nil {
		return err
	}
	for _, m := range msgs {
		fmt.Printf("    %-9s %-9s %s\n", m.ID, m.Role, textOf(m))
	}
	return nil
}
