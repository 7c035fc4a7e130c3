package agentstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/internal/testkit"
	"github.com/agentstore/agentstore/migrations"
	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo"
	"github.com/agentstore/agentstore/repo/duroxide"
	"github.com/google/uuid"
)

// anonCatalog is catalogSnapshot without the PostgreSQL schema name, so two
// databases in different schemas compare equal when their objects are.
func anonCatalog(t *testing.T, st *agentstore.Store, h *harness) string {
	t.Helper()
	snap := catalogSnapshot(t, st)
	if h.Schema != "" {
		snap = strings.ReplaceAll(snap, h.Schema+".", "")
	}
	return snap
}

// upgradeData writes, through the API of the version the database is at,
// one session with messages, a queued item, a completed orchestration and
// a queued activity, and returns a function that checks them after the
// upgrade.
func upgradeData(t *testing.T, h *harness, st *agentstore.Store, version int64) func(t *testing.T, st *agentstore.Store) {
	t.Helper()
	ctx := context.Background()
	if h.Dialect == agentstore.MariaDB {
		// MariaDB's V1 creates the schema of version 11 (its V2-V12
		// record versions): write the data as at version 11.
		version = max(version, 11)
	}
	s := repo.NewSession()
	if err := st.Sessions().Save(ctx, s); err != nil {
		t.Fatal(err)
	}
	msgs := []repo.Message{{ID: "m1", Role: repo.RoleUser, Content: json.RawMessage(`[{"type":"text","text":"hello"}]`)},
		{ID: "m2", Role: repo.RoleAssistant, Content: json.RawMessage(`[{"type":"text","text":"hi"}]`)}}
	if _, err := st.Sessions().AppendMessages(ctx, s.ID, msgs...); err != nil {
		t.Fatal(err)
	}
	if version >= 3 {
		if _, err := st.SessionQueue().Enqueue(ctx, s.ID, "next", 3); err != nil {
			t.Fatal(err)
		}
	} else {
		// The queue gained a column in V3, which this build's Enqueue
		// writes: write the row as the releases before V3 did.
		if _, err := st.SQLDB().ExecContext(ctx, placeholders(h, `INSERT INTO `+quotedTable(h, st, models.TableQueue)+
			` (id, session_id, operation, content, priority, status, attempts, created_at) VALUES ($1, $2, 'enqueue', 'next', 3, 'pending', 0, $3)`),
			uuid.New(), s.ID, time.Now().UTC()); err != nil {
			t.Fatal(err)
		}
	}
	p := st.Provider()
	ev := func(id uint64, k duroxide.EventKind) duroxide.Event {
		return duroxide.Event{EventID: id, InstanceID: "up-1", ExecutionID: 1, TimestampMS: 1, DuroxideVersion: "0.1.29", Kind: k}
	}
	events := []duroxide.Event{ev(1, &duroxide.OrchestrationStartedEvent{Name: "Orch", Version: "1.0.0", Input: "{}"}),
		ev(2, &duroxide.OrchestrationCompletedEvent{Output: "done"})}
	if version >= 5 {
		if err := p.EnqueueForOrchestrator(ctx, &duroxide.StartOrchestration{Instance: "up-1", Orchestration: "Orch", Input: "{}", Version: testkit.Sp("1.0.0"), ExecutionID: 1}, 0); err != nil {
			t.Fatal(err)
		}
		it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		if err != nil || it == nil {
			t.Fatalf("fetch: %v %v", it, err)
		}
		if err := p.AckOrchestrationItem(ctx, it.LockToken, duroxide.OrchestrationAck{ExecutionID: 1, HistoryDelta: events,
			Metadata: duroxide.ExecutionMetadata{Status: testkit.Sp(duroxide.StatusCompleted), Output: testkit.Sp("done"), OrchestrationName: testkit.Sp("Orch"), OrchestrationVersion: testkit.Sp("1.0.0")}}); err != nil {
			t.Fatal(err)
		}
	} else {
		// This build's fetch reads the KV tables of V5: write the completed
		// orchestration as the releases before V5 stored it.
		exec := func(q string, args ...any) {
			t.Helper()
			if _, err := st.SQLDB().ExecContext(ctx, placeholders(h, q), args...); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		exec(`INSERT INTO `+quotedTable(h, st, models.TableInstances)+` (instance_id, orchestration_name, orchestration_version, current_execution_id, created_at, updated_at, custom_status_version) VALUES ($1, 'Orch', '1.0.0', 1, 1, 1, 0)`, "up-1")
		exec(`INSERT INTO `+quotedTable(h, st, models.TableExecutions)+` (instance_id, execution_id, status, output, started_at, completed_at) VALUES ($1, 1, $2, 'done', 1, 2)`, "up-1", duroxide.StatusCompleted)
		for _, e := range events {
			data, err := json.Marshal(e)
			if err != nil {
				t.Fatal(err)
			}
			exec(`INSERT INTO `+quotedTable(h, st, models.TableHistory)+` (instance_id, execution_id, event_id, event_type, event_data, created_at) VALUES ($1, 1, $2, $3, $4, 1)`,
				"up-1", int64(e.EventID), e.Kind.EventType(), string(data))
		}
	}
	if err := p.EnqueueForWorker(ctx, &duroxide.ActivityExecute{Instance: "up-2", ExecutionID: 1, ID: 1, Name: "act", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	return func(t *testing.T, st *agentstore.Store) {
		t.Helper()
		got, err := st.Sessions().Load(ctx, s.ID)
		if err != nil || len(got.Messages) != 2 || got.Messages[1].ID != "m2" || string(got.Messages[0].Content) != string(msgs[0].Content) {
			t.Fatalf("session after upgrade: %+v, %v", got, err)
		}
		q, err := st.SessionQueue().PendingQueue(ctx, s.ID)
		if err != nil || len(q) != 1 || q[0].Content != "next" || q[0].Priority != 3 {
			t.Fatalf("queue after upgrade: %+v, %v", q, err)
		}
		info, err := st.ProviderAdmin().GetInstanceInfo(ctx, "up-1")
		if err != nil || info.Status != duroxide.StatusCompleted {
			t.Fatalf("instance after upgrade: %+v, %v", info, err)
		}
		hist, err := st.Provider().Read(ctx, "up-1")
		if err != nil || len(hist) != 2 {
			t.Fatalf("history after upgrade: %d events, %v", len(hist), err)
		}
		ids, err := st.ProviderAdmin().ListInstancesByStatus(ctx, duroxide.StatusCompleted)
		if err != nil || !slices.Equal(ids, []string{"up-1"}) {
			t.Fatalf("ListInstancesByStatus after upgrade: %v, %v", ids, err)
		}
		l, err := st.Provider().FetchWorkItem(ctx, time.Minute, 0, nil, duroxide.TagFilter{})
		if err != nil || l == nil {
			t.Fatalf("worker item after upgrade: %v, %v", l, err)
		}
	}
}

// TestMigrateUpgradeFromEveryRelease: for every released schema version, a
// database built with that version's migrations and holding data written
// through the API is upgraded by Migrate to a catalog identical to a fresh
// install at head, on both dialects and with a custom prefix, and the data
// reads back.
func TestMigrateUpgradeFromEveryRelease(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		fresh := newHarness(t, h.Dialect)
		head := fresh.Open(t, agentstore.WithTablePrefix("up_"))
		if err := head.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		want := anonCatalog(t, head, fresh)
		for v := int64(1); v <= agentstore.SchemaVersion; v++ {
			t.Run(fmt.Sprintf("from_V%d", v), func(t *testing.T) {
				hv := newHarness(t, h.Dialect)
				old := hv.Open(t, agentstore.WithTablePrefix("up_"))
				if err := old.MigrateTo(ctx, v); err != nil {
					t.Fatalf("build at V%d: %v", v, err)
				}
				if got, err := old.RecordedSchemaVersion(ctx); err != nil || got != v {
					t.Fatalf("recorded version %d (%v), want %d", got, err, v)
				}
				check := upgradeData(t, hv, old, v)
				st := hv.Open(t, agentstore.WithTablePrefix("up_"))
				if err := st.Migrate(ctx); err != nil {
					t.Fatalf("upgrade from V%d: %v", v, err)
				}
				if got := anonCatalog(t, st, hv); got != want {
					t.Fatalf("upgraded from V%d, the catalog differs from a fresh install at %s", v, firstDiff(want, got))
				}
				testkit.VerifyClean(t, st)
				check(t, st)
			})
		}
	})
}

// TestMigrateRepairsIndexDrift: a database at head whose indexes drifted
// (one dropped, one redefined, one agentstore no longer declares, as old
// pre-release databases have) is brought back to the fresh catalog by
// Migrate; an index a DBA added under another name is reported by Verify
// and kept.
func TestMigrateRepairsIndexDrift(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		st := h.New(t)
		want := anonCatalog(t, st, h)
		q := func(base string) string { return quotedTable(h, st, base) }
		p := st.TablePrefix()
		qi := func(name string) string {
			if h.Dialect == agentstore.MariaDB { // DROP INDEX name ON table
				return `"` + name + `" ON ` + q(map[string]string{"idx_" + p + "sessions_state": models.TableSessions,
					"idx_" + p + "orchestrator_queue_instance_visible": models.TableOrchestratorQueue, "dba_sessions_created": models.TableSessions}[name])
			}
			if h.Schema != "" {
				return `"` + h.Schema + `"."` + name + `"`
			}
			return `"` + name + `"`
		}
		for _, stmt := range []string{
			`DROP INDEX ` + qi("idx_"+p+"sessions_state"),
			`DROP INDEX ` + qi("idx_"+p+"orchestrator_queue_instance_visible"),
			`CREATE INDEX "idx_` + p + `orchestrator_queue_instance_visible" ON ` + q(models.TableOrchestratorQueue) + ` ("instance_id", "visible_at")`,
			`CREATE INDEX "idx_` + p + `worker_queue_lock_token" ON ` + q(models.TableWorkerQueue) + ` ("lock_token")`,
			`CREATE INDEX "dba_sessions_created" ON ` + q(models.TableSessions) + ` ("created_at")`,
		} {
			if _, err := st.SQLDB().ExecContext(ctx, stmt); err != nil {
				t.Fatalf("%s: %v", stmt, err)
			}
		}
		rep := testkit.MustVerify(t, st)
		kinds := map[agentstore.IssueKind]int{}
		for _, is := range rep.Issues {
			kinds[is.Kind]++
		}
		if kinds[agentstore.IssueMissingIndex] != 1 || kinds[agentstore.IssueIndexMismatch] != 1 || kinds[agentstore.IssueExtraIndex] != 2 {
			t.Fatalf("Verify of the drifted schema: %v", rep)
		}
		if err := st.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		rep = testkit.MustVerify(t, st)
		if len(rep.Issues) != 1 || rep.Issues[0].Kind != agentstore.IssueExtraIndex || rep.Issues[0].Object != "dba_sessions_created" {
			t.Fatalf("after Migrate, want only the DBA's index reported: %v", rep)
		}
		if _, err := st.SQLDB().ExecContext(ctx, `DROP INDEX `+qi("dba_sessions_created")); err != nil {
			t.Fatal(err)
		}
		if got := anonCatalog(t, st, h); got != want {
			t.Fatalf("Migrate did not restore the catalog: %s", firstDiff(want, got))
		}
	})
}

