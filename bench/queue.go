package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	_ "github.com/mattn/go-sqlite3" // database/sql driver "sqlite3" (raw baseline, River)

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/repo"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// benchQueue: 8 workers claim+complete N items of the session queue, of the
// provider's worker queue, of a hand-written raw-SQL peek-lock queue on the
// same driver, and River (tuned: 2 ms fetch cooldown, 20 ms poll) works N
// no-op jobs; the two agentstore queues also with group commit switched
// off (group_commit_gain = on / off, same run). On SQLite at the shipped
// synchronous setting (NORMAL) and at FULL.
//
// Every subject is filled with N items (River: its queue paused, see
// riverQueue) and then drained in slices of N/10 items, the subjects
// taking turns slice by slice (the order rotating), so that load changes
// on the machine (other processes, checkpoints, autovacuum) hit all of
// them alike; each rate is the items of all rounds over the time spent
// draining them. (Until the sixth session River ran whole drains after
// the others, its median reported: on this machine's drifting load its
// rate and so queue_vs_river swung by ±30 % from run to run.) On
// PostgreSQL (a local server, Linux) the CPU each of the first three
// subjects cost per item is reported too: the server's processes and the
// bench process (the latter includes the garbage collection of whatever
// ran before, so it is approximate).
func (b *bench) benchQueue(ctx context.Context, d string) {
	syncs := []string{""}
	if d == "sqlite" {
		syncs = append(syncs, "FULL")
	}
	for _, sync := range syncs {
		b.queueRound(ctx, d, sync)
	}
}

// queueSubject is a filled queue ready to be drained: step processes at
// most one item for worker k and reports whether it did. A subject that
// drains a slice its own way (River) sets slice instead, which processes
// k items and returns the time they took.
type queueSubject struct {
	step    func(ctx context.Context, worker int) (bool, error)
	slice   func(ctx context.Context, k int) (time.Duration, error)
	cleanup func()
}

// drainSlice processes k items of q with w workers and returns the time
// they took.
func (q *queueSubject) drainSlice(ctx context.Context, k, w int) (time.Duration, error) {
	if q.slice != nil {
		return q.slice(ctx, k)
	}
	t0 := time.Now()
	if _, err := drain(ctx, k, w, q.step); err != nil {
		return 0, err
	}
	return time.Since(t0), nil
}

// queueSlices is the number of slices each filled queue is drained in.
const queueSlices = 10

