package sqlite

import (
	"context"
	"database/sql"
	"path/filepath"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentstore/agentstore/internal/dialect"

	"github.com/fsnotify/fsnotify"
)

// Cross-process wake-up on SQLite. SQLite has no notification channel, but
// every connection can ask, almost for free, whether anyone else committed
// since it last asked: PRAGMA data_version reads a counter from the WAL
// index in shared memory (no table or page access). While at least one
// fetch of this Store is waiting, one goroutine asks that on its own
// connection every liteWatchInterval and, when the answer changes, wakes
// the waiting fetchers, which then re-run their (indexed) claim. So a
// fetch waiting here returns within about a millisecond of an enqueue by
// another Store or process, instead of at its next fallback re-check.
// When nothing waits, the watcher blocks and issues no queries.
//
// A commit writes the database's -wal file (or, without WAL, the database
// file or its -journal). Where the operating system reports file changes
// (inotify, kqueue, ...: fsnotify on the database's directory), the watcher
// reads data_version only in a short window after such a write
// (liteSettleWindow, every liteWatchInterval: the writer updates the
// shared-memory counter after its write, possibly after an fsync) and once
// per liteSafetyInterval otherwise, so an idle wait costs about one query
// per second instead of one per liteWatchInterval. Where it cannot watch
// the directory (an in-memory database, an error), it reads every
// liteWatchInterval while fetchers wait.

// data_version changes at every commit of another connection, and the
// Store's own writes go through its write connection, another connection
// than the watcher's: so the watcher saw the Store's own commits too, and
// every session write woke every waiting fetch of the Store for a claim
// that found nothing (1,000 appends with four provider fetches waiting
// cost about 2,900 provider statements and half the append rate). The
// Store's own commits wake its fetchers in-process already (an enqueue
// hands off or notifies, a session write notifies the change feed), so
// where the Store has a write connection of its own (a file opened by
// Open: dialect.Env.WriteDB), a change the watcher sees is confirmed on
// that write connection before it wakes anyone (ownOnly): its
// data_version changes only at commits of other connections — other
// Stores and processes. The one kind of the Store's own commit that wakes
// nothing in-process, an application transaction the Store's TxView
// wrote in (InTx, on that write connection), is counted
// (dialect.Env.OwnTxWrites) and wakes the fetchers once the write
// connection is free again (so the transaction has ended). A write
// connection that cannot be had within liteWriterWait, or was replaced,
// or a read that fails, wakes them as before.

// liteWriterWait bounds how long the watcher waits for the Store's write
// connection to tell its own commits from others' (while a write
// transaction holds it, no other connection can commit anyway).
const liteWriterWait = 100 * time.Millisecond

// liteWatchInterval is how often the watcher reads data_version while
// fetchers wait and files change (or always, without file events).
const liteWatchInterval = 2 * time.Millisecond

// liteSettleWindow is how long after the last write to the database's
// files the watcher keeps reading data_version every liteWatchInterval.
const liteSettleWindow = 100 * time.Millisecond

// liteSafetyInterval is how often the watcher reads data_version while
// fetchers wait and no file changes (a change the events missed).
const liteSafetyInterval = time.Second

// liteWatcher is a Store's data_version watcher (SQLite).
type liteWatcher struct {
	env      *dialect.Env
	onChange func()

	waiters atomic.Int32
	kick    chan struct{} // a first waiter arrived
	checks  atomic.Int64  // data_version reads (tests)
	up      atomic.Bool   // watching on a connection (healthy)
	events  atomic.Bool   // watching through file events (tests)

	mu      sync.Mutex
	started bool
	closed  bool
	wg      sync.WaitGroup

	// what the write connection showed at the last ownOnly (the watcher
	// goroutine's own state)
	wConn    uintptr // the driver connection (0: none or unknown; a replaced one shows nothing)
	wVersion int64
	wTx      uint64
	skipped  atomic.Int64 // changes found to be the Store's own (tests)
}

