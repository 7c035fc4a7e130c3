package engine

import (
	"context"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/agentstore/agentstore/models"
)

// DeleteTenant deletes every session of tenant with all its rows
// (messages, compactions, summaries, queue items, todos, plans), and any
// session below one of them by ParentID (sub-sessions and forks, whatever
// their tenant, deleted with their parent as the foreign key's cascade did
// before V13), in one transaction, and reports what it deleted, by table. A
// tenant without sessions deletes nothing and reports zeros. The change
// feed keeps its rows (ids and kinds, no content: a session.deleted change
// per session is added) until PurgeChanges removes them. Provider
// instances have no tenant and are not touched. It refuses an invalid
// tenant id with ErrInvalidInput.
func (s *Store) DeleteTenant(ctx context.Context, tenant string) (DeleteReport, error) {
	rep := DeleteReport{Tenant: tenant}
	if err := checkID("tenant id", tenant); err != nil {
		return rep, err
	}
	sess := s.quoted(models.TableSessions)
	doomed := "WITH RECURSIVE doomed(id) AS (SELECT id FROM " + sess + " WHERE tenant_id = ? " +
		"UNION SELECT c.id FROM " + sess + " c JOIN doomed d ON c.parent_id = d.id) "
	counts := []struct {
		table string
		n     *int64
	}{
		{models.TableMessages, &rep.Messages}, {models.TableCompacts, &rep.Compactions}, {models.TableSummaries, &rep.Summaries},
		{models.TableQueue, &rep.QueueItems}, {models.TableTodos, &rep.Todos}, {models.TablePlans, &rep.Plans},
	}
	defer (&sessionStore{s: s}).writeLock(ctx)()
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		// Lock the tenant's sessions first (appends lock the session row),
		// so the counts are those of the rows the DELETE removes.
		if err := tx.Exec("SELECT id FROM "+sess+" WHERE tenant_id = ?"+s.forUpdate(), tenant).Error; err != nil {
			return err
		}
		if err := tx.Raw(doomed+"SELECT COUNT(*) FROM doomed", tenant).Scan(&rep.Sessions).Error; err != nil {
			return err
		}
		if rep.Sessions == 0 {
			return nil
		}
		for _, c := range counts {
			q := doomed + "SELECT COUNT(*) FROM " + s.quoted(c.table) + " WHERE session_id IN (SELECT id FROM doomed)"
			if err := tx.Raw(q, tenant).Scan(c.n).Error; err != nil {
				return err
			}
		}
		var ids []uuid.UUID
		if err := tx.Raw("DELETE FROM "+sess+" WHERE tenant_id = ? RETURNING id", tenant).Scan(&ids).Error; err != nil {
			return err
		}
		_, err := s.deleteSessionsBelow(tx, ids)
		return err
	})
	if err != nil {
		return DeleteReport{Tenant: tenant}, opErr("DeleteTenant", err)
	}
	return rep, nil
}
