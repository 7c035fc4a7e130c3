package engine

import (
	"database/sql"
	"strings"

	"github.com/agentstore/agentstore/internal/dialect"
	"gorm.io/gorm"
)

// The engine's side of the dialect layer. What a dialect provides is the
// contract in internal/dialect; repository code asks the Store what the
// database can do (s.has(CapX)) and for SQL fragments (s.forUpdate(), ...)
// and never compares dialect names. See ARCHITECTURE.md.

// Capability and its constants are the dialect contract's.
type Capability = dialect.Capability

// The capabilities (see internal/dialect).
const (
	CapRowLocks       = dialect.CapRowLocks
	CapSkipLocked     = dialect.CapSkipLocked
	CapAsyncCommit    = dialect.CapAsyncCommit
	CapAdvisoryLocks  = dialect.CapAdvisoryLocks
	CapWakeup         = dialect.CapWakeup
	CapSnapshotReads  = dialect.CapSnapshotReads
	CapValidatedJSON  = dialect.CapValidatedJSON
	CapPartialIndexes = dialect.CapPartialIndexes
	CapSingleWriter   = dialect.CapSingleWriter
	CapAlterColumns   = dialect.CapAlterColumns
	CapFastPaths      = dialect.CapFastPaths
	CapGroupCommit    = dialect.CapGroupCommit
	// CapUpdateReturning and CapLockOf: see internal/dialect.
	CapUpdateReturning = dialect.CapUpdateReturning
	CapLockOf          = dialect.CapLockOf
	CapMaterializedCTE = dialect.CapMaterializedCTE
	CapChangeFeed      = dialect.CapChangeFeed
)

// WithoutCapabilities switches capabilities of the dialect off, for a
// database that speaks a dialect's protocol but lacks a feature (a
// PostgreSQL-wire database without LISTEN/NOTIFY or advisory locks), for a
// pooler that cannot carry one (WithoutCapabilities(CapWakeup) behind a
// transaction pooler), or to run the general code paths
// (WithoutCapabilities(CapFastPaths)). CapRowLocks, CapSingleWriter,
// CapPartialIndexes and CapAlterColumns describe the database itself and
// are refused with ErrInvalidConfig. Switching off a capability the dialect
// does not have is allowed and changes nothing.
func WithoutCapabilities(caps ...Capability) Option {
	return optionFunc(func(c *Config) error {
		for _, x := range caps {
			for _, n := range dialect.Capabilities() {
				if x&n.Cap != 0 && n.Fixed {
					return configf("capability %s describes the database and cannot be switched off", n.Name)
				}
			}
			if x&^dialect.AllCapabilities() != 0 {
				return configf("unknown capability %#x", uint32(x&^dialect.AllCapabilities()))
			}
			c.CapsOff |= x
		}
		return nil
	})
}

// dialectNamed returns the dialect of ds called name.
func dialectNamed(ds []dialect.Dialect, name Dialect) (dialect.Dialect, error) {
	for _, d := range ds {
		if d.Name() == name {
			return d, nil
		}
	}
	return nil, configf("unknown dialect %q (want %s)", clip(string(name)), dialectList(ds))
}

func dialectList(ds []dialect.Dialect) string {
	var names []string
	for _, d := range ds {
		names = append(names, string(d.Name()))
	}
	return strings.Join(names, " or ")
}

// has reports whether the store's database has every capability in c.
func (s *Store) has(c Capability) bool { return s.caps.Has(c) }

// citusRoute reports that the Store runs the statements a row-distributed
// deployment can route (docs/distributed.md): the dialect has fast paths
// and they are switched off (WithoutCapabilities(CapFastPaths)). SQLite
// and MariaDB have none and cannot be distributed: they keep the
// single-node forms.
func (s *Store) citusRoute() bool {
	return !s.has(CapFastPaths) && s.d.Capabilities().Has(CapFastPaths)
}

// inProcess reports that the dialect's statements run in this process
// (dialect.InProcess: SQLite).
func (s *Store) inProcess() bool {
	ip, ok := s.d.(dialect.InProcess)
	return ok && ip.InProcess()
}

// Capabilities returns the capabilities in force: the dialect's, less those
// switched off with WithoutCapabilities.
func (s *Store) Capabilities() Capability { return s.caps }

// forUpdate is appended to a SELECT that must lock its rows: " FOR UPDATE"
// with CapRowLocks; nothing on a single-writer database, where the
// enclosing write transaction already holds the database's write lock.
func (s *Store) forUpdate() string {
	if s.has(CapRowLocks) {
		return " FOR UPDATE"
	}
	return ""
}

