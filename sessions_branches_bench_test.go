package agentstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/agentstore/agentstore/repo"
)

// BenchmarkSessionsBranches measures edit and rewind on a session of n
// messages (one path, then 10 edits of its last user messages, so 11
// leaves), on both dialects:
//
//	go test -run '^$' -bench 'BenchmarkSessionsBranches' -benchtime 20x .
//
// rewind alternates the leaf between two messages (each call moves it);
// edit appends a sibling of a message deep in the session (one message);
// append is the plain one-message append on the same session, for
// comparison; branches lists the leaves (reads the whole tree);
// control-load is Load of the whole session (every message with its
// content), for comparison; load-branch-last-20 reads the last 20 messages
// of a leaf's path (the recursive walk of the whole path, as Load with
// CurrentBranch); fork forks the session at its current leaf (a copy of
// the whole path, about n messages, into a new session, read back).
func BenchmarkSessionsBranches(b *testing.B) {
	for _, d := range dialects {
		for _, n := range []int{1000, 10000, 100000} {
			b.Run(fmt.Sprintf("%s/%d", d, n), func(b *testing.B) {
				st, s := benchSession(b, d, n)
				r := st.Sessions()
				ctx := context.Background()
				for i := range 10 {
					id := fmt.Sprintf("m-%d", n-2-2*i)
					if _, err := r.AppendMessagesWith(ctx, s.ID, repo.AppendOptions{SiblingOf: id},
						branchBenchMsg(fmt.Sprintf("seed-edit-%d", i), "edited")); err != nil {
						b.Fatal(err)
					}
				}
				leaf := fmt.Sprintf("m-%d", n-1)
				b.Run("rewind", func(b *testing.B) {
					for i := range b.N {
						to := leaf
						if i%2 == 0 {
							to = fmt.Sprintf("m-%d", n/2)
						}
						if _, err := r.Rewind(ctx, s.ID, to, repo.RewindOptions{}); err != nil {
							b.Fatal(err)
						}
					}
				})
				b.Run("edit", func(b *testing.B) {
					for i := range b.N {
						if _, err := r.AppendMessagesWith(ctx, s.ID, repo.AppendOptions{SiblingOf: fmt.Sprintf("m-%d", n/2)},
							branchBenchMsg(fmt.Sprintf("edit-%d", i), "edited")); err != nil {
							b.Fatal(err)
						}
					}
				})
				b.Run("append", func(b *testing.B) {
					for i := range b.N {
						if _, err := r.AppendMessages(ctx, s.ID, branchBenchMsg(fmt.Sprintf("plain-%d", i), "plain")); err != nil {
							b.Fatal(err)
						}
					}
				})
				b.Run("branches", func(b *testing.B) {
					for range b.N {
						bs, err := r.Branches(ctx, s.ID)
						if err != nil || len(bs) < 11 {
							b.Fatalf("%d branches, %v", len(bs), err)
						}
					}
				})
				b.Run("control-load", func(b *testing.B) {
					for range b.N {
						if _, err := r.Load(ctx, s.ID); err != nil {
							b.Fatal(err)
						}
					}
				})
				b.Run("fork", func(b *testing.B) {
					for range b.N {
						f, err := r.Fork(ctx, s.ID, "")
						if err != nil || len(f.Messages) < n/2 {
							b.Fatalf("fork of %d messages, %v", len(f.Messages), err)
						}
					}
				})
				b.Run("load-branch-last-20", func(b *testing.B) {
					for range b.N {
						ms, err := r.LoadBranch(ctx, s.ID, leaf, repo.LoadOptions{LastN: 20})
						if err != nil || len(ms) != 20 {
							b.Fatalf("%d messages, %v", len(ms), err)
						}
					}
				})
			})
		}
	}
}

// branchBenchMsg returns a user message with one text block.
func branchBenchMsg(id, text string) repo.Message {
	b, _ := json.Marshal([]map[string]string{{"type": "text", "text": text}})
	return repo.Message{ID: id, Role: repo.RoleUser, Content: b}
}
