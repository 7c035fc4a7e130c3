package agentstoretest

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"
	"gorm.io/gorm/schema"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo"
)

func init() {
	register("Schema",
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

// verifyClean fails t unless Verify reports zero issues on st.
func verifyClean(t *testing.T, st *agentstore.Store) *agentstore.VerifyReport {
	t.Helper()
	rep, err := st.Verify(context.Background())
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if !rep.OK() {
		t.Fatalf("Verify found %d issues on a %s schema that should be clean:\n%s", len(rep.Issues), st.Dialect(), rep)
	}
	return rep
}

// mustVerify returns Verify's report on st, failing t on an error.
func mustVerify(t *testing.T, st *agentstore.Store) *agentstore.VerifyReport {
	t.Helper()
	rep, err := st.Verify(context.Background())
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	return rep
}

// issueKeys renders the issues as sorted "kind table object" lines.
func issueKeys(issues []agentstore.SchemaIssue) []string {
	out := make([]string, 0, len(issues))
	for _, i := range issues {
		out = append(out, fmt.Sprintf("%s %s %s", i.Kind, i.Table, i.Object))
	}
	sort.Strings(out)
	return out
}

// testMigrate_IdempotentAndRecordsVersion: Migrate run again (twice) on a
// migrated database succeeds, records the schema version exactly once, and
// leaves every table of the models in place (Verify finds them all).
func testMigrate_IdempotentAndRecordsVersion(t *testing.T, h *harness) {
	st := h.New(t)
	for i := 0; i < 2; i++ {
		if err := st.Migrate(context.Background()); err != nil {
			t.Fatalf("second Migrate: %v", err)
		}
	}
	var versions []int64
	// white-box: Verify reports only the highest recorded version; no API
	// shows that re-running Migrate adds no second version row.
	if err := st.DB(context.Background()).Model(&models.SchemaVersionRow{}).Pluck("version", &versions).Error; err != nil {
		t.Fatal(err)
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
		stores[i] = h.Open(t)
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
// CASCADE), on a plain SQL delete that bypasses the API.
func testForeignKeysCascade(t *testing.T, h *harness) {
	st := h.New(t)
	ctx := context.Background()
	db := st.DB(ctx)
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
	if err := db.Create(&models.Message{SessionID: uuid.New(), Seq: 1, ID: "m1", Role: "user",
		Content: models.VerbatimJSON(`[]`), CreatedAt: now}).Error; err == nil {
		t.Fatal("foreign key not enforced: orphan message inserted")
	}
	// white-box: a direct delete of the session row, so that only the
	// cascade (not the API's own clean-up) can remove the messages.
	if err := db.Delete(&models.Session{ID: s.ID}).Error; err != nil {
		t.Fatal(err)
	}
	// white-box: messages of a deleted session are invisible to the API.
	var n int64
	if err := db.Model(&models.Message{}).Count(&n).Error; err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d messages survived their session's delete (cascade off)", n)
	}
}

// testVerify_FreshlyMigratedIsClean: Verify reports no issue on a freshly
// migrated database, with every table, the current schema version, the
// dialect and (PostgreSQL) the test's schema in its report; a handle with
// another table prefix sees every one of its tables missing (with a CREATE
// TABLE fix) and nothing else.
func testVerify_FreshlyMigratedIsClean(t *testing.T, h *harness) {
	rep := verifyClean(t, h.New(t))
	if rep.Tables != len(models.All()) || rep.DatabaseVersion != agentstore.SchemaVersion ||
		rep.ExpectedVersion != agentstore.SchemaVersion || rep.Dialect != h.Dialect {
		t.Fatalf("report = %+v", rep)
	}
	if h.Dialect == agentstore.Postgres && rep.Schema != h.Schema {
		t.Fatalf("Verify inspected schema %q, want %q", rep.Schema, h.Schema)
	}
	// A second handle with another prefix sees none of these tables.
	other := mustVerify(t, h.Open(t, agentstore.WithTablePrefix("other_")))
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

// modelInfo parses a model with the naming of prefix (no schema).
func modelInfo(t *testing.T, m any, prefix string) *schema.Schema {
	t.Helper()
	sch, err := schema.Parse(m, &sync.Map{}, models.NewNamer(prefix, ""))
	if err != nil {
		t.Fatal(err)
	}
	return sch
}

// plainColumn returns the first column of sch that is not part of the
// primary key, an index (or an index predicate) or a foreign key and
// satisfies ok: a column a test may drop or alter without side effects.
func plainColumn(t *testing.T, sch *schema.Schema, ok func(f *schema.Field) bool) string {
	t.Helper()
	busy := map[string]bool{}
	var preds []string
	for _, idx := range sch.ParseIndexes() {
		for _, f := range idx.Fields {
			busy[f.DBName] = true
		}
		preds = append(preds, idx.Where)
	}
	for _, rel := range sch.Relationships.Relations {
		for _, r := range rel.References {
			busy[r.ForeignKey.DBName] = true
		}
	}
	for _, name := range sch.DBNames {
		f := sch.FieldsByDBName[name]
		inPred := slices.ContainsFunc(preds, func(p string) bool { return strings.Contains(p, name) })
		if !f.PrimaryKey && !busy[name] && !inPred && ok(f) {
			return name
		}
	}
	t.Fatalf("model %s has no plain column for this test", sch.Name)
	return ""
}

// fkName returns the name of the first foreign key the model declares.
func fkName(t *testing.T, sch *schema.Schema) string {
	t.Helper()
	for _, rel := range sch.Relationships.Relations {
		if c := rel.ParseConstraint(); c != nil && c.Schema == sch {
			return c.Name
		}
	}
	t.Fatalf("model %s has no foreign key", sch.Name)
	return ""
}

// rebuildSQLiteTable recreates table with the CREATE TABLE statement
// edited by edit, copying the rows and recreating its indexes: SQLite can
// alter a column's type or constraints only this way.
func rebuildSQLiteTable(t *testing.T, db *sql.DB, table string, edit func(string) string) {
	t.Helper()
	ctx := context.Background()
	var create string
	if err := db.QueryRowContext(ctx, `SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?`, table).Scan(&create); err != nil {
		t.Fatal(err)
	}
	edited := edit(create)
	if edited == create {
		t.Fatalf("rebuild of %s: edit changed nothing in %s", table, create)
	}
	tmp := table + "_rebuild"
	edited = regexp.MustCompile("^CREATE TABLE [`\"]?"+table+"[`\"]?").ReplaceAllString(edited, "CREATE TABLE `"+tmp+"`")
	rows, err := db.QueryContext(ctx, `SELECT sql FROM sqlite_master WHERE type = 'index' AND tbl_name = ? AND sql IS NOT NULL`, table)
	if err != nil {
		t.Fatal(err)
	}
	var indexes []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		indexes = append(indexes, s)
	}
	rows.Close()
	stmts := []string{edited,
		fmt.Sprintf("INSERT INTO `%s` SELECT * FROM `%s`", tmp, table),
		fmt.Sprintf("DROP TABLE `%s`", table),
		fmt.Sprintf("ALTER TABLE `%s` RENAME TO `%s`", tmp, table)}
	for _, s := range append(stmts, indexes...) {
		if _, err := db.ExecContext(ctx, s); err != nil {
			t.Fatalf("rebuild %s: %s: %v", table, s, err)
		}
	}
}

// testVerify_FindsDriftAndFixesApply damages a migrated schema in every
// way Verify checks (dropped index, partial index without its predicate,
// descending index made ascending, unique index made plain, PostgreSQL key
// without its sequence, dropped column, changed column type, lost NOT NULL,
// missing foreign key, foreign key without ON DELETE CASCADE, dropped
// table). Verify must report exactly those issues, each with a fix and the
// expected/actual values; the suggested fixes are executable and repair
// everything on PostgreSQL, and everything but the table-rebuild issues on
// SQLite.
func testVerify_FindsDriftAndFixesApply(t *testing.T, h *harness) {
	const prefix = "drift_"
	st := h.New(t, agentstore.WithTablePrefix(prefix))
	// white-box: the drift is planted with DDL on the store's own pool
	// (Store.SQLDB); no API alters the schema away from the models.
	db := st.SQLDB()
	ctx := context.Background()
	exec := func(q string) {
		t.Helper()
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	q := func(base string) string { // quoted table name
		if h.Schema != "" {
			return `"` + h.Schema + `"."` + prefix + base + `"`
		}
		return `"` + prefix + base + `"`
	}
	qi := func(name string) string { // quoted index name
		if h.Schema != "" {
			return `"` + h.Schema + `"."` + name + `"`
		}
		return `"` + name + `"`
	}
	var want []string
	expect := func(kind agentstore.IssueKind, base, object string) {
		want = append(want, fmt.Sprintf("%s %s %s", kind, prefix+base, object))
	}

	// A dropped index.
	sess := modelInfo(t, &models.Session{}, prefix)
	var plainIdx, partialIdx *schema.Index
	for _, idx := range sess.ParseIndexes() {
		if idx.Where == "" && idx.Class == "" && plainIdx == nil {
			plainIdx = idx
		}
		if idx.Where != "" && partialIdx == nil {
			partialIdx = idx
		}
	}
	exec("DROP INDEX " + qi(plainIdx.Name))
	expect(agentstore.IssueMissingIndex, models.TableSessions, plainIdx.Name)

	// A partial index recreated without its predicate.
	if partialIdx != nil {
		exec("DROP INDEX " + qi(partialIdx.Name))
		exec(fmt.Sprintf(`CREATE INDEX "%s" ON %s ("%s")`, partialIdx.Name, q(models.TableSessions), partialIdx.Fields[0].DBName))
		expect(agentstore.IssueIndexMismatch, models.TableSessions, partialIdx.Name)
	}

	// An index with a descending column recreated all ascending.
	for _, idx := range modelInfo(t, &models.QueueItem{}, prefix).ParseIndexes() {
		var cols []string
		desc := false
		for _, f := range idx.Fields {
			cols = append(cols, `"`+f.DBName+`"`)
			desc = desc || strings.EqualFold(f.Sort, "desc")
		}
		if desc {
			exec("DROP INDEX " + qi(idx.Name))
			exec(fmt.Sprintf(`CREATE INDEX "%s" ON %s (%s)`, idx.Name, q(models.TableQueue), strings.Join(cols, ", ")))
			expect(agentstore.IssueIndexMismatch, models.TableQueue, idx.Name)
			break
		}
	}

	// A unique index recreated without UNIQUE.
	for _, idx := range modelInfo(t, &models.Message{}, prefix).ParseIndexes() {
		if idx.Class != "UNIQUE" {
			continue
		}
		var cols []string
		for _, f := range idx.Fields {
			cols = append(cols, `"`+f.DBName+`"`)
		}
		exec("DROP INDEX " + qi(idx.Name))
		exec(fmt.Sprintf(`CREATE INDEX "%s" ON %s (%s)`, idx.Name, q(models.TableMessages), strings.Join(cols, ", ")))
		expect(agentstore.IssueIndexMismatch, models.TableMessages, idx.Name)
		break
	}

	// PostgreSQL: an auto-increment key that lost its sequence.
	if h.Dialect == agentstore.Postgres {
		oq := modelInfo(t, &models.OrchestratorQueueItem{}, prefix)
		exec(fmt.Sprintf(`ALTER TABLE %s ALTER COLUMN "%s" DROP DEFAULT`, q(models.TableOrchestratorQueue), oq.PrioritizedPrimaryField.DBName))
		expect(agentstore.IssueColumnTypeMismatch, models.TableOrchestratorQueue, oq.PrioritizedPrimaryField.DBName)
	}

	// A dropped column (SQLite >= 3.35 drops plain columns in place).
	dropCol := plainColumn(t, modelInfo(t, &models.Message{}, prefix), func(f *schema.Field) bool { return !f.NotNull })
	exec(fmt.Sprintf(`ALTER TABLE %s DROP COLUMN "%s"`, q(models.TableMessages), dropCol))
	expect(agentstore.IssueMissingColumn, models.TableMessages, dropCol)

	// A changed column type: an integer column becomes text.
	typeCol := plainColumn(t, modelInfo(t, &models.Todo{}, prefix), func(f *schema.Field) bool { return f.DataType == schema.Int })
	// A column that lost NOT NULL.
	nullCol := plainColumn(t, modelInfo(t, &models.Compact{}, prefix), func(f *schema.Field) bool { return f.NotNull })
	// A missing foreign key, and one without ON DELETE CASCADE.
	dropFK := fkName(t, modelInfo(t, &models.Summary{}, prefix))
	weakFK := fkName(t, modelInfo(t, &models.Plan{}, prefix))
	switch h.Dialect {
	case agentstore.Postgres:
		exec(fmt.Sprintf(`ALTER TABLE %s ALTER COLUMN "%s" TYPE text`, q(models.TableTodos), typeCol))
		exec(fmt.Sprintf(`ALTER TABLE %s ALTER COLUMN "%s" DROP NOT NULL`, q(models.TableCompacts), nullCol))
		exec(fmt.Sprintf(`ALTER TABLE %s DROP CONSTRAINT "%s"`, q(models.TableSummaries), dropFK))
		exec(fmt.Sprintf(`ALTER TABLE %s DROP CONSTRAINT "%s"`, q(models.TablePlans), weakFK))
		exec(fmt.Sprintf(`ALTER TABLE %s ADD CONSTRAINT "%s" FOREIGN KEY ("session_id") REFERENCES %s ("id")`,
			q(models.TablePlans), weakFK, q(models.TableSessions)))
	case agentstore.SQLite:
		rebuildSQLiteTable(t, db, prefix+models.TableTodos, func(s string) string {
			return regexp.MustCompile("([`\"]"+typeCol+"[`\"]) integer").ReplaceAllString(s, "$1 text")
		})
		rebuildSQLiteTable(t, db, prefix+models.TableCompacts, func(s string) string {
			return regexp.MustCompile("([`\"]"+nullCol+"[`\"] [a-z0-9()]+) NOT NULL").ReplaceAllString(s, "$1")
		})
		rebuildSQLiteTable(t, db, prefix+models.TableSummaries, func(s string) string {
			return regexp.MustCompile(",CONSTRAINT [`\"]"+dropFK+"[`\"] FOREIGN KEY [^)]*\\)[^)]*\\)( ON DELETE CASCADE)?").ReplaceAllString(s, "")
		})
		rebuildSQLiteTable(t, db, prefix+models.TablePlans, func(s string) string {
			return strings.Replace(s, " ON DELETE CASCADE", "", 1)
		})
	}
	expect(agentstore.IssueColumnTypeMismatch, models.TableTodos, typeCol)
	expect(agentstore.IssueNullabilityMismatch, models.TableCompacts, nullCol)
	expect(agentstore.IssueMissingForeignKey, models.TableSummaries, dropFK)
	expect(agentstore.IssueForeignKeyMismatch, models.TablePlans, weakFK)

	// A missing table.
	exec("DROP TABLE " + q(models.TableActivitySessions))
	expect(agentstore.IssueMissingTable, models.TableActivitySessions, "")

	rep := mustVerify(t, st)
	sort.Strings(want)
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

	// The suggested fixes are executable; on PostgreSQL they repair everything,
	// on SQLite all but the issues that need a table rebuild.
	var left []string
	for _, i := range rep.Issues {
		if strings.HasPrefix(i.Fix, "SQLite cannot") {
			left = append(left, fmt.Sprintf("%s %s %s", i.Kind, i.Table, i.Object))
			continue
		}
		exec(i.Fix)
	}
	after := mustVerify(t, st)
	sort.Strings(left)
	if got := issueKeys(after.Issues); !slices.Equal(got, left) {
		t.Fatalf("after applying the fixes: got %q, want %q\n%s", got, left, after)
	}
	if h.Dialect == agentstore.Postgres && len(left) != 0 {
		t.Fatalf("PostgreSQL fixes left issues: %q", left)
	}
}

// testVerify_SchemaVersion: Verify reports a missing or older recorded
// schema version as SchemaVersionBehind and a newer one as
// SchemaVersionAhead (one issue, with the database version in the report),
// and Migrate records the current version again.
func testVerify_SchemaVersion(t *testing.T, h *harness) {
	st := h.New(t)
	// white-box: the version rows are planted directly; Migrate only ever
	// records the current version.
	db := st.DB(context.Background())
	check := func(kind agentstore.IssueKind, actual string, dbVersion int64) {
		t.Helper()
		rep := mustVerify(t, st)
		if len(rep.Issues) != 1 || rep.Issues[0].Kind != kind || rep.Issues[0].Actual != actual || rep.DatabaseVersion != dbVersion {
			t.Fatalf("want one %s issue (actual %q, db version %d), got db version %d:\n%s", kind, actual, dbVersion, rep.DatabaseVersion, rep)
		}
	}
	if err := db.Where("1 = 1").Delete(&models.SchemaVersionRow{}).Error; err != nil {
		t.Fatal(err)
	}
	check(agentstore.IssueSchemaVersionBehind, "none recorded", 0)
	if err := db.Create(&models.SchemaVersionRow{Version: agentstore.SchemaVersion - 1, AppliedAt: newTestClock().Now()}).Error; err != nil {
		t.Fatal(err)
	}
	check(agentstore.IssueSchemaVersionBehind, fmt.Sprint(agentstore.SchemaVersion-1), agentstore.SchemaVersion-1)
	if err := db.Create(&models.SchemaVersionRow{Version: agentstore.SchemaVersion + 1, AppliedAt: newTestClock().Now()}).Error; err != nil {
		t.Fatal(err)
	}
	check(agentstore.IssueSchemaVersionAhead, fmt.Sprint(agentstore.SchemaVersion+1), agentstore.SchemaVersion+1)
	if err := db.Where("version > ?", agentstore.SchemaVersion-1).Delete(&models.SchemaVersionRow{}).Error; err != nil {
		t.Fatal(err)
	}
	// Put the head row back (the schema is at head); Migrate then has
	// nothing to do and Verify is clean.
	if err := db.Create(&models.SchemaVersionRow{Version: agentstore.SchemaVersion, AppliedAt: newTestClock().Now()}).Error; err != nil {
		t.Fatal(err)
	}
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
	rep := mustVerify(t, h.Open(t))
	if len(rep.Issues) != len(models.All()) {
		t.Fatalf("empty database: %d issues, want %d missing tables:\n%s", len(rep.Issues), len(models.All()), rep)
	}
	st := h.Open(t)
	_ = st.Close()
	if _, err := st.Verify(context.Background()); err == nil {
		t.Fatal("Verify on a closed store returned no error")
	}
}

// testVerify_ReportJSON: a VerifyReport round-trips through JSON without
// losing issues or the dialect, and issue kinds use their stable names
// ("missing_table").
func testVerify_ReportJSON(t *testing.T, h *harness) {
	rep := mustVerify(t, h.Open(t))
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var back agentstore.VerifyReport
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Issues) != len(rep.Issues) || back.Issues[0].Kind != agentstore.IssueMissingTable || back.Dialect != h.Dialect {
		t.Fatalf("JSON round trip lost data: %s", b)
	}
	if !strings.Contains(string(b), `"kind":"missing_table"`) {
		t.Fatalf("JSON does not use the stable kind names: %s", b)
	}
}