// TestMigrateRefusesAheadAndBadTargets: a database whose recorded version
// is newer than the binary is refused with a *SchemaVersionError
// (ErrSchemaAhead) and left as it is; MigrateTo refuses targets outside
// 1..SchemaVersion and a target below the recorded version.
func TestMigrateRefusesAheadAndBadTargets(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		st := h.Open(t)
		for _, v := range []int64{0, -1, agentstore.SchemaVersion + 1} {
			if err := st.MigrateTo(ctx, v); !errors.Is(err, agentstore.ErrInvalidInput) {
				t.Errorf("MigrateTo(%d) = %v, want ErrInvalidInput", v, err)
			}
		}
		if v, _ := st.RecordedSchemaVersion(ctx); v != 0 {
			t.Fatalf("a refused target migrated to %d", v)
		}
		if err := st.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		if agentstore.SchemaVersion > 1 {
			var sv *agentstore.SchemaVersionError
			if err := st.MigrateTo(ctx, 1); !errors.As(err, &sv) || !errors.Is(err, agentstore.ErrSchemaAhead) || sv.Database != agentstore.SchemaVersion {
				t.Fatalf("MigrateTo(1) at head = %v, want ErrSchemaAhead", err)
			}
		}
		ahead := int64(agentstore.SchemaVersion + 1)
		if _, err := st.SQLDB().ExecContext(ctx, fmt.Sprintf(`INSERT INTO %s (version, applied_at) VALUES (%d, CURRENT_TIMESTAMP)`,
			quotedTable(h, st, models.TableSchemaVersion), ahead)); err != nil {
			t.Fatal(err)
		}
		before := catalogSnapshot(t, st)
		err := st.Migrate(ctx)
		var sv *agentstore.SchemaVersionError
		if !errors.Is(err, agentstore.ErrSchemaAhead) || !errors.As(err, &sv) || sv.Database != ahead || sv.Expected != agentstore.SchemaVersion {
			t.Fatalf("Migrate on a V%d database = %v, want *SchemaVersionError{%d, %d}", ahead, err, ahead, agentstore.SchemaVersion)
		}
		if catalogSnapshot(t, st) != before {
			t.Fatal("a refused Migrate changed the catalog")
		}
		rep := testkit.MustVerify(t, st)
		if len(rep.Issues) != 1 || rep.Issues[0].Kind != agentstore.IssueSchemaVersionAhead {
			t.Fatalf("Verify of an ahead database: %v", rep)
		}
	})
}