func newLiteWatcher(env *dialect.Env, onChange func()) *liteWatcher {
	return &liteWatcher{env: env, onChange: onChange, kick: make(chan struct{}, 1)}
}

// publish implements dialect.Waker: other Stores notice this Store's commits
// through data_version, so there is nothing to send.
func (w *liteWatcher) Publish(string) {}

// waiting records that a fetcher starts (+1) or stops (-1) waiting.
func (w *liteWatcher) Waiting(delta int32) {
	if w.waiters.Add(delta) == 1 && delta > 0 {
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}
}

// start runs the watcher goroutine once. It holds one pooled connection
// for the Store's lifetime, so a pool of fewer than three connections (an
// in-memory database has one) relies on the fallback re-check alone.
func (w *liteWatcher) Start() {
	if m := w.env.SQLDB.Stats().MaxOpenConnections; m > 0 && m < 3 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || w.started {
		return
	}
	w.started = true
	w.wg.Add(1)
	go w.run()
}

func (w *liteWatcher) run() {
	defer w.wg.Done()
	bg := w.env.BG
	for bg.Err() == nil {
		w.watchConn()
		select { // connection lost or failed: retry after a pause
		case <-bg.Done():
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// watchConn watches on one connection until it fails or the Store closes.
func (w *liteWatcher) watchConn() {
	bg := w.env.BG
	conn, err := w.env.SQLDB.Conn(bg)
	if err != nil {
		return
	}
	defer conn.Close()
	var last int64
	if err := conn.QueryRowContext(bg, "PRAGMA data_version").Scan(&last); err != nil {
		return
	}
	w.up.Store(true)
	defer w.up.Store(false)
	w.ownOnly()  // the write connection's baseline
	w.onChange() // changes may have happened while no one watched
	read := func() bool {
		var v int64
		if err := conn.QueryRowContext(bg, "PRAGMA data_version").Scan(&v); err != nil {
			return false
		}
		w.checks.Add(1)
		if v != last {
			last = v
			if w.ownOnly() {
				w.skipped.Add(1)
			} else {
				w.onChange()
			}
		}
		return true
	}
	files, fw := liteFileEvents(bg, conn)
	if fw == nil {
		w.poll(read)
		return
	}
	defer fw.Close()
	w.events.Store(true)
	defer w.events.Store(false)
	w.watchEvents(fw, files, read)
}

// ownOnly reports whether every commit since its last call was the
// Store's own and woke its fetchers in-process: the Store's write
// connection's data_version (which only other connections' commits
// change) is unchanged, the connection is the same one, and no TxView
// wrote since. false when the Store has no write connection of its own,
// or it cannot be had within liteWriterWait, or a read fails.
func (w *liteWatcher) ownOnly() bool {
	wdb := w.env.WriteDB
	if wdb == nil || wdb == w.env.SQLDB {
		return false
	}
	ctx, cancel := context.WithTimeout(w.env.BG, liteWriterWait)
	defer cancel()
	c, err := wdb.Conn(ctx)
	if err != nil {
		return false
	}
	defer c.Close()
	var id uintptr
	var v int64
	if err := c.Raw(func(dc any) error { id = connID(dc); return nil }); err != nil {
		return false
	}
	if err := c.QueryRowContext(ctx, "PRAGMA data_version").Scan(&v); err != nil {
		w.wConn = 0
		return false
	}
	var tx uint64
	if w.env.OwnTxWrites != nil {
		tx = w.env.OwnTxWrites() // read while the write connection is ours: those transactions ended
	}
	same := id != 0 && id == w.wConn && v == w.wVersion && tx == w.wTx
	w.wConn, w.wVersion, w.wTx = id, v, tx
	return same
}

// connID identifies a driver connection by its address (0: not a
// pointer, unknown).
func connID(dc any) uintptr {
	if v := reflect.ValueOf(dc); v.Kind() == reflect.Pointer {
		return v.Pointer()
	}
	return 0
}

// Skipped returns how many data_version changes the watcher found to be
// the Store's own commits only (for tests).
func (w *liteWatcher) Skipped() int64 { return w.skipped.Load() }

// poll reads data_version every liteWatchInterval while fetchers wait.
func (w *liteWatcher) poll(read func() bool) {
	bg := w.env.BG
	t := time.NewTicker(liteWatchInterval)
	defer t.Stop()
	for {
		if w.waiters.Load() <= 0 {
			select {
			case <-bg.Done():
				return
			case <-w.kick:
			}
			continue
		}
		select {
		case <-bg.Done():
			return
		case <-t.C:
		}
		if !read() {
			return
		}
	}
}

// watchEvents reads data_version after writes to the database's files
// (every liteWatchInterval for liteSettleWindow after the last one) and
// every liteSafetyInterval otherwise, while fetchers wait. A failure of
// the event source falls back to poll.
func (w *liteWatcher) watchEvents(fw *fsnotify.Watcher, files map[string]bool, read func() bool) {
	bg := w.env.BG
	var settleUntil time.Time
	fast := time.NewTicker(liteWatchInterval)
	defer fast.Stop()
	safety := time.NewTicker(liteSafetyInterval)
	defer safety.Stop()
	for {
		// Wait for a fetcher (file events meanwhile only need draining).
		for w.waiters.Load() <= 0 {
			select {
			case <-bg.Done():
				return
			case <-w.kick:
			case _, ok := <-fw.Events:
				if !ok {
					w.poll(read)
					return
				}
			case <-fw.Errors:
				// an overflow or error: fall through to a check when a fetcher waits
			}
		}
		var tick <-chan time.Time
		if time.Now().Before(settleUntil) {
			tick = fast.C
		}
		select {
		case <-bg.Done():
			return
		case <-w.kick:
			continue
		case ev, ok := <-fw.Events:
			if !ok {
				w.poll(read)
				return
			}
			if !files[filepath.Base(ev.Name)] || !ev.Has(fsnotify.Write|fsnotify.Create) {
				continue
			}
			settleUntil = time.Now().Add(liteSettleWindow)
		case <-fw.Errors: // events may be lost: read now and settle
			settleUntil = time.Now().Add(liteSettleWindow)
		case <-tick:
		case <-safety.C:
		}
		if !read() {
			return
		}
	}
}

// liteFileEvents starts a file-change watch on the directory of the
// connection's main database and returns the base names of the files a
// commit writes, or nil when the database has no file (in memory) or the
// system cannot watch it.
func liteFileEvents(ctx context.Context, conn *sql.Conn) (map[string]bool, *fsnotify.Watcher) {
	rows, err := conn.QueryContext(ctx, "PRAGMA database_list")
	if err != nil {
		return nil, nil
	}
	var path string
	for rows.Next() {
		var seq int
		var name, file string
		if rows.Scan(&seq, &name, &file) == nil && name == "main" {
			path = file
		}
	}
	if rows.Close() != nil || rows.Err() != nil || path == "" {
		return nil, nil
	}
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, nil
	}
	if err := fw.Add(filepath.Dir(path)); err != nil {
		_ = fw.Close()
		return nil, nil
	}
	base := filepath.Base(path)
	return map[string]bool{base: true, base + "-wal": true, base + "-journal": true}, fw
}

// healthy reports whether the watcher is watching on a connection (used
// by longPoll to re-check the database less often).
// Healthy reports whether the watcher runs (dialect.HealthReporter).
func (w *liteWatcher) Healthy() bool { return w.up.Load() }

// wait blocks until the watcher goroutine has stopped. The Store's
// background context must already be cancelled.
func (w *liteWatcher) Wait() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	w.wg.Wait()
}

// Checks returns the number of data_version reads so far (for tests of the
// watcher's idle cost).
func (w *liteWatcher) Checks() int64 { return w.checks.Load() }

// UsesFileEvents reports whether the watcher follows file events (for tests).
func (w *liteWatcher) UsesFileEvents() bool { return w.events.Load() }
