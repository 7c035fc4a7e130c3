package agentstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/internal/testkit"
	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo"
)

// Benchmarks of the session store (issue 3), on both dialects. The run
// used for the figures in the closing note, about two minutes:
//
//	go test -run '^$' -bench 'BenchmarkSessions(Append|Load)' -benchtime 20x .
//	go test -run '^$' -bench 'BenchmarkSessionsQueue' -benchtime 1x .
//
// Append compares AppendMessages and Save of a loaded session (one new
// message each) on sessions of 10, 1,000 and 10,000 messages with the seed's
// strategy (delete every message row, reinsert each with its own INSERT);
// "interleaved-10k-vs-10" alternates appends to a 10- and a 10,000-message
// session and reports their ratio (robust on a loaded machine).
// Load compares Load of 10,000 messages with one plain query on the same
// pool; "interleaved" alternates the two and reports their ratio. Queue
// drains 10,000 items with 8 goroutines (dequeue + complete) and reports
// items/s.

// benchSession creates a store and a session holding n messages.
func benchSession(b *testing.B, d agentstore.Dialect, n int) (*agentstore.Store, *repo.Session) {
	b.Helper()
	return benchSessionIn(b, newHarness(b, d), n)
}

// benchSessionIn is benchSession on h's database.
func benchSessionIn(b *testing.B, h *harness, n int) (*agentstore.Store, *repo.Session) {
	b.Helper()
	st := h.New(b)
	r := st.Sessions()
	s := repo.NewSession()
	if err := r.Save(context.Background(), s); err != nil {
		b.Fatal(err)
	}
	const batch = 1000
	for done := 0; done < n; done += batch {
		msgs := make([]repo.Message, 0, batch)
		for i := done; i < min(n, done+batch); i++ {
			m := testkit.TextMsg(fmt.Sprintf("m-%d", i), repo.RoleUser, "some message text of moderate length for the benchmark")
			m.Usage = &repo.TokenUsage{InputTokens: 100, OutputTokens: 20}
			msgs = append(msgs, m)
		}
		if _, err := r.AppendMessages(context.Background(), s.ID, msgs...); err != nil {
			b.Fatal(err)
		}
	}
	return st, s
}

