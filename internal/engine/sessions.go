package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo"
)

// Sessions returns the agent-session repository of the store (every
// tenant). See repo.Sessions for the contract.
func (s *Store) Sessions() repo.Sessions { return s.tel.sessions(sessionsAPI{&sessionStore{s: s}}) }

// SessionQueue returns the per-session durable queue of the store (every
// tenant). See repo.SessionQueue for the contract.
func (s *Store) SessionQueue() repo.SessionQueue {
	return s.tel.sessionQueue(sessionQueueAPI{&sessionQueue{sessionStore{s: s}}})
}

// TenantView is a tenant-scoped view of a Store: its repositories only see
// sessions whose tenant id is the view's tenant. Loading, listing,
// deleting, forking, enqueuing to or dequeuing from another tenant's session
// (or a session without tenant) behaves exactly as if it did not exist
// (ErrNotFound, false, or an empty page), and sessions saved through the
// view get the view's tenant (saving a session that names another tenant
// is ErrInvalidInput).
type TenantView struct {
	st     *Store
	tenant string
	err    error
}

// ForTenant returns the view of the store scoped to tenant. A tenant that
// is empty, longer than repo.MaxIDLen bytes, not valid UTF-8 or holding a
// NUL byte makes every call of the view fail with ErrInvalidInput.
func (s *Store) ForTenant(tenant string) *TenantView {
	err := checkID("tenant id", tenant)
	return &TenantView{st: s, tenant: tenant, err: err}
}

// Tenant returns the view's tenant id.
func (v *TenantView) Tenant() string { return v.tenant }

// Sessions returns the tenant's session repository.
func (v *TenantView) Sessions() repo.Sessions {
	t := v.tenant
	return v.st.tel.sessions(sessionsAPI{&sessionStore{s: v.st, tenant: &t, scopeErr: v.err}})
}

// SessionQueue returns the tenant's session queue.
func (v *TenantView) SessionQueue() repo.SessionQueue {
	t := v.tenant
	return v.st.tel.sessionQueue(sessionQueueAPI{&sessionQueue{sessionStore{s: v.st, tenant: &t, scopeErr: v.err}}})
}

var (
	_ repo.Sessions     = (*sessionStore)(nil)
	_ repo.SessionQueue = (*sessionQueue)(nil)
)

// sessionStore implements repo.Sessions; tenant != nil scopes every query.
// tx != nil binds it to the transaction of a WithSessionLock.
type sessionStore struct {
	s        *Store
	tenant   *string
	scopeErr error
	tx       *gorm.DB
}

// activePlanStatuses and terminalPlanStatuses partition the known plan statuses.
func activePlanStatuses() []string {
	return []string{string(repo.PlanDraft), string(repo.PlanApproved), string(repo.PlanExecuting)}
}

func terminalPlanStatuses() []string {
	return []string{string(repo.PlanCompleted), string(repo.PlanFailed), string(repo.PlanCancelled)}
}

// knownTodoStatuses are the todo statuses the store knows.
func knownTodoStatuses() []string {
	return []string{string(repo.TodoPending), string(repo.TodoInProgress), string(repo.TodoCompleted)}
}

func (ss *sessionStore) db(ctx context.Context) *gorm.DB {
	if ss.tx != nil {
		return ss.tx.WithContext(ctx)
	}
	return ss.s.db.WithContext(ctx)
}

// tenantCond returns " AND <col> = ?" and its argument when scoped.
func (ss *sessionStore) tenantCond(col string) (string, []any) {
	if ss.tenant == nil {
		return "", nil
	}
	return " AND " + col + " = ?", []any{*ss.tenant}
}

// inTenantCond restricts a child table's session_id to the view's tenant.
func (ss *sessionStore) inTenantCond() (string, []any) {
	if ss.tenant == nil {
		return "", nil
	}
	return " AND session_id IN (SELECT id FROM " + ss.s.quoted(models.TableSessions) + " WHERE tenant_id = ?)", []any{*ss.tenant}
}

