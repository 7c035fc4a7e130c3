package agentstoretest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/internal/testkit"
	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo"
)

// The Schema area tests agentstore's schema tooling (Migrate, Verify) and
// the schema itself; it needs a StoreBackend (h.store) and, for the rows it
// plants, DatabaseOps.

// schemaTests are the Schema area's tests of this file.
func schemaTests() []test {
	return tests(
		test{"Migrate_IdempotentAndRecordsVersion", testMigrate_IdempotentAndRecordsVersion},
		test{"Migrate_ConcurrentStores", testMigrate_ConcurrentStores},
		test{"ForeignKeysCascade", testForeignKeysCascade},
		test{"Verify_FreshlyMigratedIsClean", testVerify_FreshlyMigratedIsClean},
		test{"Verify_FindsDriftAndFixesApply", testVerify_FindsDriftAndFixesApply},
		test{"Verify_SchemaVersion", testVerify_SchemaVersion},
		test{"Verify_ErrorOnlyWhenUninspectable", testVerify_ErrorOnlyWhenUninspectable},
		test{"Verify_ReportJSON", testVerify_ReportJSON},
	)
}

func verifyClean(t *testing.T, st *agentstore.Store) *agentstore.VerifyReport {
	t.Helper()
	return testkit.VerifyClean(t, st)
}

func mustVerify(t *testing.T, st *agentstore.Store) *agentstore.VerifyReport {
	t.Helper()
	return testkit.MustVerify(t, st)
}

// testMigrate_IdempotentAndRecordsVersion: Migrate run again (twice) on a
// migrated database succeeds, records the schema version exactly once, and
// leaves every table of the models in place (Verify finds them all).
func testMigrate_IdempotentAndRecordsVersion(t *testing.T, h *harness) {
	st, hs := h.store(t)
	for i := 0; i < 3; i++ {
		if err := st.Migrate(context.Background()); err != nil {
			t.Fatalf("Migrate %d: %v", i+1, err)
		}
	}
	// white-box: Verify reports only the highest recorded version; no API
	// shows that re-running Migrate adds no second version row.
	var versions []int64
	for _, v := range h.values(t, hs, models.TableSchemaVersion, nil, "version") {
		versions = append(versions, mustInt(t, v))
	}
	// One row per applied migration, 1..SchemaVersion, each once.
	if int64(len(versions)) != agentstore.SchemaVersion {
		t.Fatalf("schema versions = %v, want 1..%d once each", versions, agentstore.SchemaVersion)
	}
	slices.Sort(versions)
	for i, v := range versions {
		if v != int64(i+1) {
			t.Fatalf("schema versions = %v, want 1..%d once each", versions, agentstore.SchemaVersion)
		}
	}
	rep := verifyClean(t, st) // a missing table of any model is a MissingTable issue
	if rep.Tables != len(models.All()) || rep.DatabaseVersion != agentstore.SchemaVersion {
		t.Fatalf("report after re-migrating = %+v, want %d tables at version %d", rep, len(models.All()), agentstore.SchemaVersion)
	}
}

// testMigrate_ConcurrentStores: eight Stores migrating the same empty
// database at once all succeed (concurrent Migrate is serialised, not
// failed).
func testMigrate_ConcurrentStores(t *testing.T, h *harness) {
	const n = 8
	stores := make([]*agentstore.Store, n)
	for i := range stores {
		stores[i], _ = h.store(t)
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = stores[i].Migrate(context.Background())
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("store %d: Migrate: %v", i, err)
		}
	}
}

// testForeignKeysCascade: the database itself enforces the foreign keys
// of the schema: a message row for a session that does not exist is
// refused, and deleting a session row removes its messages (ON DELETE
// CASCADE), on a plain delete that bypasses the API.
func testForeignKeysCascade(t *testing.T, h *harness) {
	st := h.New(t)
	ops := h.ops(t)
	ctx := context.Background()
	now := newTestClock().Now()
	s := repo.NewSession()
	s.AddMessage(textMsg("m1", repo.RoleUser, "hello"))
	mustSave(t, st.Sessions(), s)
	if got := mustLoad(t, st.Sessions(), s.ID); len(got.Messages) != 1 {
		t.Fatalf("saved session has %d messages, want 1", len(got.Messages))
	}
	// white-box: the API checks the session before writing a message, so
	// only a direct insert reaches the database's foreign key.
	// A message for a session that does not exist must be refused.
	if err := ops.Insert(ctx, st, models.TableMessages, Row{"session_id": uuid.New(), "seq": 1, "id": "m1", "role": "user",
		"content": "[]", "created_at": now}); err == nil {
		t.Fatal("foreign key not enforced: orphan message inserted")
	}
	// white-box: a direct delete of the session row, so that only the
	// cascade (not the API's own clean-up) can remove the messages.
	h.del(t, st, models.TableSessions, Row{"id": s.ID})
	// white-box: messages of a deleted session are invisible to the API.
	if n := h.count(t, st, models.TableMessages, nil); n != 0 {
		t.Fatalf("%d messages survived their session's delete (cascade off)", n)
	}
}