func BenchmarkSessionsAppend(b *testing.B) {
	for _, d := range dialects {
		// Alternates appends to a 10-message and a 10,000-message session of
		// the same store, so machine load hits both; "ratio" is big/small.
		b.Run(fmt.Sprintf("%s/interleaved-10k-vs-10", d), func(b *testing.B) {
			st, small := benchSession(b, d, 10)
			r := st.Sessions()
			big := repo.NewSession()
			ctx := context.Background()
			if err := r.Save(ctx, big); err != nil {
				b.Fatal(err)
			}
			for done := 0; done < 10000; done += 1000 {
				msgs := make([]repo.Message, 1000)
				for i := range msgs {
					msgs[i] = testkit.TextMsg(fmt.Sprintf("m-%d", done+i), repo.RoleUser, "some message text of moderate length for the benchmark")
				}
				if _, err := r.AppendMessages(ctx, big.ID, msgs...); err != nil {
					b.Fatal(err)
				}
			}
			var tSmall, tBig time.Duration
			i := 0
			for b.Loop() {
				t0 := time.Now()
				if _, err := r.AppendMessages(ctx, small.ID, testkit.TextMsg(fmt.Sprint("s-", i), repo.RoleAssistant, "reply")); err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				if _, err := r.AppendMessages(ctx, big.ID, testkit.TextMsg(fmt.Sprint("b-", i), repo.RoleAssistant, "reply")); err != nil {
					b.Fatal(err)
				}
				tSmall += t1.Sub(t0)
				tBig += time.Since(t1)
				i++
			}
			b.ReportMetric(float64(tSmall.Microseconds())/float64(b.N), "n10-us")
			b.ReportMetric(float64(tBig.Microseconds())/float64(b.N), "n10000-us")
			b.ReportMetric(float64(tBig)/float64(tSmall), "ratio")
		})
		for _, n := range []int{10, 1000, 10000} {
			b.Run(fmt.Sprintf("%s/n=%d/append", d, n), func(b *testing.B) {
				st, s := benchSession(b, d, n)
				r := st.Sessions()
				ctx := context.Background()
				i := 0
				for b.Loop() {
					if _, err := r.AppendMessages(ctx, s.ID, testkit.TextMsg(fmt.Sprintf("b-%d", i), repo.RoleAssistant, "reply")); err != nil {
						b.Fatal(err)
					}
					i++
				}
			})
			b.Run(fmt.Sprintf("%s/n=%d/save", d, n), func(b *testing.B) {
				st, s := benchSession(b, d, n)
				r := st.Sessions()
				ctx := context.Background()
				loaded, err := r.Load(ctx, s.ID, repo.LoadOptions{LastN: 1})
				if err != nil {
					b.Fatal(err)
				}
				i := 0
				for b.Loop() {
					loaded.AddMessage(testkit.TextMsg(fmt.Sprintf("s-%d", i), repo.RoleAssistant, "reply"))
					if err := r.Save(ctx, loaded); err != nil {
						b.Fatal(err)
					}
					i++
				}
			})
			b.Run(fmt.Sprintf("%s/n=%d/seed-rewrite", d, n), func(b *testing.B) {
				st, s := benchSession(b, d, n)
				ctx := context.Background()
				// The seed's save: delete every message row of the session,
				// then insert each message with its own statement.
				var rows []models.Message
				if err := st.DB(ctx).Where("session_id = ?", s.ID).Order("seq").Find(&rows).Error; err != nil {
					b.Fatal(err)
				}
				mt := st.Table(models.TableMessages)
				i := 0
				for b.Loop() {
					rows = append(rows, models.Message{SessionID: s.ID, Seq: int64(len(rows) + 1), ID: fmt.Sprintf("r-%d", i),
						Role: "assistant", Content: models.VerbatimJSON(`[{"type":"text","text":"reply"}]`), CreatedAt: time.Now().UTC()})
					err := st.DB(ctx).Transaction(func(tx *gorm.DB) error {
						if err := tx.Exec("UPDATE "+st.Table(models.TableSessions)+" SET updated_at = ?, last_seq = ? WHERE id = ?",
							time.Now().UTC(), len(rows), s.ID).Error; err != nil {
							return err
						}
						if err := tx.Exec("DELETE FROM "+mt+" WHERE session_id = ?", s.ID).Error; err != nil {
							return err
						}
						for _, m := range rows {
							if err := tx.Exec("INSERT INTO "+mt+" (session_id, seq, id, parent_id, role, content, is_sidechain,"+
								" is_compact_summary, usage, metadata, model, request_id, environment, created_at)"+
								" VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", m.SessionID, m.Seq, m.ID, m.ParentID, m.Role,
								m.Content, m.IsSidechain, m.IsCompactSummary, m.Usage, m.Metadata, m.Model, m.RequestID,
								m.Environment, m.CreatedAt).Error; err != nil {
								return err
							}
						}
						return nil
					})
					if err != nil {
						b.Fatal(err)
					}
					i++
				}
			})
		}
	}
}

// rawMessage is what the raw-SQL baseline materialises per row.
type rawMessage struct {
	seq                       int64
	id, role                  string
	parent, model, req        sql.NullString
	content, usage, meta, env []byte
	side, compact             bool
	created                   any
}

