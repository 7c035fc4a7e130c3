package main

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo"
)

const msgText = "some message text of moderate length for the benchmark, about as long as a short chat turn"

func textMsg(id string, role repo.Role, text string) repo.Message {
	return repo.Message{ID: id, Role: role, Content: []byte(`[{"type":"text","text":"` + text + `"}]`)}
}

// seedSession creates a session holding n messages (appended in batches).
func seedSession(ctx context.Context, st *agentstore.Store, n int) (*repo.Session, error) {
	r := st.Sessions()
	s := repo.NewSession()
	if err := r.Save(ctx, s); err != nil {
		return nil, fmt.Errorf("save session: %w", err)
	}
	const batch = 1000
	for done := 0; done < n; done += batch {
		msgs := make([]repo.Message, 0, batch)
		for i := done; i < min(n, done+batch); i++ {
			m := textMsg(fmt.Sprintf("m-%d", i), repo.RoleUser, msgText)
			m.Usage = &repo.TokenUsage{InputTokens: 100, OutputTokens: 20}
			msgs = append(msgs, m)
		}
		if _, err := r.AppendMessages(ctx, s.ID, msgs...); err != nil {
			return nil, fmt.Errorf("seed messages: %w", err)
		}
	}
	return s, nil
}

// benchAppend: append one message to a session of 10 and of 10,000
// messages, and the seed's save strategy at 10,000.
func (b *bench) benchAppend(ctx context.Context, d string) {
	const sc = "append"
	st, cleanup, err := b.openStore(ctx, d, "append", "")
	if err != nil {
		b.skipf(sc, d, "agentstore", "open store: %v", err)
		return
	}
	defer cleanup()
	r := st.Sessions()
	sizes := []int{b.sz.appendSmall, b.sz.appendLarge}
	ids := make([]uuid.UUID, len(sizes))
	for k, n := range sizes {
		s, err := seedSession(ctx, st, n)
		if err != nil {
			b.skipf(sc, d, fmt.Sprintf("agentstore append @%d", n), "%v", err)
			return
		}
		ids[k] = s.ID
	}
	// Appends alternate between the two sessions so that machine noise hits
	// both sizes alike; the first 5 rounds warm up.
	times := make([][]time.Duration, len(sizes))
	for i := range b.sz.appendOps + 5 {
		for k, id := range ids {
			t0 := time.Now()
			if _, err := r.AppendMessages(ctx, id, textMsg(fmt.Sprintf("a-%d", i), repo.RoleAssistant, "reply")); err != nil {
				b.skipf(sc, d, fmt.Sprintf("agentstore append @%d", sizes[k]), "%v", err)
				return
			}
			if i >= 5 {
				times[k] = append(times[k], time.Since(t0))
			}
		}
	}
	per := map[int]time.Duration{}
	for k, n := range sizes {
		per[n] = median(times[k])
		b.add(sc, d, fmt.Sprintf("agentstore AppendMessages, session of %d, median", n), ms(per[n]), "ms/op")
		b.add(sc, d, fmt.Sprintf("agentstore AppendMessages, session of %d, p99", n), ms(percentile(times[k], 0.99)), "ms/op")
	}
	// The seed's save: delete every message row, then insert each message
	// with its own statement, in one transaction.
	s, err := seedSession(ctx, st, b.sz.appendLarge)
	var seed time.Duration
	if err == nil {
		seed, err = seedRewrite(ctx, st, s.ID, b.sz.seedOps)
	}
	if err != nil {
		b.skipf(sc, d, "seed rewrite", "%v", err)
	} else {
		b.add(sc, d, fmt.Sprintf("seed strategy (delete all + insert each), session of %d", b.sz.appendLarge), ms(seed), "ms/op")
	}
	b.ratio(sc, d, "append_flatness", float64(per[b.sz.appendLarge]), float64(per[b.sz.appendSmall]))
	b.ratio(sc, d, "append_vs_seed", float64(seed), float64(per[b.sz.appendLarge]))
}

