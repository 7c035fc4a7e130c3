package agentstore_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/internal/testkit"
	"github.com/agentstore/agentstore/repo"
)

// TestForkStatementsSingleKey: on every dialect, with and without the
// fast paths, Fork sends no recursive query and no INSERT ... SELECT, and
// (on PostgreSQL and MariaDB, whose logged statements the audit's
// classifier reads) each of its statements touches one session: the
// statement audit's "single" class, one shard on Citus
// (docs/distributed.md). The fork holds the branch renumbered from 1,
// including a parent stored after the fork point (the walk's second read).
func TestForkStatementsSingleKey(t *testing.T) {
	t.Parallel()
	variants := statementVariants()
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			audit := &citusAudit{}
			st := newHarness(t, v.d).New(t, append(v.opts, agentstore.WithLogger(audit))...)
			r := st.Sessions()
			ctx := context.Background()
			s := repo.NewSession()
			if err := r.Save(ctx, s); err != nil {
				t.Fatal(err)
			}
			// m0 <- m1 <- m2 <- m3, an edit of m2 (e2, the current leaf),
			// then x (its parent y stored after it, in the same batch) and y.
			var msgs []repo.Message
			for i := range 4 {
				msgs = append(msgs, testkit.TextMsg(fmt.Sprintf("m%d", i), repo.RoleUser, "text"))
			}
			if _, err := r.AppendMessages(ctx, s.ID, msgs...); err != nil {
				t.Fatal(err)
			}
			if _, err := r.AppendMessagesWith(ctx, s.ID, repo.AppendOptions{SiblingOf: "m2"},
				testkit.TextMsg("e2", repo.RoleUser, "edited")); err != nil {
				t.Fatal(err)
			}
			y, m3 := "y", "m3"
			x := testkit.TextMsg("x", repo.RoleUser, "x")
			x.ParentID = &y
			ym := testkit.TextMsg("y", repo.RoleUser, "y")
			ym.ParentID = &m3
			if _, err := r.AppendMessages(ctx, s.ID, x, ym); err != nil {
				t.Fatal(err)
			}
			if _, err := r.Rewind(ctx, s.ID, "e2", repo.RewindOptions{}); err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct {
				at      string
				want    []string
				forkSeq int64
			}{
				{"", []string{"m0", "m1", "e2"}, 5},
				{"m3", []string{"m0", "m1", "m2", "m3"}, 4},
				{"x", []string{"m0", "m1", "m2", "m3", "x", "y"}, 6},
			} {
				f, err := r.Fork(ctx, s.ID, c.at)
				if err != nil {
					t.Fatalf("fork at %q: %v", c.at, err)
				}
				var ids []string
				for i, m := range f.Messages {
					ids = append(ids, m.ID)
					if m.Seq != int64(i+1) || !m.IsSidechain {
						t.Fatalf("fork at %q: message %d is %+v", c.at, i, m)
					}
				}
				if !slices.Equal(ids, c.want) || f.LastSeq != int64(len(c.want)) || f.MessageCount != int64(len(c.want)) ||
					f.ForkedFromSeq == nil || *f.ForkedFromSeq != c.forkSeq {
					t.Fatalf("fork at %q: messages %v, last_seq %d, count %d, forked from seq %v; want %v from seq %d",
						c.at, ids, f.LastSeq, f.MessageCount, f.ForkedFromSeq, c.want, c.forkSeq)
				}
				if again, err := r.Load(ctx, f.ID); err != nil || len(again.Messages) != len(c.want) {
					t.Fatalf("fork at %q read back: %v, %v", c.at, again, err)
				}
			}
			audit.mu.Lock()
			defer audit.mu.Unlock()
			seen := 0
			for e, n := range audit.counts {
				if !strings.HasSuffix(e.op, ".Fork") {
					continue
				}
				seen += n
				up := strings.ToUpper(e.template)
				if strings.Contains(up, "RECURSIVE") || (strings.HasPrefix(up, "INSERT") && strings.Contains(up, "SELECT")) {
					t.Errorf("Fork sent a recursive query or an INSERT ... SELECT (%d times): %s", n, e.template)
				}
				// the classifier reads the statements as PostgreSQL's and
				// MariaDB's loggers spell them (SQLite's leaves uuids unquoted)
				if v.d != agentstore.SQLite && e.class != "single" && e.class != "none" {
					t.Errorf("Fork sent a %s statement (%d times): %s", e.class, n, e.template)
				}
			}
			if seen == 0 {
				t.Fatal("the audit saw no statement of Fork")
			}
		})
	}
}

// statementVariant is a dialect and options the statement-shape tests run
// on.
type statementVariant struct {
	name string
	d    agentstore.Dialect
	opts []agentstore.Option
}

// statementVariants are the variants of the statement-shape tests: every
// dialect, and PostgreSQL without the fast paths (the general paths).
func statementVariants() []statementVariant {
	return []statementVariant{
		{"sqlite", agentstore.SQLite, nil},
		{"postgres", agentstore.Postgres, nil},
		{"postgres-general", agentstore.Postgres, []agentstore.Option{agentstore.WithoutCapabilities(agentstore.CapFastPaths)}},
		{"mariadb", agentstore.MariaDB, nil},
	}
}