// testVerify_FreshlyMigratedIsClean: Verify reports no issue on a freshly
// migrated database, with every table, the current schema version, the
// Store's dialect and schema in its report; a handle with another table
// prefix sees every one of its tables missing (with a CREATE TABLE fix) and
// nothing else.
func testVerify_FreshlyMigratedIsClean(t *testing.T, h *harness) {
	st, _ := h.store(t)
	if err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	rep := verifyClean(t, st)
	if rep.Tables != len(models.All()) || rep.DatabaseVersion != agentstore.SchemaVersion ||
		rep.ExpectedVersion != agentstore.SchemaVersion || rep.Dialect != st.Dialect() {
		t.Fatalf("report = %+v", rep)
	}
	if st.Schema() != "" && rep.Schema != st.Schema() {
		t.Fatalf("Verify inspected schema %q, want %q", rep.Schema, st.Schema())
	}
	// A second handle with another prefix sees none of these tables.
	otherSt, _ := h.store(t, agentstore.WithTablePrefix("other_"))
	other := mustVerify(t, otherSt)
	var missing int
	for _, i := range other.Issues {
		if i.Kind == agentstore.IssueMissingTable {
			missing++
			if !strings.HasPrefix(i.Table, "other_") || !strings.Contains(i.Fix, "CREATE TABLE") {
				t.Errorf("issue %s: want an other_ table and a CREATE TABLE fix", i)
			}
		}
	}
	if missing != len(models.All()) || len(other.Issues) != missing {
		t.Fatalf("prefix other_: %d issues (%d missing tables), want exactly %d missing tables:\n%s",
			len(other.Issues), missing, len(models.All()), other)
	}
}

// testVerify_FindsDriftAndFixesApply damages a migrated schema in every
// way Verify checks (StoreBackend.DamageSchema: dropped index, partial
// index without its predicate, descending index made ascending, unique
// index made plain, a key without its sequence where keys have sequences,
// dropped column, changed column type, lost NOT NULL, missing foreign key,
// foreign key without ON DELETE CASCADE, dropped table). Verify must report
// exactly those issues, each with a fix and the expected/actual values; the
// suggested fixes are executable and repair everything on a database that
// alters tables in place (CapAlterColumns), everything but the issues that
// need a table rebuild on one that does not.
func testVerify_FindsDriftAndFixesApply(t *testing.T, h *harness) {
	ctx := context.Background()
	st, hs := h.store(t, agentstore.WithTablePrefix("drift_"))
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	// white-box: no API alters the schema away from the models.
	want, err := h.stores(t).DamageSchema(ctx, hs)
	if err != nil {
		t.Fatal(err)
	}
	typeCol := ""
	for _, w := range want {
		if f := strings.Fields(w); len(f) == 3 && f[0] == string(agentstore.IssueColumnTypeMismatch) && f[1] == st.TablePrefix()+models.TableTodos {
			typeCol = f[2]
		}
	}

	rep := mustVerify(t, st)
	if got := issueKeys(rep.Issues); !slices.Equal(got, want) {
		t.Fatalf("issues:\n  got  %q\n  want %q\nreport:\n%s", got, want, rep)
	}
	for _, i := range rep.Issues {
		if i.Fix == "" || !strings.HasPrefix(i.String(), string(i.Kind)+" table="+i.Table) {
			t.Errorf("issue without fix or badly rendered: %s", i)
		}
		if i.Kind == agentstore.IssueColumnTypeMismatch && i.Object == typeCol &&
			(!strings.EqualFold(i.Actual, "text") || strings.EqualFold(i.Expected, "text")) {
			t.Errorf("type mismatch expected=%q actual=%q, want a non-text expectation and text found", i.Expected, i.Actual)
		}
		if i.Kind == agentstore.IssueForeignKeyMismatch && (!strings.Contains(i.Expected, "CASCADE") || strings.Contains(i.Actual, "CASCADE")) {
			t.Errorf("fk mismatch expected=%q actual=%q", i.Expected, i.Actual)
		}
	}

	// The suggested fixes are executable; where tables alter in place they
	// repair everything, elsewhere all but the issues that need a rebuild.
	var left []string
	for _, i := range rep.Issues {
		if strings.Contains(i.Fix, "cannot alter this in place") {
			left = append(left, fmt.Sprintf("%s %s %s", i.Kind, i.Table, i.Object))
			continue
		}
		if err := h.stores(t).ApplyFix(ctx, hs, i.Fix); err != nil {
			t.Fatalf("%s: %v", i.Fix, err)
		}
	}
	after := mustVerify(t, st)
	sort.Strings(left)
	if got := issueKeys(after.Issues); !slices.Equal(got, left) {
		t.Fatalf("after applying the fixes: got %q, want %q\n%s", got, left, after)
	}
	if st.Capabilities().Has(agentstore.CapAlterColumns) && len(left) != 0 {
		t.Fatalf("fixes on a database that alters tables in place left issues: %q", left)
	}
}