// TestMigrateCompletesInterruptedConcurrentIndex: a CREATE INDEX
// CONCURRENTLY of V2 that was interrupted left an INVALID index under the
// migration's name (here: a failed unique build). Verify reports it as
// invalid_index; the next Migrate drops and rebuilds it, records V2, and
// the catalog equals a fresh install.
func TestMigrateCompletesInterruptedConcurrentIndex(t *testing.T) {
	t.Parallel()
	h := newHarness(t, agentstore.Postgres)
	ctx := context.Background()
	st := h.Open(t)
	if err := st.MigrateTo(ctx, 1); err != nil {
		t.Fatal(err)
	}
	ex := quotedTable(h, st, models.TableExecutions)
	for i := 1; i <= 2; i++ {
		// plant: two executions with one status, so a unique build fails.
		if _, err := st.SQLDB().ExecContext(ctx, `INSERT INTO `+ex+` (instance_id, execution_id, status, started_at) VALUES ($1, 1, 'Running', 1)`, fmt.Sprint("i", i)); err != nil {
			t.Fatal(err)
		}
	}
	idx := "idx_" + st.TablePrefix() + "executions_status"
	if _, err := st.SQLDB().ExecContext(ctx, `CREATE UNIQUE INDEX CONCURRENTLY "`+idx+`" ON `+ex+` ("status")`); err == nil {
		t.Fatal("the unique build succeeded; want it to fail and leave an INVALID index")
	}
	if err := st.Migrate(ctx); err != nil {
		t.Fatalf("Migrate after an interrupted CONCURRENTLY build: %v", err)
	}
	testkit.VerifyClean(t, st)
	fresh := newHarness(t, agentstore.Postgres)
	fst := fresh.New(t)
	if got, want := anonCatalog(t, st, h), anonCatalog(t, fst, fresh); got != want {
		t.Fatalf("catalog after completing V2 differs from a fresh install at %s", firstDiff(want, got))
	}
	// Verify names an INVALID index (made by hand here, under the name of
	// the head's status index, which V7 made composite) with its fix.
	idx = "idx_" + st.TablePrefix() + "executions_status_started"
	if _, err := st.SQLDB().ExecContext(ctx, `DROP INDEX "`+h.Schema+`"."`+idx+`"`); err != nil {
		t.Fatal(err)
	}
	_, _ = st.SQLDB().ExecContext(ctx, `CREATE UNIQUE INDEX CONCURRENTLY "`+idx+`" ON `+ex+` ("status")`)
	rep := testkit.MustVerify(t, st)
	if len(rep.Issues) != 1 || rep.Issues[0].Kind != agentstore.IssueInvalidIndex || !strings.Contains(rep.Issues[0].Fix, "DROP INDEX") {
		t.Fatalf("Verify of an INVALID index: %v", rep)
	}
}