// rawLoad reads the session's messages with one plain query on the store's
// pool, scanning each row into a rawMessage kept in a slice.
func rawLoad(ctx context.Context, st *agentstore.Store, id uuid.UUID) ([]rawMessage, error) {
	ph := "$1"
	if st.Dialect() == agentstore.SQLite {
		ph = "?"
	}
	rows, err := st.SQLDB().QueryContext(ctx, "SELECT seq, id, parent_id, role, content, is_sidechain, is_compact_summary,"+
		" usage, metadata, model, request_id, environment, created_at FROM "+st.Table(models.TableMessages)+
		" WHERE session_id = "+ph+" ORDER BY seq", id.String())
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make([]rawMessage, 0, 10000)
	for rows.Next() {
		var m rawMessage
		if err := rows.Scan(&m.seq, &m.id, &m.parent, &m.role, &m.content, &m.side, &m.compact, &m.usage, &m.meta,
			&m.model, &m.req, &m.env, &m.created); err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, rows.Err()
}

func BenchmarkSessionsLoad(b *testing.B) {
	const n = 10000
	for _, d := range dialects {
		b.Run(fmt.Sprintf("%s/n=%d", d, n), func(b *testing.B) {
			st, s := benchSession(b, d, n)
			ctx := context.Background()
			r := st.Sessions()
			b.Run("store", func(b *testing.B) {
				for b.Loop() {
					got, err := r.Load(ctx, s.ID)
					if err != nil || len(got.Messages) != n {
						b.Fatalf("load: %v", err)
					}
				}
			})
			b.Run("raw-sql", func(b *testing.B) {
				for b.Loop() {
					rows, err := rawLoad(ctx, st, s.ID)
					if err != nil || len(rows) != n {
						b.Fatalf("raw: %d rows, %v", len(rows), err)
					}
				}
			})
			// Alternates the two in one loop, so load spikes on a shared
			// machine hit both equally; reports store/raw as "ratio".
			b.Run("interleaved", func(b *testing.B) {
				var tStore, tRaw time.Duration
				for b.Loop() {
					t0 := time.Now()
					got, err := r.Load(ctx, s.ID)
					if err != nil || len(got.Messages) != n {
						b.Fatalf("load: %v", err)
					}
					t1 := time.Now()
					rows, err := rawLoad(ctx, st, s.ID)
					if err != nil || len(rows) != n {
						b.Fatalf("raw: %v", err)
					}
					tStore += t1.Sub(t0)
					tRaw += time.Since(t1)
				}
				b.ReportMetric(float64(tStore.Microseconds())/float64(b.N)/1000, "store-ms")
				b.ReportMetric(float64(tRaw.Microseconds())/float64(b.N)/1000, "raw-ms")
				b.ReportMetric(float64(tStore)/float64(tRaw), "ratio")
			})
		})
	}
}

func BenchmarkSessionsQueue(b *testing.B) {
	const items, workers = 10000, 8
	for _, d := range dialects {
		b.Run(fmt.Sprintf("%s/items=%d/workers=%d", d, items, workers), func(b *testing.B) {
			h := newHarness(b, d)
			st := h.New(b)
			ctx := context.Background()
			s := repo.NewSession()
			if err := st.Sessions().Save(ctx, s); err != nil {
				b.Fatal(err)
			}
			q := st.SessionQueue()
			var elapsed time.Duration
			for b.Loop() {
				b.StopTimer()
				rows := make([]models.QueueItem, items)
				now := time.Now().UTC()
				for i := range rows {
					rows[i] = models.QueueItem{ID: uuid.New(), SessionID: s.ID, Operation: "enqueue", Content: fmt.Sprint("job ", i),
						Priority: int32(i % 4), Status: "pending", CreatedAt: now}
				}
				if err := st.DB(ctx).Omit("Session").CreateInBatches(rows, 1000).Error; err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				start := time.Now()
				var wg sync.WaitGroup
				var mu sync.Mutex
				var firstErr error
				done := 0
				for w := range workers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for {
							it, err := q.Dequeue(ctx, s.ID, repo.DequeueParams{Owner: fmt.Sprint("w", w), Lease: time.Minute})
							if agentstore.IsRetryable(err) {
								continue
							}
							if err == nil && it == nil {
								return
							}
							for err == nil {
								err = q.Complete(ctx, it.Lease())
								if !agentstore.IsRetryable(err) {
									break
								}
								err = nil
							}
							mu.Lock()
							if err != nil && firstErr == nil {
								firstErr = err
							}
							done++
							mu.Unlock()
							if err != nil {
								return
							}
						}
					}()
				}
				wg.Wait()
				elapsed += time.Since(start)
				if firstErr != nil || done != items {
					b.Fatalf("processed %d of %d: %v", done, items, firstErr)
				}
			}
			b.ReportMetric(float64(items*b.N)/elapsed.Seconds(), "items/s")
		})
	}
}

