package main

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
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
					" is_compact_summary, \"usage\", metadata, model, request_id, environment, created_at)"+
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
	q := "SELECT seq, id, parent_id, role, content, is_sidechain, is_compact_summary, \"usage\", metadata, model," +
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

// benchAppendParallel: single-message AppendMessages from 8 goroutines, in
// two shapes: 8 sessions, one goroutine each; and 8 writers on one session.
// Beside each, the raw baseline (rawAppender): what a minimal correct
// append must do, one transaction per message, on the same driver, the
// same database and tables, the same pool and sync settings. The store and
// the raw baseline alternate for b.rounds rounds; medians and their ratio.
func (b *bench) benchAppendParallel(ctx context.Context, d string) {
	const sc = "append_parallel"
	syncs := []string{""}
	if d == "sqlite" {
		syncs = append(syncs, "FULL")
	}
	for _, mode := range syncs {
		name, tag, suffix := "parallel", "", ""
		if mode != "" {
			name += "_" + mode
			tag = " [synchronous=" + mode + "]"
			suffix = "/synchronous=" + mode
		}
		st, cleanup, err := b.openStore(ctx, d, name, mode)
		if err != nil {
			b.skipf(sc, d, "agentstore AppendMessages"+tag, "open store: %v", err)
			continue
		}
		raw, err := b.openRawAppender(ctx, d, st, name, mode)
		if err != nil {
			b.skipf(sc, d, "raw SQL append"+tag, "open: %v", err)
			cleanup()
			continue
		}
		w, per := b.sz.parallelSessions, b.sz.parallelAppends
		for _, shape := range []struct {
			key, label string
			sessions   int
		}{
			{"8_sessions", fmt.Sprintf("%d sessions x %d", w, per), w},
			{"1_session_8_writers", fmt.Sprintf("%d writers on 1 session x %d", w, per), 1},
		} {
			storeLabel := "agentstore AppendMessages" + tag + ", " + shape.label
			rawLabel := "raw SQL append (UPDATE session + INSERT message, 1 tx)" + tag + ", " + shape.label
			storeAppend := func(ctx context.Context, id uuid.UUID, msgID string) error {
				m := textMsg(msgID, repo.RoleUser, msgText)
				m.Usage = &repo.TokenUsage{InputTokens: 10, OutputTokens: 5}
				_, err := st.Sessions().AppendMessages(ctx, id, m)
				return err
			}
			sv, rv, err := parallelAppendRates(ctx, st, w, per, shape.sessions, max(1, b.rounds), storeAppend, raw.append)
			if err != nil {
				b.skipf(sc, d, storeLabel, "%v", err)
				continue
			}
			b.add(sc, d, storeLabel, sv, "events/s")
			b.add(sc, d, rawLabel, rv, "events/s")
			b.ratio(sc, d, "append_parallel_vs_raw/"+shape.key+suffix, sv, rv)
		}
		raw.close()
		cleanup()
	}
}

// parallelSlices is the number of slices each round is cut into.
const parallelSlices = 10

// parallelAppendRates measures two append functions in the same shape:
// writers goroutines, goroutine k appending to session k % nSessions (each
// subject has its own sessions), per single-message appends per goroutine
// and round. Every round is cut into parallelSlices slices, and the two
// subjects alternate slice by slice (which one goes first alternates too),
// so load changes on the machine hit both alike. It returns both rates in
// events/s over all rounds.
func parallelAppendRates(ctx context.Context, st *agentstore.Store, writers, per, nSessions, rounds int,
	a, b func(context.Context, uuid.UUID, string) error) (float64, float64, error) {
	newIDs := func() ([]uuid.UUID, error) {
		ids := make([]uuid.UUID, nSessions)
		for i := range ids {
			s := repo.NewSession()
			if err := st.Sessions().Save(ctx, s); err != nil {
				return nil, err
			}
			ids[i] = s.ID
		}
		return ids, nil
	}
	idsA, err := newIDs()
	if err != nil {
		return 0, 0, err
	}
	idsB, err := newIDs()
	if err != nil {
		return 0, 0, err
	}
	chunk := max(1, per/parallelSlices)
	var ta, tb time.Duration
	var n int
	for slice := range rounds * parallelSlices {
		first, second := 0, 1
		if slice%2 == 1 {
			first, second = 1, 0
		}
		for _, which := range []int{first, second} {
			fn, ids, tot := a, idsA, &ta
			if which == 1 {
				fn, ids, tot = b, idsB, &tb
			}
			el, err := appendBurst(ctx, writers, chunk, ids, slice, fn)
			if err != nil {
				return 0, 0, err
			}
			*tot += el
		}
		n += writers * chunk
	}
	return float64(n) / ta.Seconds(), float64(n) / tb.Seconds(), nil
}