func (b *bench) queueRound(ctx context.Context, d, sync string) {
	const sc = "queue"
	n, w := b.sz.queueItems, b.sz.queueWorkers
	tag := ""
	if sync != "" {
		tag = " [synchronous=" + sync + "]"
	} else if d == "sqlite" {
		tag = " [synchronous=NORMAL]"
	}
	suffix := fmt.Sprintf(", %d items, %d workers%s", n, w, tag)
	rsuf := ""
	if sync != "" {
		rsuf = "/synchronous=" + sync
	}
	subjects := []struct {
		label string
		open  func() (queueSubject, error)
	}{
		{"agentstore session queue (Dequeue+Complete)", func() (queueSubject, error) { return b.sessionQueue(ctx, d, sync, true) }},
		{"agentstore provider worker queue (FetchWorkItem+AckWorkItem)", func() (queueSubject, error) { return b.workerQueue(ctx, d, sync, true) }},
		{"raw SQL peek-lock queue (claim UPDATE + DELETE)", func() (queueSubject, error) { return b.rawQueue(ctx, d, sync) }},
		// the same two queues with group commit switched off
		// (WithoutCapabilities(CapGroupCommit)): every Complete / ack
		// commits on its own, as before group commit
		{"agentstore session queue, group commit off", func() (queueSubject, error) { return b.sessionQueue(ctx, d, sync, false) }},
		{"agentstore provider worker queue, group commit off", func() (queueSubject, error) { return b.workerQueue(ctx, d, sync, false) }},
		{"River v0.51.2 no-op jobs (cooldown 2 ms, poll 20 ms)", func() (queueSubject, error) { return b.riverQueue(ctx, d, sync) }},
	}
	const riverSubject = 5 // the last subject above
	spent := make([]time.Duration, len(subjects))
	// CPU spent while each subject drained: the local PostgreSQL server's
	// processes and this process (PostgreSQL only; see cpuNow)
	serverCPU := make([]time.Duration, len(subjects))
	clientCPU := make([]time.Duration, len(subjects))
	cpuOK := d == "postgres"
	done := make([]int, len(subjects))
	errs := make([]error, len(subjects))
	per := max(1, n/queueSlices)
	for range b.rounds {
		open := make([]*queueSubject, len(subjects))
		for i, s := range subjects {
			if errs[i] != nil {
				continue
			}
			q, err := s.open()
			if err != nil {
				errs[i] = err
				continue
			}
			open[i] = &q
		}
		for slice := range queueSlices {
			for j := range subjects {
				i := (j + slice) % len(subjects)
				if open[i] == nil || errs[i] != nil {
					continue
				}
				k := per
				if slice == queueSlices-1 {
					k = n - per*(queueSlices-1)
				}
				var srv0, cli0 time.Duration
				if cpuOK {
					srv0, cli0, cpuOK = cpuNow()
				}
				el, err := open[i].drainSlice(ctx, k, w)
				if err != nil {
					errs[i] = err
					continue
				}
				spent[i] += el
				if cpuOK {
					srv1, cli1, ok := cpuNow()
					cpuOK = ok
					serverCPU[i] += srv1 - srv0
					clientCPU[i] += cli1 - cli0
				}
				done[i] += k
			}
		}
		for _, q := range open {
			if q != nil {
				q.cleanup()
			}
		}
	}
	rates := make([]float64, len(subjects))
	for i, s := range subjects {
		if errs[i] != nil || done[i] == 0 {
			b.skipf(sc, d, s.label+suffix, "%v", errs[i])
			continue
		}
		rates[i] = float64(done[i]) / spent[i].Seconds()
		unit := "items/s"
		if i == riverSubject {
			unit = "jobs/s"
		}
		b.add(sc, d, s.label+suffix, rates[i], unit)
		if cpuOK && i < 3 {
			per := func(t time.Duration) float64 { return float64(t.Microseconds()) / float64(done[i]) }
			b.add(sc, d, s.label+", CPU per item: server", per(serverCPU[i]), "µs")
			b.add(sc, d, s.label+", CPU per item: client", per(clientCPU[i]), "µs")
		}
	}
	sessRate, workRate, rawRate, riverRate := rates[0], rates[1], rates[2], rates[riverSubject]
	b.ratio(sc, d, "queue_vs_raw/session_queue"+rsuf, sessRate, rawRate)
	b.ratio(sc, d, "queue_vs_raw/worker_queue"+rsuf, workRate, rawRate)
	if d != "mariadb" { // River has no MariaDB driver (listed under "Not run")
		b.ratio(sc, d, "queue_vs_river/session_queue"+rsuf, sessRate, riverRate)
		b.ratio(sc, d, "queue_vs_river/worker_queue"+rsuf, workRate, riverRate)
	}
	b.ratio(sc, d, "group_commit_gain/session_queue"+rsuf, sessRate, rates[3])
	b.ratio(sc, d, "group_commit_gain/worker_queue"+rsuf, workRate, rates[4])
}

// openQueueStore opens a fresh store like openStore, with group commit
// on (the default) or switched off.
func (b *bench) openQueueStore(ctx context.Context, d, name, sync string, groupCommit bool) (*agentstore.Store, func(), error) {
	if groupCommit {
		return b.openStore(ctx, d, name, sync)
	}
	return b.openStore(ctx, d, name+"_nogc", sync, agentstore.WithoutCapabilities(agentstore.CapGroupCommit))
}