// forUpdateSkip is appended to a queue claim's SELECT: " FOR UPDATE [OF
// alias] SKIP LOCKED" with CapRowLocks and CapSkipLocked, without SKIP
// LOCKED when only CapRowLocks, nothing on a single-writer database. of
// ("" or an alias) names the table whose rows are locked (with CapLockOf;
// without it the claim's SELECT must read that table alone).
func (s *Store) forUpdateSkip(of string) string {
	if !s.has(CapRowLocks) {
		return ""
	}
	f := " FOR UPDATE"
	if of != "" && s.has(CapLockOf) {
		f += " OF " + of
	}
	if s.has(CapSkipLocked) {
		f += " SKIP LOCKED"
	}
	return f
}

// asyncCommitCTE returns, with CapAsyncCommit, a WITH clause that makes the
// statement's own (autocommit) transaction commit asynchronously and the
// condition that forces it to be evaluated; "", "" without.
func (s *Store) asyncCommitCTE() (with, cond string) {
	if !s.has(CapAsyncCommit) {
		return "", ""
	}
	return "WITH async AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true) AS v) ",
		" AND (SELECT v FROM async) IS NOT NULL"
}

// asyncCommitTx makes the current transaction commit asynchronously
// (CapAsyncCommit); a no-op without.
func (s *Store) asyncCommitTx(tx *gorm.DB) error {
	if !s.has(CapAsyncCommit) {
		return nil
	}
	return tx.Exec(`SET LOCAL synchronous_commit = off`).Error
}

// castParam returns a placeholder typed as typ where the database cannot
// infer a parameter's type (a SELECT list).
func (s *Store) castParam(typ string) string { return s.d.CastParam(typ) }

// readTx runs fn as one consistent read: in a read-only REPEATABLE READ
// transaction with CapSnapshotReads, statement by statement without.
func (s *Store) readTx(db *gorm.DB, fn func(tx *gorm.DB) error) error {
	if !s.has(CapSnapshotReads) {
		return fn(db)
	}
	return db.Transaction(fn, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true})
}

// upsert returns the engine's unguarded upsert stmt (INSERT ... ON
// CONFLICT (key) DO NOTHING / DO UPDATE SET c = excluded.c, ...) in the
// dialect's form (dialect.Upserter), or as it is.
func (s *Store) upsert(stmt string) string {
	if u, ok := s.d.(dialect.Upserter); ok {
		return u.RewriteUpsert(stmt)
	}
	return stmt
}

// keysetAfter returns the condition (a, b) > (x, y) of a keyset page and
// its parameters: the row value, or the dialect's form of it
// (dialect.KeysetExpander).
func (s *Store) keysetAfter(a, b string, x, y any) (string, []any) {
	if k, ok := s.d.(dialect.KeysetExpander); ok {
		return k.KeysetAfter(a, b), []any{x, x, y}
	}
	return "(" + a + ", " + b + ") > (?, ?)", []any{x, y}
}

// castNull returns NULL typed as typ, as the dialect spells a cast
// (CastParam with NULL for its placeholder).
func (s *Store) castNull(typ string) string {
	return strings.Replace(s.d.CastParam(typ), "?", "NULL", 1)
}

// updateReturning runs update (an UPDATE without RETURNING) and scans the
// rows it wrote into dest: with CapUpdateReturning as one statement
// (update + " RETURNING " + cols); without, the UPDATE and then reread (a
// SELECT of cols, with its own rereadArgs, that finds exactly the rows the
// UPDATE wrote: by key or by the new lock token), in tx, which must be a
// transaction (its row locks keep the rows as written until the read).
func (s *Store) updateReturning(tx *gorm.DB, dest any, update, cols string, args []any, reread string, rereadArgs ...any) error {
	if s.has(CapUpdateReturning) {
		return tx.Raw(update+" RETURNING "+cols, args...).Scan(dest).Error
	}
	res := tx.Exec(update, args...)
	if res.Error != nil {
		return res.Error
	}
	if res.RowsAffected == 0 {
		return nil
	}
	return tx.Raw("SELECT "+cols+" "+reread, rereadArgs...).Scan(dest).Error
}

// forceIndex returns the table-reference suffix that makes the dialect's
// optimizer read a table by index (its unprefixed name, e.g.
// "sessions_tenant_updated" for idx_<prefix>sessions_tenant_updated), or ""
// (dialect.PlanHinter).
func (s *Store) forceIndex(index string) string {
	if h, ok := s.d.(dialect.PlanHinter); ok {
		return h.ForceIndex(`"idx_` + s.cfg.Prefix + index + `"`)
	}
	return ""
}

// joinInOrder returns the join keyword that joins its tables in the order
// written (dialect.PlanHinter), else "JOIN".
func (s *Store) joinInOrder() string {
	if h, ok := s.d.(dialect.PlanHinter); ok {
		return h.JoinInOrder()
	}
	return "JOIN"
}
