package engine

import (
	"context"
	"database/sql"
	"time"
)

// The pool keeper honours PoolConfig.MinIdleConns. database/sql can cap
// idle connections (SetMaxIdleConns) but has no minimum: a quiet pool
// drains to nothing after IdleTimeout, and the next burst pays a
// connection set-up (TCP, TLS, authentication) per connection. The keeper
// is one goroutine per Store made by Open, stopped by Close, that:
//
//   - every tick (min(1 s, IdleTimeout/4)) reads db.Stats() and, when
//     fewer than MinIdleConns connections are idle and fewer than
//     MaxOpenConns are open, opens the missing ones (it takes the idle
//     ones and as many new ones at once, pings each, and returns them all);
//   - every IdleTimeout/2 takes up to MinIdleConns idle connections (the
//     most recently used) and pings them, so they never reach IdleTimeout
//     and a connection the server dropped is found and replaced.
//
// Cost: one Stats() call per tick; MinIdleConns pings per IdleTimeout/2
// (5 per 5 minutes with HighThroughputPool); the connection set-ups it
// saves. It never holds connections the application is using, never
// opens more than MaxOpenConns, and never waits for a connection: before
// each one it takes it checks that the pool has an idle one or room for a
// new one, and stops taking when it has neither (the application took
// what Stats() had counted meanwhile). So it cannot hold the pool while
// waiting for a connection the application keeps (before this check, a
// keeper whose count was stale held every other connection for its 30 s
// connect timeout while one stayed in use: the bench's orchestration ran
// at 30 instead of 300 workflows/s in about a third of its rounds).

// poolKeeperTick bounds the keeper's check interval.
const poolKeeperTick = time.Second

// startPoolKeeper starts the keeper of db when p asks for idle
// connections; Close stops it (s.bg) and waits for it.
func (s *Store) startPoolKeeper(db *sql.DB, p PoolConfig) {
	if p.MinIdleConns <= 0 || db == nil {
		return
	}
	s.keeper.Add(1)
	go func() {
		defer s.keeper.Done()
		keepIdle(s.bg, db, p, s.cfg)
	}()
}

// keepIdle is the keeper's loop (see above); it returns when ctx ends.
func keepIdle(ctx context.Context, db *sql.DB, p PoolConfig, cfg *Config) {
	minIdle := p.MinIdleConns
	tick := poolKeeperTick
	if p.IdleTimeout > 0 {
		tick = max(min(tick, p.IdleTimeout/4), 10*time.Millisecond)
	}
	lastTouch := time.Now()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		st := db.Stats()
		maxOpen := st.MaxOpenConnections
		if maxOpen <= 0 {
			maxOpen = minIdle + st.OpenConnections
		}
		switch {
		case st.Idle < minIdle && st.OpenConnections < maxOpen:
			add := min(minIdle-st.Idle, maxOpen-st.OpenConnections)
			holdAndPing(ctx, db, st.Idle+add, p.ConnectTimeout, cfg)
			lastTouch = time.Now()
		case p.IdleTimeout > 0 && time.Since(lastTouch) >= p.IdleTimeout/2:
			holdAndPing(ctx, db, min(st.Idle, minIdle), p.ConnectTimeout, cfg)
			lastTouch = time.Now()
		}
		t.Reset(tick)
	}
}

// holdAndPing takes n connections of db at once (idle ones first, then
// new ones), pings each, and returns them to the pool. A connection whose
// ping fails is discarded by database/sql; the next tick replaces it.
func holdAndPing(ctx context.Context, db *sql.DB, n int, connectTimeout time.Duration, cfg *Config) {
	if n <= 0 {
		return
	}
	if connectTimeout <= 0 {
		connectTimeout = 30 * time.Second
	}
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	conns := make([]*sql.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	for range n {
		if st := db.Stats(); st.Idle == 0 && st.MaxOpenConnections > 0 && st.OpenConnections >= st.MaxOpenConnections {
			return // every connection is taken: db.Conn would wait for one the application holds
		}
		c, err := db.Conn(ctx)
		if err != nil {
			if parent.Err() == nil { // not closing
				cfg.Slog.Debug("agentstore: pool keeper could not open a connection",
					"component", "agentstore", "event", "pool_keeper_failed", "error", err.Error())
			}
			return
		}
		conns = append(conns, c)
		if err := c.PingContext(ctx); err != nil {
			cfg.Slog.Debug("agentstore: pool keeper found a broken connection",
				"component", "agentstore", "event", "pool_keeper_ping_failed", "error", err.Error())
		}
	}
}
