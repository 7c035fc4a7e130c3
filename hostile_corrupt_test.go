package agentstore_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// wantCorrupt fails t unless err is a CorruptRowError (errors.Is
// ErrCorruptRow) naming table, row and column.
func wantCorrupt(t *testing.T, what string, err error, table, rowID, column string) {
	t.Helper()
	var ce *agentstore.CorruptRowError
	if !errors.Is(err, agentstore.ErrCorruptRow) || !errors.As(err, &ce) {
		t.Fatalf("%s: error %v, want a CorruptRowError", what, err)
	}
	if ce.Table != table || ce.RowID != rowID || ce.Column != column {
		t.Fatalf("%s: corrupt row %s/%s/%s, want %s/%s/%s", what, ce.Table, ce.RowID, ce.Column, table, rowID, column)
	}
}

// TestHostileCorruptRows writes undecodable values (truncated JSON, unknown
// enums, unknown event and work-item variants) straight into stored rows of
// both domains. Every read of such a row must fail with a CorruptRowError
// naming the table, row and column — twice in a row (nothing is skipped) —
// and the row must still be there afterwards (nothing is deleted). After
// the row is repaired the data reads normally again.
func TestHostileCorruptRows(t *testing.T) {
	forEachDialect(t, func(t *testing.T, h *harness) {
		e := newPEnv(t, h)
		st, ctx := e.st, e.ctx
		ss := st.Sessions()
		s := repo.NewSession()
		for i := range 3 {
			s.AddMessage(repo.Message{ID: fmt.Sprintf("m%d", i+1), Role: repo.RoleUser, Content: []byte(`{"text":"hello"}`)})
		}
		s.CompactHistory = []repo.CompactRecord{{Trigger: repo.TriggerManual, Summary: "sum"}}
		if err := ss.Save(ctx, s); err != nil {
			t.Fatal(err)
		}
		loaded, err := ss.Load(ctx, s.ID)
		if err != nil {
			t.Fatal(err)
		}
		exec := func(q string, args ...any) error { return st.DB(ctx).Exec(q, args...).Error }
		must := func(q string, args ...any) {
			t.Helper()
			if err := exec(q, args...); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		tried := 0
		twice := func(what string, read func() error, table, rowID, column string) {
			t.Helper()
			before := tableCounts(t, st)
			for range 2 {
				wantCorrupt(t, what, read(), table, rowID, column)
			}
			after := tableCounts(t, st)
			// a fetch that meets a corrupt message keeps the instance lock until it expires (documented)
			delete(before, models.TableInstanceLocks)
			delete(after, models.TableInstanceLocks)
			if !mapsEqual(before, after) {
				t.Fatalf("%s: rows changed by reading a corrupt row: %v -> %v", what, before, after)
			}
			tried++
		}
		load := func() error { _, err := ss.Load(ctx, s.ID); return err }
		mt, sid := quotedTable(h, st, models.TableMessages), s.ID.String()

		// Truncated message content: SQLite stores it, PostgreSQL's json type refuses it.
		err = exec(`UPDATE `+mt+` SET content = '{"text":"hel' WHERE session_id = ? AND seq = 2`, s.ID)
		if h.Dialect == agentstore.SQLite {
			if err != nil {
				t.Fatal(err)
			}
			twice("truncated content", load, models.TableMessages, sid+"/2", "content")
			must(`UPDATE `+mt+` SET content = '{"text":"hello"}' WHERE session_id = ? AND seq = 2`, s.ID)
		} else if err == nil {
			t.Fatal("PostgreSQL accepted truncated JSON in a json column")
		}
		must(`UPDATE `+mt+` SET role = 'robot' WHERE session_id = ? AND seq = 3`, s.ID)
		twice("unknown role", load, models.TableMessages, sid+"/3", "role")
		must(`UPDATE `+mt+` SET role = 'user' WHERE session_id = ? AND seq = 3`, s.ID)
		must(`UPDATE `+quotedTable(h, st, models.TableSessions)+` SET state = 'hibernating' WHERE id = ?`, s.ID)
		twice("unknown session state", load, models.TableSessions, sid, "state")
		must(`UPDATE `+quotedTable(h, st, models.TableSessions)+` SET state = 'created' WHERE id = ?`, s.ID)
		cid := loaded.CompactHistory[0].ID
		must(`UPDATE `+quotedTable(h, st, models.TableCompacts)+` SET "trigger" = 'cosmic-ray' WHERE id = ?`, cid)
		twice("unknown compact trigger", load, models.TableCompacts, cid.String(), "trigger")
		must(`UPDATE `+quotedTable(h, st, models.TableCompacts)+` SET "trigger" = 'manual' WHERE id = ?`, cid)
		if got, err := ss.Load(ctx, s.ID); err != nil || len(got.Messages) != 3 {
			t.Fatalf("after repair: %v, %+v", err, got)
		}

		// Provider: history rows and queue rows.
		e.startInstance(t, "c1", nil)
		ht := quotedTable(h, st, models.TableHistory)
		read := func() error { _, err := e.p.Read(ctx, "c1"); return err }
		readAdmin := func() error { _, err := e.a.ReadHistory(ctx, "c1"); return err }
		good := ""
		if err := st.DB(ctx).Raw(`SELECT event_data FROM `+ht+` WHERE instance_id = ? AND event_id = 1`, "c1").Scan(&good).Error; err != nil {
			t.Fatal(err)
		}
		for _, bad := range []struct{ name, data string }{
			{"truncated event", good[:len(good)/2]},
			{"unknown event type", `{"event_id":1,"type":"FromTheFuture","instance_id":"c1","execution_id":1,"timestamp_ms":1,"duroxide_version":"9"}`},
			{"event of the wrong shape", `[1,2,3]`},
		} {
			must(`UPDATE `+ht+` SET event_data = ? WHERE instance_id = ? AND event_id = 1`, bad.data, "c1")
			twice(bad.name+" (Read)", read, models.TableHistory, "c1/1/1", "event_data")
			twice(bad.name+" (admin ReadHistory)", readAdmin, models.TableHistory, "c1/1/1", "event_data")
		}
		// A fetch of the instance reports the history error instead of dropping the history.
		e.enqueue(t, &duroxide.ExternalRaised{Instance: "c1", Name: "x"})
		it := e.fetch(t)
		if it.HistoryError == "" || len(it.History) != 0 {
			t.Fatalf("fetch over corrupt history: HistoryError %q, %d events; want the error reported", it.HistoryError, len(it.History))
		}
		if err := e.p.AbandonOrchestrationItem(ctx, it.LockToken, 0, true); err != nil {
			t.Fatal(err)
		}
		must(`UPDATE `+ht+` SET event_data = ? WHERE instance_id = ? AND event_id = 1`, good, "c1")
		if hist, err := e.p.Read(ctx, "c1"); err != nil || len(hist) != 1 {
			t.Fatalf("after repair: %d events, %v", len(hist), err)
		}
		// drain the external event so the queue tests below see only their row
		it = e.fetch(t)
		e.ack(t, it, duroxide.OrchestrationAck{Metadata: runningMeta(nil)})

		// Worker item: truncated JSON and an unknown variant.
		wq := quotedTable(h, st, models.TableWorkerQueue)
		if err := e.p.EnqueueForWorker(ctx, activity("c1", 1, 2)); err != nil {
			t.Fatal(err)
		}
		var wid int64
		if err := st.DB(ctx).Raw(`SELECT id FROM ` + wq).Scan(&wid).Error; err != nil {
			t.Fatal(err)
		}
		fetchWork := func() error {
			e.clock.Advance(testLock + time.Second) // the failed fetch keeps the lock: wait it out
			_, err := e.p.FetchWorkItem(ctx, testLock, 0, nil, duroxide.TagFilter{})
			return err
		}
		for _, bad := range []string{`{"ActivityExecute":{"instance":"c1","execution_id":1,"id":2,"na`, `{"NotAWorkItem":{}}`, `"just a string"`} {
			must(`UPDATE `+wq+` SET work_item = ? WHERE id = ?`, bad, wid)
			twice(fmt.Sprintf("worker item %.20q", bad), fetchWork, models.TableWorkerQueue, fmt.Sprint(wid), "work_item")
		}
		must(`UPDATE `+wq+` SET work_item = ? WHERE id = ?`, `{"ActivityExecute":{"instance":"c1","execution_id":1,"id":2,"name":"act","input":"in"}}`, wid)
		e.clock.Advance(testLock + time.Second)
		if l, err := e.p.FetchWorkItem(ctx, testLock, 0, nil, duroxide.TagFilter{}); err != nil || l == nil || l.AttemptCount != 7 {
			t.Fatalf("after repair: %+v %v, want the item with attempt 7 (6 failed fetches counted)", l, err)
		}

		// Orchestrator message of an unknown variant.
		oq := quotedTable(h, st, models.TableOrchestratorQueue)
		e.enqueue(t, &duroxide.ExternalRaised{Instance: "c1", Name: "y"})
		var oid int64
		if err := st.DB(ctx).Raw(`SELECT id FROM ` + oq).Scan(&oid).Error; err != nil {
			t.Fatal(err)
		}
		must(`UPDATE `+oq+` SET work_item = ? WHERE id = ?`, `{"ExternalRaised":{"instance":"c1","na`, oid)
		fetchOrch := func() error {
			e.clock.Advance(testLock + time.Second)
			_, err := e.p.FetchOrchestrationItem(ctx, testLock, 0, nil)
			return err
		}
		twice("truncated orchestrator message", fetchOrch, models.TableOrchestratorQueue, fmt.Sprint(oid), "work_item")
		relLogf(t, "corrupt rows: %d corruptions (truncated JSON, unknown enums, unknown event/work-item variants) across sessions, messages, compacts, history, worker and orchestrator queues: each read twice -> CorruptRowError naming table/row/column, rows deleted 0, rows skipped 0", tried)
	})
}