// testVerify_SchemaVersion: Verify reports a missing or older recorded
// schema version as SchemaVersionBehind and a newer one as
// SchemaVersionAhead (one issue, with the database version in the report),
// and Migrate records the current version again.
func testVerify_SchemaVersion(t *testing.T, h *harness) {
	st, hs := h.store(t)
	if err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	// white-box: the version rows are planted directly; Migrate only ever
	// records the current version.
	check := func(kind agentstore.IssueKind, actual string, dbVersion int64) {
		t.Helper()
		rep := mustVerify(t, st)
		if len(rep.Issues) != 1 || rep.Issues[0].Kind != kind || rep.Issues[0].Actual != actual || rep.DatabaseVersion != dbVersion {
			t.Fatalf("want one %s issue (actual %q, db version %d), got db version %d:\n%s", kind, actual, dbVersion, rep.DatabaseVersion, rep)
		}
	}
	plant := func(version int64) {
		t.Helper()
		h.insert(t, hs, models.TableSchemaVersion, Row{"version": version, "applied_at": newTestClock().Now()})
	}
	h.del(t, hs, models.TableSchemaVersion, nil)
	check(agentstore.IssueSchemaVersionBehind, "none recorded", 0)
	plant(agentstore.SchemaVersion - 1)
	check(agentstore.IssueSchemaVersionBehind, fmt.Sprint(agentstore.SchemaVersion-1), agentstore.SchemaVersion-1)
	plant(agentstore.SchemaVersion + 1)
	check(agentstore.IssueSchemaVersionAhead, fmt.Sprint(agentstore.SchemaVersion+1), agentstore.SchemaVersion+1)
	h.del(t, hs, models.TableSchemaVersion, Row{"version": agentstore.SchemaVersion + 1})
	// Put the head row back (the schema is at head); Migrate then has
	// nothing to do and Verify is clean.
	plant(agentstore.SchemaVersion)
	if err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	verifyClean(t, st)
}

// testVerify_ErrorOnlyWhenUninspectable: Verify returns an error only when
// it cannot inspect the database (a closed store); an empty database is a
// report with every table missing.
func testVerify_ErrorOnlyWhenUninspectable(t *testing.T, h *harness) {
	// An empty database is inspectable: every table is missing.
	empty, _ := h.store(t)
	rep := mustVerify(t, empty)
	if len(rep.Issues) != len(models.All()) {
		t.Fatalf("empty database: %d issues, want %d missing tables:\n%s", len(rep.Issues), len(models.All()), rep)
	}
	st, _ := h.store(t)
	_ = st.Close()
	if _, err := st.Verify(context.Background()); err == nil {
		t.Fatal("Verify on a closed store returned no error")
	}
}

// testVerify_ReportJSON: a VerifyReport round-trips through JSON without
// losing issues or the dialect, and issue kinds use their stable names
// ("missing_table").
func testVerify_ReportJSON(t *testing.T, h *harness) {
	st, _ := h.store(t)
	rep := mustVerify(t, st)
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var back agentstore.VerifyReport
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Issues) != len(rep.Issues) || back.Issues[0].Kind != agentstore.IssueMissingTable || back.Dialect != st.Dialect() {
		t.Fatalf("JSON round trip lost data: %s", b)
	}
	if !strings.Contains(string(b), `"kind":"missing_table"`) {
		t.Fatalf("JSON does not use the stable kind names: %s", b)
	}
}

// issueKeys renders the issues as sorted "kind table object" lines.
func issueKeys(issues []agentstore.SchemaIssue) []string { return testkit.IssueKeys(issues) }
