// Command search shows full-text search over past conversations: it opens
// an embedded SQLite store (or PostgreSQL with --dsn), records two
// conversations of two tenants, then searches them — words, a "phrase", a
// prefix*, filtered by role and by tenant — and walks the results page by
// page with the cursor, printing each hit's snippet with its matches
// marked.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/repo"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "search:", err)
		os.Exit(1)
	}
}

// msg returns a message with one text block.
func msg(id string, role repo.Role, text string) repo.Message {
	b, _ := json.Marshal([]map[string]string{{"type": "text", "text": text}})
	return repo.Message{ID: id, Role: role, Content: b}
}

func run() error {
	dir, err := os.MkdirTemp("", "agentstore-search-")
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
	if err := st.Migrate(ctx); err != nil { // V8 creates the search index
		return err
	}

	// Two tenants, one conversation each.
	acme, globex := st.ForTenant("acme").Sessions(), st.ForTenant("globex").Sessions()
	a := repo.NewSession()
	if err := acme.Save(ctx, a); err != nil {
		return err
	}
	if _, err := acme.AppendMessages(ctx, a.ID,
		msg("a1", repo.RoleUser, "How do I rotate the database password?"),
		msg("a2", repo.RoleAssistant, "Rotate the password in the vault, then restart the database proxy."),
		msg("a3", repo.RoleUser, "And the replica? Does the replica need a restart too?"),
		msg("a4", repo.RoleAssistant, "Yes: restart each replica after the primary, one at a time."),
	); err != nil {
		return err
	}
	g := repo.NewSession()
	if err := globex.Save(ctx, g); err != nil {
		return err
	}
	if _, err := globex.AppendMessages(ctx, g.ID,
		msg("g1", repo.RoleUser, "Our database password leaked, what now?"),
		msg("g2", repo.RoleAssistant, "Revoke it at once and rotate every credential."),
	); err != nil {
		return err
	}

	show := func(title string, r repo.Sessions, p repo.SearchParams) error {
		page, err := r.Search(ctx, p)
		if err != nil {
			return err
		}
		fmt.Printf("%s: %d hits\n", title, len(page.Hits))
		for _, h := range page.Hits {
			fmt.Printf("  %-3s %-9s %s\n", h.MessageID, h.Role, h.HighlightedSnippet("[", "]"))
		}
		return nil
	}
	all := st.Sessions() // every tenant
	if err := show(`password`, all, repo.SearchParams{Query: "password"}); err != nil {
		return err
	}
	if err := show(`"database password" (phrase)`, all, repo.SearchParams{Query: `"database password"`}); err != nil {
		return err
	}
	if err := show(`rest* (prefix), assistant only`, all, repo.SearchParams{Query: "rest*", Roles: []repo.Role{repo.RoleAssistant}}); err != nil {
		return err
	}
	if err := show(`password, tenant globex`, globex, repo.SearchParams{Query: "password"}); err != nil {
		return err
	}

	// Page by page: the cursor continues exactly after the last hit.
	p := repo.SearchParams{Query: "replica restart", Limit: 1}
	for n := 1; ; n++ {
		page, err := acme.Search(ctx, p)
		if err != nil {
			return err
		}
		for _, h := range page.Hits {
			fmt.Printf("page %d: %s (score %.3f)\n", n, h.MessageID, h.Score)
		}
		if page.Next == "" {
			break
		}
		p.After = page.Next
	}

	// Hostile input is never query syntax: no words at all is ErrInvalidInput.
	_, err = all.Search(ctx, repo.SearchParams{Query: `() * "" -:`})
	fmt.Println("punctuation only: invalid input:", errors.Is(err, agentstore.ErrInvalidInput))
	page, err := all.Search(ctx, repo.SearchParams{Query: `password) OR (1=1`})
	if err != nil {
		return err
	}
	fmt.Printf("password) OR (1=1: %d hits (every word must match)\n", len(page.Hits))
	return nil
}