// seedRewrite times the seed's save strategy (median of ops runs).
func seedRewrite(ctx context.Context, st *agentstore.Store, id uuid.UUID, ops int) (time.Duration, error) {
	var rows []models.Message
	if err := st.DB(ctx).Where("session_id = ?", id).Order("seq").Find(&rows).Error; err != nil {
		return 0, err
	}
	mt := st.Table(models.TableMessages)
	var times []time.Duration
	for i := range ops {
		rows = append(rows, models.Message{SessionID: id, Seq: int64(len(rows) + 1), ID: fmt.Sprintf("r-%d", i),
			Role: "assistant", Content: models.VerbatimJSON(`[{"type":"text","text":"reply"}]`), CreatedAt: time.Now().UTC()})
		t0 := time.Now()
		err := st.DB(ctx).Transaction(func(tx *gorm.DB) error {
			if err := tx.Exec("UPDATE "+st.Table(models.TableSessions)+" SET updated_at = ?, last_seq = ? WHERE id = ?",
				time.Now().UTC(), len(rows), id).Error; err != nil {
				return err
			}
			if err := tx.Exec("DELETE FROM "+mt+" WHERE session_id = ?", id).Error; err != nil {
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
			return 0, err
		}
		times = append(times, time.Since(t0))
	}
	return median(times), nil
}

// benchLoad: load a 10,000-message session vs one plain SQL query returning
// the same rows on the same driver (database/sql + pgx stdlib / mattn).
func (b *bench) benchLoad(ctx context.Context, d string) {
	const sc = "load"
	st, cleanup, err := b.openStore(ctx, d, "load", "")
	if err != nil {
		b.skipf(sc, d, "agentstore", "open store: %v", err)
		return
	}
	defer cleanup()
	s, err := seedSession(ctx, st, b.sz.loadMessages)
	if err != nil {
		b.skipf(sc, d, "agentstore", "%v", err)
		return
	}
	n := b.sz.loadMessages
	r := st.Sessions()
	load := func() error {
		got, err := r.Load(ctx, s.ID)
		if err == nil && len(got.Messages) != n {
			err = fmt.Errorf("loaded %d messages, want %d", len(got.Messages), n)
		}
		return err
	}
	ph := "?"
	if d == "postgres" {
		ph = "$1"
	}
	q := "SELECT seq, id, parent_id, role, content, is_sidechain, is_compact_summary, usage, metadata, model," +
		" request_id, environment, created_at FROM " + st.Table(models.TableMessages) + " WHERE session_id = " + ph + " ORDER BY seq"
	raw := func() error {
		rows, err := st.SQLDB().QueryContext(ctx, q, s.ID.String())
		if err != nil {
			return err
		}
		defer rows.Close()
		count := 0
		for rows.Next() {
			var (
				seq                       int64
				id, role                  string
				parent, model, req        sql.NullString
				content, usage, meta, env []byte
				side, compact             bool
				created                   any
			)
			if err := rows.Scan(&seq, &id, &parent, &role, &content, &side, &compact, &usage, &meta, &model, &req, &env, &created); err != nil {
				return err
			}
			count++
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if count != n {
			return fmt.Errorf("raw query returned %d rows, want %d", count, n)
		}
		return nil
	}
	// Interleave the two so that machine noise hits both alike.
	var ta, tr []time.Duration
	for i := range b.sz.loadOps + 1 {
		t0 := time.Now()
		if err := load(); err != nil {
			b.skipf(sc, d, "agentstore Load", "%v", err)
			return
		}
		t1 := time.Now()
		if err := raw(); err != nil {
			b.skipf(sc, d, "raw SQL", "%v", err)
			return
		}
		if i > 0 { // first round is the warm-up
			ta, tr = append(ta, t1.Sub(t0)), append(tr, time.Since(t1))
		}
	}
	b.add(sc, d, fmt.Sprintf("agentstore Load, %d messages, median", n), ms(median(ta)), "ms/op")
	b.add(sc, d, fmt.Sprintf("raw SQL query + scan, %d rows, median", n), ms(median(tr)), "ms/op")
	b.ratio(sc, d, "load_vs_raw", float64(median(ta)), float64(median(tr)))
}

// benchAppendParallel: 8 sessions appended to in parallel, one goroutine per
// session, one message per AppendMessages call.
func (b *bench) benchAppendParallel(ctx context.Context, d string) {
	const sc = "append_parallel"
	syncs := []string{""}
	if d == "sqlite" {
		syncs = append(syncs, "FULL")
	}
	for _, mode := range syncs {
		label := "agentstore AppendMessages"
		name := "parallel"
		if mode != "" {
			label += " [synchronous=" + mode + "]"
			name += "_" + mode
		}
		label += fmt.Sprintf(", %d sessions x %d", b.sz.parallelSessions, b.sz.parallelAppends)
		st, cleanup, err := b.openStore(ctx, d, name, mode)
		if err != nil {
			b.skipf(sc, d, label, "open store: %v", err)
			continue
		}
		ids := make([]uuid.UUID, b.sz.parallelSessions)
		for i := range ids {
			s := repo.NewSession()
			if err = st.Sessions().Save(ctx, s); err != nil {
				break
			}
			ids[i] = s.ID
		}
		if err != nil {
			cleanup()
			b.skipf(sc, d, label, "%v", err)
			continue
		}
		var wg sync.WaitGroup
		errs := make(chan error, len(ids))
		t0 := time.Now()
		for _, id := range ids {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := st.Sessions()
				for i := range b.sz.parallelAppends {
					m := textMsg(fmt.Sprintf("p-%d", i), repo.RoleUser, msgText)
					m.Usage = &repo.TokenUsage{InputTokens: 10, OutputTokens: 5}
					if _, err := r.AppendMessages(ctx, id, m); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		el := time.Since(t0)
		close(errs)
		if err := <-errs; err != nil {
			b.skipf(sc, d, label, "%v", err)
		} else {
			b.add(sc, d, label, float64(len(ids)*b.sz.parallelAppends)/el.Seconds(), "events/s")
		}
		cleanup()
	}
}