// sessionExists reports whether the session exists (in the view's tenant).
func (ss *sessionStore) sessionExists(tx *gorm.DB, id uuid.UUID) (bool, error) {
	tc, targs := ss.tenantCond("tenant_id")
	var n int64
	err := tx.Raw("SELECT COUNT(*) FROM "+ss.s.quoted(models.TableSessions)+" WHERE id = ?"+tc, append([]any{id}, targs...)...).Scan(&n).Error
	return n > 0, err
}

func (ss *sessionStore) notFound(op string, id uuid.UUID) error {
	return fmt.Errorf("%s %s: %w", op, id, ErrNotFound)
}

// writeLock serialises the writes of this Store handle on SQLite, which
// admits one writer at a time: contending connections would otherwise wait
// in SQLite's busy handler, which sleeps up to 100 ms per retry. A store
// made by Open already sends every write to its one write connection (see
// liteConnPool), so only a store made by New over a shared pool needs the
// mutex. Other handles and processes are still coordinated by SQLite's own
// lock and busy_timeout. On PostgreSQL it does nothing. The wait ends
// with ctx: a call whose context ends while another write (say a
// WithSessionLock function) holds the lock goes on without it, and its
// first database call fails with the context's error. Use: defer
// ss.writeLock(ctx)().
func (ss *sessionStore) writeLock(ctx context.Context) func() {
	if !ss.s.has(CapSingleWriter) || ss.s.writeDB != nil || ss.tx != nil {
		return func() {}
	}
	select {
	case ss.s.sessWrite <- struct{}{}:
		return func() { <-ss.s.sessWrite }
	case <-ctx.Done():
		return func() {}
	}
}

// inTx runs fn in one transaction (BEGIN IMMEDIATE on SQLite).
func (ss *sessionStore) inTx(ctx context.Context, fn func(tx *gorm.DB) error) error {
	return ss.db(ctx).Transaction(fn)
}

// nilIfEmpty maps "" to nil.
func nilIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC().Truncate(time.Microsecond)
	return &u
}

// corrupt returns the *CorruptRowError of a stored value that cannot be
// decoded. A parse error's ErrInvalidInput is dropped (with its text): a
// stored row is corrupt, not refused input.
func corrupt(table, rowID, column string, err error) error {
	if errors.Is(err, ErrInvalidInput) {
		err = errors.New(strings.TrimPrefix(err.Error(), ErrInvalidInput.Error()+": "))
	}
	return &CorruptRowError{Table: table, RowID: rowID, Column: column, Err: err}
}

// monotonicUpdatedAt is the SET item of every session write: updated_at
// becomes the later of the stored value and the parameter, so a writer
// that read the clock before waiting for the row lock never moves it
// backwards (col is "updated_at" or "s.updated_at").
func monotonicUpdatedAt(col string) string {
	return "updated_at = CASE WHEN " + col + " > ? THEN " + col + " ELSE ? END"
}

// staleOrMissing reads the stored version of a session whose versioned
// write matched no row: ErrNotFound when it is missing (in the view's
// tenant), else a *StaleVersionError.
func (ss *sessionStore) staleOrMissing(tx *gorm.DB, id uuid.UUID, expected int64) error {
	tc, targs := ss.tenantCond("tenant_id")
	var vs []int64
	if err := tx.Raw("SELECT version FROM "+ss.s.quoted(models.TableSessions)+" WHERE id = ?"+tc,
		append([]any{id}, targs...)...).Scan(&vs).Error; err != nil {
		return dbErr(err)
	}
	if len(vs) == 0 {
		return ss.notFound("session", id)
	}
	return &repo.StaleVersionError{SessionID: id, Expected: expected, Stored: vs[0]}
}

// lockSuffix is appended to a SELECT that must lock the row (see
// Store.forUpdate).
func (ss *sessionStore) lockSuffix() string { return ss.s.forUpdate() }

// param returns a placeholder typed as typ (see Store.castParam).
func (ss *sessionStore) param(typ string) string { return ss.s.castParam(typ) }

// missing turns a failed existence check into the operation's error.
func (ss *sessionStore) missing(op string, id uuid.UUID, err error) error {
	if err != nil {
		return fmt.Errorf("%s %s: %w", op, id, dbErr(err))
	}
	return ss.notFound(op, id)
}