// BenchmarkSessionsAppendFeedCost measures what the change feed (V10's
// triggers) costs an append: it alternates single-message appends to a
// session of n messages on two databases of one dialect, one with the
// feed's triggers and one with them dropped (the append path as it was
// before V10), so machine load hits both alike, and reports each one's
// time per append and their ratio (with/without).
//
//	go test -run '^$' -bench 'BenchmarkSessionsAppendFeedCost' -benchtime 2000x .
func BenchmarkSessionsAppendFeedCost(b *testing.B) {
	drop := map[agentstore.Dialect][]string{
		agentstore.SQLite: {`DROP TRIGGER "agentstore_sessions_change_insert"`, `DROP TRIGGER "agentstore_sessions_change_update"`,
			`DROP TRIGGER "agentstore_sessions_change_delete"`, `DROP TRIGGER "agentstore_queue_change_insert"`,
			`DROP TRIGGER "agentstore_queue_change_status"`},
		agentstore.Postgres: {`DROP TRIGGER "trg_sessions_change" ON "agentstore_sessions"`,
			`DROP TRIGGER "trg_queue_change_insert" ON "agentstore_queue"`, `DROP TRIGGER "trg_queue_change_status" ON "agentstore_queue"`},
		agentstore.MariaDB: {`DROP TRIGGER "agentstore_sessions_change_insert"`, `DROP TRIGGER "agentstore_sessions_change_update"`,
			`DROP TRIGGER "agentstore_sessions_change_delete"`, `DROP TRIGGER "agentstore_queue_change_insert"`,
			`DROP TRIGGER "agentstore_queue_change_status"`},
	}
	// MariaDB too (V14's triggers; skipped when no server is reachable)
	for _, d := range append(dialects[:len(dialects):len(dialects)], agentstore.MariaDB) {
		for _, n := range []int{10, 10000} {
			b.Run(fmt.Sprintf("%s/n=%d", d, n), func(b *testing.B) {
				ctx := context.Background()
				with, ws := benchSession(b, d, n)
				h := newHarness(b, d)
				without, wos := benchSessionIn(b, h, n)
				db := without.DB(ctx)
				for _, stmt := range drop[d] {
					if h.Schema != "" {
						stmt = strings.Replace(stmt, `ON "`, `ON "`+h.Schema+`"."`, 1)
					}
					if err := db.Exec(stmt).Error; err != nil {
						b.Fatal(err)
					}
				}
				var tWith, tWithout time.Duration
				i := 0
				for b.Loop() {
					t0 := time.Now()
					if _, err := with.Sessions().AppendMessages(ctx, ws.ID, testkit.TextMsg(fmt.Sprint("f-", i), repo.RoleAssistant, "reply")); err != nil {
						b.Fatal(err)
					}
					t1 := time.Now()
					if _, err := without.Sessions().AppendMessages(ctx, wos.ID, testkit.TextMsg(fmt.Sprint("f-", i), repo.RoleAssistant, "reply")); err != nil {
						b.Fatal(err)
					}
					tWith += t1.Sub(t0)
					tWithout += time.Since(t1)
					i++
				}
				b.ReportMetric(float64(tWith.Microseconds())/float64(b.N), "feed-us")
				b.ReportMetric(float64(tWithout.Microseconds())/float64(b.N), "nofeed-us")
				b.ReportMetric(float64(tWith)/float64(tWithout), "ratio")
			})
		}
	}
}