// TestVerifyFindsExtraColumnsAndDefaults: a column the models do not have
// and a changed DEFAULT are reported with SQL that fixes them (PostgreSQL)
// or the rebuild advice (SQLite, which cannot alter a default in place).
func TestVerifyFindsExtraColumnsAndDefaults(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		st := h.New(t)
		ss := quotedTable(h, st, models.TableSessions)
		if _, err := st.SQLDB().ExecContext(ctx, `ALTER TABLE `+ss+` ADD COLUMN "legacy_flag" integer`); err != nil {
			t.Fatal(err)
		}
		if h.Dialect == agentstore.Postgres {
			if _, err := st.SQLDB().ExecContext(ctx, `ALTER TABLE `+ss+` ALTER COLUMN "state" SET DEFAULT 'active'`); err != nil {
				t.Fatal(err)
			}
		}
		rep := testkit.MustVerify(t, st)
		var extra, dflt *agentstore.SchemaIssue
		for i, is := range rep.Issues {
			switch is.Kind {
			case agentstore.IssueExtraColumn:
				extra = &rep.Issues[i]
			case agentstore.IssueDefaultMismatch:
				dflt = &rep.Issues[i]
			}
		}
		if extra == nil || extra.Object != "legacy_flag" || !strings.Contains(extra.Fix, `DROP COLUMN "legacy_flag"`) {
			t.Fatalf("extra column not reported with its fix: %v", rep)
		}
		if h.Dialect == agentstore.Postgres {
			if dflt == nil || dflt.Object != "state" || dflt.Expected != "created" || dflt.Actual != "active" {
				t.Fatalf("default mismatch not reported: %v", rep)
			}
		}
		for _, is := range rep.Issues {
			if _, err := st.SQLDB().ExecContext(ctx, is.Fix); err != nil {
				t.Fatalf("fix %q: %v", is.Fix, err)
			}
		}
		testkit.VerifyClean(t, st)
	})
}

