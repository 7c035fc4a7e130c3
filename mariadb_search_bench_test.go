package agentstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/repo"
)

// TestMariaDBSearchFigures measures MariaDB's message search (V15): a
// rare word's search (10 hits) at 1e4 and 1e5 messages, and one-message
// appends with the search index (triggers and FULLTEXT index), with the
// triggers only, and with neither (the schema before V15), interleaved
// round by round so the three share the machine's load. Run with
// AGENTSTORE_MARIADB_SEARCH_FIGURES=1 (it takes minutes); it logs medians.
func TestMariaDBSearchFigures(t *testing.T) {
	if os.Getenv("AGENTSTORE_MARIADB_SEARCH_FIGURES") == "" {
		t.Skip("set AGENTSTORE_MARIADB_SEARCH_FIGURES=1 to measure")
	}
	ctx := context.Background()
	st := newHarness(t, agentstore.MariaDB).New(t)
	rng := rand.New(rand.NewPCG(1, 2))
	vocab := make([]string, 5000)
	for i := range vocab {
		vocab[i] = fmt.Sprintf("w%c%c%d", 'a'+rune(i%26), 'a'+rune(i/26%26), i)
	}
	stored := 0
	fill := func(n int, rare map[int]bool) {
		for stored < n {
			s := repo.NewSession()
			if err := st.Sessions().Save(ctx, s); err != nil {
				t.Fatal(err)
			}
			msgs := make([]repo.Message, 0, 100)
			for j := 0; j < 100 && stored < n; j++ {
				words := make([]string, 40)
				for k := range words {
					words[k] = vocab[rng.IntN(len(vocab))]
				}
				if rare[stored] {
					words[rng.IntN(len(words))] = "quetzalcoatl"
				}
				msgs = append(msgs, mariaText(fmt.Sprintf("m%d", stored), strings.Join(words, " ")))
				stored++
			}
			if _, err := st.Sessions().AppendMessages(ctx, s.ID, msgs...); err != nil {
				t.Fatal(err)
			}
		}
	}
	median := func(d []time.Duration) time.Duration { slices.Sort(d); return d[len(d)/2] }
	search := func(size int) {
		var d []time.Duration
		for range 200 {
			t0 := time.Now()
			page, err := st.Sessions().Search(ctx, repo.SearchParams{Query: "quetzalcoatl", Limit: 20})
			d = append(d, time.Since(t0))
			if err != nil || len(page.Hits) != 10 {
				t.Fatalf("search at %d: %d hits, %v", size, len(page.Hits), err)
			}
		}
		t.Logf("rare-word search (10 hits) at %d messages: median %v over %d", size, median(d), len(d))
	}
	// 10 rare messages among the first 1e4, none after: 10 hits at both sizes.
	rare := map[int]bool{}
	for len(rare) < 10 {
		rare[rng.IntN(10000)] = true
	}
	t0 := time.Now()
	fill(10000, rare)
	t.Logf("filled 1e4 in %v", time.Since(t0))
	search(10000)
	t0 = time.Now()
	fill(100000, rare)
	t.Logf("filled 1e5 in %v", time.Since(t0))
	search(100000)

	// Appends: three databases, interleaved.
	type cfg struct {
		name string
		st   *agentstore.Store
		s    *repo.Session
		d    []time.Duration
	}
	cfgs := []*cfg{{name: "V15 (triggers + FULLTEXT)"}, {name: "triggers, no FULLTEXT index"}, {name: "neither (before V15)"}}
	for i, c := range cfgs {
		c.st = newHarness(t, agentstore.MariaDB).New(t)
		drop := [][]string{nil,
			{`DROP INDEX "idx_agentstore_messages_search" ON "agentstore_messages"`},
			{`DROP INDEX "idx_agentstore_messages_search" ON "agentstore_messages"`, `DROP TRIGGER "agentstore_messages_search_insert"`,
				`DROP TRIGGER "agentstore_messages_search_update"`}}[i]
		for _, q := range drop {
			if err := c.st.DB(ctx).Exec(q).Error; err != nil {
				t.Fatal(err)
			}
		}
		c.s = repo.NewSession()
		if err := c.st.Sessions().Save(ctx, c.s); err != nil {
			t.Fatal(err)
		}
	}
	for r := range 300 {
		for _, c := range cfgs {
			words := make([]string, 40)
			for k := range words {
				words[k] = vocab[rng.IntN(len(vocab))]
			}
			t0 := time.Now()
			if _, err := c.st.Sessions().AppendMessages(ctx, c.s.ID, mariaText(fmt.Sprintf("a%d", r), strings.Join(words, " "))); err != nil {
				t.Fatal(err)
			}
			if r >= 20 { // warm-up
				c.d = append(c.d, time.Since(t0))
			}
		}
	}
	for _, c := range cfgs {
		t.Logf("one-message append, %s: median %v over %d", c.name, median(c.d), len(c.d))
	}
}