// appendBurst runs writers goroutines making k appends each (message ids
// unique per slice, goroutine and call) and returns the elapsed time.
func appendBurst(ctx context.Context, writers, k int, ids []uuid.UUID, slice int, fn func(context.Context, uuid.UUID, string) error) (time.Duration, error) {
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	t0 := time.Now()
	for g := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := ids[g%len(ids)]
			for i := range k {
				if err := fn(ctx, id, fmt.Sprintf("p-%d-%d-%d", slice, g, i)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	el := time.Since(t0)
	close(errs)
	return el, <-errs
}

// rawAppender is the raw baseline of an append: in one transaction, advance
// the session row (last_seq, message_count, current_leaf_id, token totals,
// updated_at, version; RETURNING the new last_seq) and insert the message
// at that seq. It works on the store's own tables through its own
// database/sql handle on the same driver: pgx stdlib with the bench's pool
// on PostgreSQL; go-sql-driver/mysql with the same pool and the store's
// session settings on MariaDB (no RETURNING there: the UPDATE, then a read
// of last_seq on the row it locked); on SQLite one write connection with the store's DSN
// parameters (WAL, foreign keys, BEGIN IMMEDIATE, the synchronous mode and
// statement cache), as the store's write pool.
type rawAppender struct {
	db       *sql.DB
	advance  string
	insert   string
	postgres bool
	usage    string
	// readSeq, when set, reads the new last_seq after advance (MariaDB has
	// no UPDATE ... RETURNING; the row is locked by the UPDATE)
	readSeq string
}

func (b *bench) openRawAppender(ctx context.Context, d string, st *agentstore.Store, name, mode string) (*rawAppender, error) {
	r := &rawAppender{usage: `{"input_tokens":10,"output_tokens":5}`}
	ph := func(i int) string { return "?" }
	var err error
	switch d {
	case "postgres":
		r.postgres = true
		ph = func(i int) string { return fmt.Sprintf("$%d", i) }
		r.db, err = sql.Open("pgx", b.pgDSN)
		if err != nil {
			return nil, err
		}
		r.db.SetMaxOpenConns(pgPool)
		r.db.SetMaxIdleConns(pgPool)
	case "mariadb":
		r.db, err = b.openMaria(mariaPrefix+"as_"+name, pgPool)
		if err != nil {
			return nil, err
		}
	default:
		if mode == "" {
			mode = "NORMAL"
		}
		r.db, err = sql.Open("sqlite3", "file:"+filepath.Join(b.dir, name+".db")+
			"?_journal_mode=WAL&_busy_timeout=10000&_foreign_keys=on&_txlock=immediate&_synchronous="+mode+"&_stmt_cache_size=128")
		if err != nil {
			return nil, err
		}
		r.db.SetMaxOpenConns(1) // like the store's write pool: writers queue in Go
	}
	r.advance = "UPDATE " + st.Table(models.TableSessions) + " SET last_seq = last_seq + 1, message_count = message_count + 1," +
		" current_leaf_id = " + ph(1) + ", total_input_tokens = total_input_tokens + " + ph(2) +
		", total_output_tokens = total_output_tokens + " + ph(3) + ", updated_at = " + ph(4) + ", version = version + 1" +
		" WHERE id = " + ph(5) + " RETURNING last_seq"
	if d == "mariadb" {
		r.advance = strings.TrimSuffix(r.advance, " RETURNING last_seq")
		r.readSeq = "SELECT last_seq FROM " + st.Table(models.TableSessions) + " WHERE id = ?"
	}
	r.insert = "INSERT INTO " + st.Table(models.TableMessages) + " (session_id, seq, id, role, content, \"usage\", created_at)" +
		" VALUES (" + ph(1) + ", " + ph(2) + ", " + ph(3) + ", " + ph(4) + ", " + ph(5) + ", " + ph(6) + ", " + ph(7) + ")"
	if err := r.db.PingContext(ctx); err != nil {
		r.db.Close()
		return nil, err
	}
	return r, nil
}

func (r *rawAppender) append(ctx context.Context, id uuid.UUID, msgID string) error {
	now := time.Now().UTC().Truncate(time.Microsecond)
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var seq int64
	if r.readSeq != "" {
		res, err := tx.ExecContext(ctx, r.advance, msgID, 10, 5, now, id.String())
		if err == nil {
			if k, _ := res.RowsAffected(); k != 1 {
				err = fmt.Errorf("session %s not found", id)
			}
		}
		if err == nil {
			err = tx.QueryRowContext(ctx, r.readSeq, id.String()).Scan(&seq)
		}
		if err != nil {
			return fmt.Errorf("advance session: %w", err)
		}
	} else if err := tx.QueryRowContext(ctx, r.advance, msgID, 10, 5, now, id.String()).Scan(&seq); err != nil {
		return fmt.Errorf("advance session: %w", err)
	}
	content := `[{"type":"text","text":"` + msgText + `"}]`
	if _, err := tx.ExecContext(ctx, r.insert, id.String(), seq, msgID, "user", content, r.usage, now); err != nil {
		return fmt.Errorf("insert message: %w", err)
	}
	return tx.Commit()
}

func (r *rawAppender) close() { _ = r.db.Close() }
