//go:build cgo

package agentstore

import (
	"sync"
	"sync/atomic"
	"time"
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

// liteWatchInterval is how often the watcher reads data_version while
// fetchers wait.
const liteWatchInterval = 2 * time.Millisecond

// liteWatcher is a Store's data_version watcher (SQLite).
type liteWatcher struct {
	s        *Store
	onChange func()

	waiters atomic.Int32
	kick    chan struct{} // a first waiter arrived
	checks  atomic.Int64  // data_version reads (tests)
	up      atomic.Bool   // watching on a connection (healthy)

	mu      sync.Mutex
	started bool
	closed  bool
	wg      sync.WaitGroup
}

func newLiteWatcher(s *Store, onChange func()) *liteWatcher {
	return &liteWatcher{s: s, onChange: onChange, kick: make(chan struct{}, 1)}
}

// publish implements waker: other Stores notice this Store's commits
// through data_version, so there is nothing to send.
func (w *liteWatcher) publish(string) {}

// waiting records that a fetcher starts (+1) or stops (-1) waiting.
func (w *liteWatcher) waiting(delta int32) {
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
func (w *liteWatcher) start() {
	if m := w.s.sqlDB.Stats().MaxOpenConnections; m > 0 && m < 3 {
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
	bg := w.s.bg
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
	bg := w.s.bg
	conn, err := w.s.sqlDB.Conn(bg)
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
	w.onChange() // changes may have happened while no one watched
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
		var v int64
		if err := conn.QueryRowContext(bg, "PRAGMA data_version").Scan(&v); err != nil {
			return
		}
		w.checks.Add(1)
		if v != last {
			last = v
			w.onChange()
		}
	}
}

// healthy reports whether the watcher is watching on a connection (used
// by longPoll to re-check the database less often).
func (w *liteWatcher) healthy() bool { return w.up.Load() }

// wait blocks until the watcher goroutine has stopped. The Store's
// background context must already be cancelled.
func (w *liteWatcher) wait() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	w.wg.Wait()
}