// fill runs insert(i) for i in [0,n) on 8 goroutines.
func fill(n int, insert func(i int) error) error {
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < n; i += 8 {
				if err := insert(i); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// drain runs w workers calling step until n items were processed; step
// reports whether it processed one. It returns items/s.
func drain(ctx context.Context, n, w int, step func(ctx context.Context, worker int) (bool, error)) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	var done, reserved atomic.Int64
	var wg sync.WaitGroup
	var once sync.Once
	var firstErr error
	t0 := time.Now()
	for k := range w {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// a worker reserves an item before its step, so that exactly
			// n items are processed (a drain in slices leaves the rest)
			for ctx.Err() == nil {
				if reserved.Add(1) > int64(n) {
					// every item is reserved: done once they are all
					// processed, else wait for a reservation to come back
					// (a step that found nothing: SKIP LOCKED may find the
					// remaining items locked by the other workers' claims)
					reserved.Add(-1)
					if done.Load() >= int64(n) {
						return
					}
					time.Sleep(time.Millisecond)
					continue
				}
				ok, err := step(ctx, k)
				if !ok {
					reserved.Add(-1)
				}
				if err != nil {
					if errors.Is(err, agentstore.ErrRetryable) {
						continue
					}
					once.Do(func() { firstErr = err; cancel() })
					return
				}
				if ok {
					done.Add(1)
				} else {
					time.Sleep(time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	el := time.Since(t0)
	if firstErr != nil {
		return 0, firstErr
	}
	if got := done.Load(); got < int64(n) {
		return 0, fmt.Errorf("processed %d of %d items: %v", got, n, ctx.Err())
	}
	return float64(n) / el.Seconds(), nil
}

// sessionQueue opens a store and fills its session queue (one session)
// with N items.
func (b *bench) sessionQueue(ctx context.Context, d, sync string, groupCommit bool) (queueSubject, error) {
	st, cleanup, err := b.openQueueStore(ctx, d, "squeue"+sync, sync, groupCommit)
	if err != nil {
		return queueSubject{}, err
	}
	s := repo.NewSession()
	if err := st.Sessions().Save(ctx, s); err != nil {
		cleanup()
		return queueSubject{}, err
	}
	q := st.SessionQueue()
	if err := fill(b.sz.queueItems, func(i int) error {
		_, err := q.Enqueue(ctx, s.ID, fmt.Sprintf(`{"job":%d}`, i), int32(i%4))
		return err
	}); err != nil {
		cleanup()
		return queueSubject{}, fmt.Errorf("enqueue: %w", err)
	}
	owners := make([]string, b.sz.queueWorkers)
	for k := range owners {
		owners[k] = fmt.Sprint("w", k)
	}
	return queueSubject{cleanup: cleanup, step: func(ctx context.Context, k int) (bool, error) {
		it, err := q.Dequeue(ctx, s.ID, repo.DequeueParams{Owner: owners[k], Lease: time.Minute})
		if err != nil || it == nil {
			return false, err
		}
		for {
			err = q.Complete(ctx, it.Lease())
			if !errors.Is(err, agentstore.ErrRetryable) {
				return err == nil, err
			}
		}
	}}, nil
}

// workerQueue opens a store and fills its provider worker queue with N
// activity items.
func (b *bench) workerQueue(ctx context.Context, d, sync string, groupCommit bool) (queueSubject, error) {
	st, cleanup, err := b.openQueueStore(ctx, d, "wqueue"+sync, sync, groupCommit)
	if err != nil {
		return queueSubject{}, err
	}
	p := st.Provider()
	if err := fill(b.sz.queueItems, func(i int) error {
		return p.EnqueueForWorker(ctx, &duroxide.ActivityExecute{Instance: fmt.Sprintf("inst-%d", i), ExecutionID: 1, ID: 2,
			Name: "noop", Input: fmt.Sprintf(`{"job":%d}`, i)})
	}); err != nil {
		cleanup()
		return queueSubject{}, fmt.Errorf("enqueue: %w", err)
	}
	return queueSubject{cleanup: cleanup, step: func(ctx context.Context, _ int) (bool, error) {
		l, err := p.FetchWorkItem(ctx, time.Minute, 0, nil, duroxide.TagFilter{})
		if err != nil || l == nil {
			return false, err
		}
		for {
			err = p.AckWorkItem(ctx, l.LockToken, nil)
			if !errors.Is(err, agentstore.ErrRetryable) {
				return err == nil, err
			}
		}
	}}, nil
}

// ---------------------------------------------------------------------------
// raw SQL peek-lock queue (peers.md Appendix A), on database/sql with the
// same drivers agentstore uses (pgx stdlib; mattn/go-sqlite3).

const rawPGSchema = `CREATE TABLE work_item (
  id           bigserial PRIMARY KEY,
  payload      text        NOT NULL,
  visible_at   timestamptz NOT NULL DEFAULT now(),
  locked_until timestamptz,
  lock_token   text,
  attempts     int         NOT NULL DEFAULT 0
);
CREATE INDEX work_item_ready ON work_item (visible_at, id);`

const rawLiteSchema = `CREATE TABLE work_item (
  id           INTEGER PRIMARY KEY AUTOINCREMENT,
  payload      TEXT    NOT NULL,
  visible_at   INTEGER NOT NULL,
  locked_until INTEGER,
  lock_token   TEXT,
  attempts     INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX work_item_ready ON work_item (visible_at, id);`

// rawMariaSchema is the raw queue on MariaDB (InnoDB, the store's
// DATETIME(6) in UTC).
var rawMariaSchema = []string{`CREATE TABLE work_item (
  id           BIGINT AUTO_INCREMENT PRIMARY KEY,
  payload      LONGTEXT     NOT NULL,
  visible_at   DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  locked_until DATETIME(6),
  lock_token   VARCHAR(64),
  attempts     INT          NOT NULL DEFAULT 0
) ENGINE=InnoDB`, `CREATE INDEX work_item_ready ON work_item (visible_at, id)`}

func token() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// rawQueue creates the raw queue's table and fills it with N items.
func (b *bench) rawQueue(ctx context.Context, d, sync string) (_ queueSubject, err error) {
	var cleanups []func()
	cleanup := func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
	}
	defer func() {
		if err != nil {
			cleanup()
		}
	}()
	var db *sql.DB
	var insert func(i int) error
	var claim func(ctx context.Context, tok string) (int64, bool, error)
	var ack func(ctx context.Context, id int64, tok string) error
	switch d {
	case "postgres":
		schema := "bench_raw"
		if err := b.resetSchema(ctx, schema); err != nil {
			return queueSubject{}, err
		}
		cleanups = append(cleanups, func() { b.dropSchema(context.Background(), schema) })
		db, err = sql.Open("pgx", b.pgDSNWithSearchPath(schema))
		if err != nil {
			return queueSubject{}, err
		}
		cleanups = append(cleanups, func() { db.Close() })
		db.SetMaxOpenConns(pgPool)
		db.SetMaxIdleConns(pgPool)
		if _, err := db.ExecContext(ctx, rawPGSchema); err != nil {
			return queueSubject{}, err
		}
		insert = func(i int) error {
			_, err := db.ExecContext(ctx, `INSERT INTO work_item (payload) VALUES ($1)`, fmt.Sprintf(`{"i":%d}`, i))
			return err
		}
		claim = func(ctx context.Context, tok string) (int64, bool, error) {
			var id int64
			err := db.QueryRowContext(ctx, `UPDATE work_item SET lock_token = $1, locked_until = now() + interval '30 seconds', attempts = attempts + 1
WHERE id = (SELECT id FROM work_item
            WHERE visible_at <= now() AND (locked_until IS NULL OR locked_until < now())
            ORDER BY visible_at, id LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING id`, tok).Scan(&id)
			if errors.Is(err, sql.ErrNoRows) {
				return 0, false, nil
			}
			return id, err == nil, err
		}
		ack = func(ctx context.Context, id int64, tok string) error {
			res, err := db.ExecContext(ctx, `DELETE FROM work_item WHERE id = $1 AND lock_token = $2`, id, tok)
			if err == nil {
				if k, _ := res.RowsAffected(); k != 1 {
					err = fmt.Errorf("lost lock on %d", id)
				}
			}
			return err
		}
	case "mariadb":
		name, err := b.resetMariaDB(ctx, "raw")
		if err != nil {
			return queueSubject{}, err
		}
		cleanups = append(cleanups, func() { _ = b.dropMariaDB(context.Background(), "raw") })
		db, err = b.openMaria(name, pgPool)
		if err != nil {
			return queueSubject{}, err
		}
		cleanups = append(cleanups, func() { db.Close() })
		for _, stmt := range rawMariaSchema {
			if _, err := db.ExecContext(ctx, stmt); err != nil {
				return queueSubject{}, err
			}
		}
		insert = func(i int) error {
			_, err := db.ExecContext(ctx, `INSERT INTO work_item (payload) VALUES (?)`, fmt.Sprintf(`{"i":%d}`, i))
			return err
		}
		// no UPDATE ... RETURNING, no LIMIT in an IN subquery: the claim is
		// a locking read whose ORDER BY the index (visible_at, id) serves
		// exactly, then the UPDATE, in one transaction
		claim = func(ctx context.Context, tok string) (int64, bool, error) {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return 0, false, err
			}
			defer tx.Rollback()
			var id int64
			err = tx.QueryRowContext(ctx, `SELECT id FROM work_item
WHERE visible_at <= NOW(6) AND (locked_until IS NULL OR locked_until < NOW(6))
ORDER BY visible_at, id LIMIT 1 FOR UPDATE SKIP LOCKED`).Scan(&id)
			if errors.Is(err, sql.ErrNoRows) {
				return 0, false, nil
			}
			if err != nil {
				return 0, false, err
			}
			if _, err := tx.ExecContext(ctx, `UPDATE work_item SET lock_token = ?, locked_until = NOW(6) + INTERVAL 30 SECOND, attempts = attempts + 1
WHERE id = ?`, tok, id); err != nil {
				return 0, false, err
			}
			return id, true, tx.Commit()
		}
		ack = func(ctx context.Context, id int64, tok string) error {
			res, err := db.ExecContext(ctx, `DELETE FROM work_item WHERE id = ? AND lock_token = ?`, id, tok)
			if err == nil {
				if k, _ := res.RowsAffected(); k != 1 {
					err = fmt.Errorf("lost lock on %d", id)
				}
			}
			return err
		}
	default:
		if sync == "" {
			sync = "NORMAL"
		}
		path := filepath.Join(b.dir, "raw"+sync+".db")
		cleanups = append(cleanups, func() {
			for _, s := range []string{"", "-wal", "-shm"} {
				_ = os.Remove(path + s)
			}
		})
		db, err = sql.Open("sqlite3", "file:"+path+"?_journal_mode=WAL&_busy_timeout=5000&_txlock=immediate&_synchronous="+sync)
		if err != nil {
			return queueSubject{}, err
		}
		cleanups = append(cleanups, func() { db.Close() })
		db.SetMaxOpenConns(1) // one writer connection; all goroutines queue on it
		if _, err := db.ExecContext(ctx, rawLiteSchema); err != nil {
			return queueSubject{}, err
		}
		insert = func(i int) error {
			_, err := db.ExecContext(ctx, `INSERT INTO work_item (payload, visible_at) VALUES (?, ?)`, fmt.Sprintf(`{"i":%d}`, i), time.Now().UnixMilli())
			return err
		}
		claim = func(ctx context.Context, tok string) (int64, bool, error) {
			now := time.Now().UnixMilli()
			var id int64
			err := db.QueryRowContext(ctx, `UPDATE work_item SET lock_token = ?, locked_until = ?, attempts = attempts + 1
WHERE id = (SELECT id FROM work_item
            WHERE visible_at <= ? AND (locked_until IS NULL OR locked_until < ?)
            ORDER BY visible_at, id LIMIT 1)
RETURNING id`, tok, now+30_000, now, now).Scan(&id)
			if errors.Is(err, sql.ErrNoRows) {
				return 0, false, nil
			}
			return id, err == nil, err
		}
		ack = func(ctx context.Context, id int64, tok string) error {
			res, err := db.ExecContext(ctx, `DELETE FROM work_item WHERE id = ? AND lock_token = ?`, id, tok)
			if err == nil {
				if k, _ := res.RowsAffected(); k != 1 {
					err = fmt.Errorf("lost lock on %d", id)
				}
			}
			return err
		}
	}
	if err := fill(b.sz.queueItems, insert); err != nil {
		return queueSubject{}, fmt.Errorf("insert: %w", err)
	}
	toks := make([]string, b.sz.queueWorkers)
	for i := range toks {
		toks[i] = token()
	}
	return queueSubject{cleanup: cleanup, step: func(ctx context.Context, k int) (bool, error) {
		id, ok, err := claim(ctx, toks[k])
		if err != nil || !ok {
			return false, err
		}
		return true, ack(ctx, id, toks[k])
	}}, nil
}