// TestExportMigrations: ExportMigrations writes the chain in each tool's
// layout (Flyway's .sql.conf beside a CONCURRENTLY migration, goose's NO
// TRANSACTION, golang-migrate's .up.sql), with a version offset, leaves
// identical files alone and refuses to overwrite different content.
func TestExportMigrations(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fly := filepath.Join(dir, "flyway")
	paths, err := agentstore.ExportMigrations(fly, agentstore.Postgres, agentstore.ExportConfig{VersionOffset: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range paths {
		names = append(names, filepath.Base(p))
	}
	chain, err := migrations.Chain("postgres")
	if err != nil {
		t.Fatal(err)
	}
	var wantNames []string
	for _, m := range chain {
		wantNames = append(wantNames, fmt.Sprintf("V%d__%s.sql", m.Version+1000, m.Description))
		if m.Conf != "" {
			wantNames = append(wantNames, fmt.Sprintf("V%d__%s.sql.conf", m.Version+1000, m.Description))
		}
	}
	if !slices.Equal(names, wantNames) {
		t.Fatalf("flyway files %v, want %v", names, wantNames)
	}
	if b, _ := os.ReadFile(filepath.Join(fly, "V1002__provider_status_indexes.sql.conf")); !strings.Contains(string(b), "executeInTransaction=false") {
		t.Fatalf("conf file: %q", b)
	}
	if _, err := agentstore.ExportMigrations(fly, agentstore.Postgres, agentstore.ExportConfig{VersionOffset: 1000}); err != nil {
		t.Fatalf("re-export of identical files: %v", err)
	}
	if err := os.WriteFile(filepath.Join(fly, "V1001__agentstore_baseline.sql"), []byte("-- changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := agentstore.ExportMigrations(fly, agentstore.Postgres, agentstore.ExportConfig{VersionOffset: 1000}); !errors.Is(err, agentstore.ErrConflict) || !strings.Contains(err.Error(), "V1001__agentstore_baseline.sql") {
		t.Fatalf("export over a changed file = %v, want ErrConflict naming it", err)
	}
	gp, err := agentstore.ExportMigrations(filepath.Join(dir, "goose"), agentstore.Postgres, agentstore.ExportConfig{Format: agentstore.FormatGoose})
	if err != nil || len(gp) != int(agentstore.SchemaVersion) {
		t.Fatalf("goose export: %v %v", gp, err)
	}
	if b, _ := os.ReadFile(gp[1]); !strings.HasPrefix(string(b), "-- +goose NO TRANSACTION\n-- +goose Up\n") || filepath.Base(gp[1]) != "2_provider_status_indexes.sql" {
		t.Fatalf("goose V2 %s:\n%.200s", gp[1], b)
	}
	mp, err := agentstore.ExportMigrations(filepath.Join(dir, "migrate"), agentstore.SQLite, agentstore.ExportConfig{Format: agentstore.FormatGolangMigrate})
	if err != nil || len(mp) != int(agentstore.SchemaVersion) || filepath.Base(mp[0]) != "1_agentstore_baseline.up.sql" {
		t.Fatalf("golang-migrate export: %v %v", mp, err)
	}
	if _, err := agentstore.ExportMigrations(dir, agentstore.Postgres, agentstore.ExportConfig{Format: "liquibase"}); !errors.Is(err, agentstore.ErrInvalidConfig) {
		t.Fatalf("unknown format: %v", err)
	}
}

// TestSchemaBehindIsTyped: a call that needs a column an older schema
// lacks (the queue's idempotency key, added in V3) fails with
// ErrSchemaBehind on both dialects, not with the driver's text.
func TestSchemaBehindIsTyped(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		st := h.Open(t)
		if err := st.MigrateTo(ctx, 2); err != nil {
			t.Fatal(err)
		}
		s := repo.NewSession()
		if err := st.Sessions().Save(ctx, s); err != nil {
			t.Fatal(err)
		}
		_, err := st.SessionQueue().Enqueue(ctx, s.ID, "x", 0)
		if !errors.Is(err, agentstore.ErrSchemaBehind) || strings.Contains(err.Error(), "SQLSTATE") || strings.Contains(err.Error(), "no column named") {
			t.Fatalf("Enqueue on a V2 schema = %v, want ErrSchemaBehind without driver text", err)
		}
	})
}

// TestMigrateFailureIsTyped: a step the database refuses (a table V1
// creates already exists, planted by hand) returns a *MigrationError
// naming the step and the statement, matching ErrMigrationFailed, with
// the database's text in DatabaseMessage only; nothing is recorded.
func TestMigrateFailureIsTyped(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		st := h.Open(t)
		if h.Schema != "" {
			if _, err := st.SQLDB().ExecContext(ctx, `CREATE SCHEMA IF NOT EXISTS "`+h.Schema+`"`); err != nil {
				t.Fatal(err)
			}
		}
		// plant: a foreign table under the name V1 creates
		if _, err := st.SQLDB().ExecContext(ctx, `CREATE TABLE `+quotedTable(h, st, models.TableSessions)+` (x integer)`); err != nil {
			t.Fatal(err)
		}
		err := st.Migrate(ctx)
		var me *agentstore.MigrationError
		if !errors.As(err, &me) || !errors.Is(err, agentstore.ErrMigrationFailed) {
			t.Fatalf("Migrate over a planted table = %v, want *MigrationError", err)
		}
		if me.Version != 1 || !strings.HasPrefix(me.Statement, "CREATE TABLE") {
			t.Errorf("MigrationError names V%d, statement %q; want V1, its CREATE TABLE", me.Version, me.Statement)
		}
		if errors.Is(err, agentstore.ErrRetryable) {
			t.Errorf("a refused statement is ErrRetryable: %v", err)
		}
		msg := err.Error()
		for _, leak := range []string{"already exists", "SQLSTATE", "42P07", "sqlite3", "Error 1005", "Foreign key constraint"} {
			if strings.Contains(msg, leak) {
				t.Errorf("error text %q carries the driver's text (%q)", msg, leak)
			}
		}
		// MariaDB's V1 creates its tables IF NOT EXISTS (a half-applied
		// V1 is finished by re-running it: DDL is not transactional), so
		// it passes over the planted table and the next table's foreign
		// key to it is what the database refuses.
		want := "already exists"
		if h.Dialect == agentstore.MariaDB {
			want = "Foreign key constraint is incorrectly formed"
		}
		if !strings.Contains(me.DatabaseMessage, want) {
			t.Errorf("DatabaseMessage %q does not carry the database's text", me.DatabaseMessage)
		}
		if v, err := st.RecordedSchemaVersion(ctx); err != nil || v != 0 {
			t.Fatalf("after a failed V1: recorded %d, %v; want 0", v, err)
		}
	})
}
