package migrations_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentstore/agentstore/migrations"
)

// released pins the Flyway checksum of every released migration file. A
// released file never changes: Flyway refuses (validate) a database whose
// history records another checksum. A new migration is added here when it
// is released; an entry is never edited.
var released = map[string]int32{
	"postgres/V1__agentstore_baseline.sql":                         -2022403588, // 0.1.0
	"sqlite/V1__agentstore_baseline.sql":                           -312183071,  // 0.1.0
	"postgres/V2__provider_status_indexes.sql":                     1292511532,  // 0.2.0
	"sqlite/V2__provider_status_indexes.sql":                       -398017780,  // 0.2.0
	"postgres/V3__sessions_exact_money_and_idempotency.sql":        -82151986,   // 0.2.0
	"sqlite/V3__sessions_exact_money_and_idempotency.sql":          -2085520010, // 0.2.0
	"postgres/V4__sessions_list_and_idempotency_indexes.sql":       -95630944,   // 0.2.0
	"sqlite/V4__sessions_list_and_idempotency_indexes.sql":         684074299,   // 0.2.0
	"postgres/V5__provider_kv_store.sql":                           -883528558,  // 0.2.0
	"sqlite/V5__provider_kv_store.sql":                             -1585311537, // 0.2.0
	"postgres/V6__sessions_paging_and_queue_retention_indexes.sql": -2088678884, // 0.2.0
	"sqlite/V6__sessions_paging_and_queue_retention_indexes.sql":   -1215285331, // 0.2.0
	"postgres/V7__provider_scale_indexes.sql":                      172083950,   // 0.2.0
	"sqlite/V7__provider_scale_indexes.sql":                        1297691169,  // 0.2.0
	"postgres/V8__message_search.sql":                              -919713068,  // 0.3.0
	"sqlite/V8__message_search.sql":                                -1495747942, // 0.3.0
	"postgres/V9__worker_queue_ready_index.sql":                    2117590869,  // 0.3.0
	"sqlite/V9__worker_queue_ready_index.sql":                      -1658305389, // 0.3.0
	"postgres/V10__session_change_feed.sql":                        611681746,   // issue 27: change feed
	"sqlite/V10__session_change_feed.sql":                          -1416295894, // issue 27: change feed
	"postgres/V11__message_search_text_plpgsql.sql":                25365296,    // search text extraction planned once per connection
	"sqlite/V11__message_search_text_plpgsql.sql":                  -1887258658, // (no change on SQLite)
	"postgres/V12__message_search_gin_list_limit.sql":              44096858,    // search GIN pending list 128 kB: a selective search flat
	"sqlite/V12__message_search_gin_list_limit.sql":                1599728206,  // (no change on SQLite)
	"postgres/V13__citus_distribution_keys.sql":                    -464051222,  // issue 28: the distribution column in every key
	"sqlite/V13__citus_distribution_keys.sql":                      -1989300324, // issue 28: the distribution column in every key
	"mariadb/V1__agentstore_baseline.sql":                          835277643,   // issue 26: MariaDB chain (unreleased)
	"mariadb/V2__provider_status_indexes.sql":                      -1579211540, // issue 26: MariaDB chain (unreleased)
	"mariadb/V3__sessions_exact_money_and_idempotency.sql":         -940859957,  // issue 26: MariaDB chain (unreleased)
	"mariadb/V4__sessions_list_and_idempotency_indexes.sql":        773174399,   // issue 26: MariaDB chain (unreleased)
	"mariadb/V5__provider_kv_store.sql":                            1210125656,  // issue 26: MariaDB chain (unreleased)
	"mariadb/V6__sessions_paging_and_queue_retention_indexes.sql":  -495139279,  // issue 26: MariaDB chain (unreleased)
	"mariadb/V7__provider_scale_indexes.sql":                       -2075623658, // issue 26: MariaDB chain (unreleased)
	"mariadb/V8__message_search.sql":                               -353266920,  // issue 26: MariaDB chain (unreleased)
	"mariadb/V9__worker_queue_ready_index.sql":                     -1933235649, // issue 26: MariaDB chain (unreleased)
	"mariadb/V10__session_change_feed.sql":                         -1051123822, // issue 26: MariaDB chain (unreleased)
	"mariadb/V11__message_search_text_plpgsql.sql":                 1810555187,  // issue 26: MariaDB chain (unreleased)
	"mariadb/V12__message_search_gin_list_limit.sql":               -48233730,   // issue 26: MariaDB chain (unreleased)
	"mariadb/V13__citus_distribution_keys.sql":                     1438845102,  // issue 26: MariaDB chain (unreleased)
	"mariadb/V14__mariadb_change_feed.sql":                         1616050048,  // issue 26/27: MariaDB change feed (unreleased)
	"postgres/V14__mariadb_change_feed.sql":                        -1528006242, // issue 26/27: version only (unreleased)
	"sqlite/V14__mariadb_change_feed.sql":                          1784830823,  // issue 26/27: version only (unreleased)
	"sqlite/V15__message_search_fulltext.sql":                      -1585864631, // issue 26/27: MariaDB message search (the version only here)
	"postgres/V15__message_search_fulltext.sql":                    -925225602,  // issue 26/27: MariaDB message search (the version only here)
	"mariadb/V15__message_search_fulltext.sql":                     717489654,   // issue 26/27: MariaDB message search (FULLTEXT)
	"mariadb/V16__message_search_fts5.sql":                         1942390811,  // issue 27: SQLite search index FTS5 in every build (unreleased)
	"postgres/V16__message_search_fts5.sql":                        -901135369,  // issue 27: SQLite search index FTS5 in every build (unreleased)
	"sqlite/V16__message_search_fts5.sql":                          1303778923,  // issue 27: SQLite search index FTS5 in every build (unreleased)
	"mariadb/V17__mariadb_queue_live_index.sql":                    1849238714,  // issue 26: MariaDB session queue live-items index (unreleased)
	"postgres/V17__mariadb_queue_live_index.sql":                   -769180082,  // issue 26: MariaDB session queue live-items index (the version only here) (unreleased)
	"sqlite/V17__mariadb_queue_live_index.sql":                     580654670,   // issue 26: MariaDB session queue live-items index (the version only here) (unreleased)
	"mariadb/V18__worker_queue_plain_claim_index.sql":              -531244478,  // issue 24: MariaDB's stand-in for the plain claim's partial index (unreleased)
	"postgres/V18__worker_queue_plain_claim_index.sql":             -375454484,  // issue 24: version only (unreleased)
	"sqlite/V18__worker_queue_plain_claim_index.sql":               1033719049,  // issue 24: version only (unreleased)
	"sqlite/V19__sqlite_feed_id_order.sql":                         -1691151119, // issue 24: SQLite's change feed in id order (unreleased)
	"postgres/V19__sqlite_feed_id_order.sql":                       -952467912,  // issue 24: version only (unreleased)
	"mariadb/V19__sqlite_feed_id_order.sql":                        -128479723,  // issue 24: version only (unreleased)
}

// TestReleasedFilesNeverChange: every committed migration is pinned, its
// checksum (computed as Flyway computes it) is the pinned one, and the
// embedded FS holds exactly the committed bytes.
func TestReleasedFilesNeverChange(t *testing.T) {
	files, err := filepath.Glob("*/V*__*.sql")
	if err != nil || len(files) == 0 {
		t.Fatalf("no migration files: %v", err)
	}
	seen := map[string]bool{}
	for _, f := range files {
		seen[f] = true
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		want, ok := released[f]
		if !ok {
			t.Errorf("%s is not pinned: add its checksum %d to released when it ships", f, migrations.FlywayChecksum(string(b)))
			continue
		}
		if got := migrations.FlywayChecksum(string(b)); got != want {
			t.Errorf("%s changed: checksum %d, released as %d. A released migration never changes; put the change in a new V<n> file", f, got, want)
		}
		emb, err := migrations.FS.ReadFile(filepath.ToSlash(f))
		if err != nil || string(emb) != string(b) {
			t.Errorf("migrations.FS does not hold the committed %s: %v", f, err)
		}
	}
	for f := range released {
		if !seen[f] {
			t.Errorf("released migration %s is missing", f)
		}
	}
}

// TestChainsAgree: both dialects have the same versions and descriptions,
// versions start at 1 without gaps, and every file records its own version.
func TestChainsAgree(t *testing.T) {
	pg, err := migrations.Chain("postgres")
	if err != nil {
		t.Fatal(err)
	}
	lite, err := migrations.Chain("sqlite")
	if err != nil {
		t.Fatal(err)
	}
	if len(pg) != len(lite) {
		t.Fatalf("postgres has %d migrations, sqlite %d", len(pg), len(lite))
	}
	// MariaDB's chain (issue 26) has the same versions and descriptions; its
	// V1 creates the schema of V11 and every step is non-transactional.
	maria, err := migrations.Chain("mariadb")
	if err != nil {
		t.Fatal(err)
	}
	if len(maria) != len(pg) {
		t.Fatalf("postgres has %d migrations, mariadb %d", len(pg), len(maria))
	}
	for i, m := range maria {
		if m.Version != pg[i].Version || m.Description != pg[i].Description {
			t.Errorf("V%d: postgres %s, mariadb %s", i+1, pg[i].File, m.File)
		}
		rec := "VALUES (" + itoa(m.Version) + ", CURRENT_TIMESTAMP)"
		if !strings.Contains(m.SQL, `INSERT INTO "agentstore_schema_version" (version, applied_at) `+rec+" ON DUPLICATE KEY UPDATE version = version") {
			t.Errorf("%s does not record its version re-runnably (%s)", m.File, rec)
		}
		if !m.NoTransaction {
			t.Errorf("mariadb %s is not marked executeInTransaction=false (MariaDB DDL commits implicitly)", m.File)
		}
	}
	for i := range pg {
		if pg[i].Version != lite[i].Version || pg[i].Description != lite[i].Description {
			t.Errorf("V%d: postgres %s, sqlite %s", i+1, pg[i].File, lite[i].File)
		}
		for _, m := range []migrations.Migration{pg[i], lite[i]} {
			rec := "VALUES (" + itoa(m.Version) + ", CURRENT_TIMESTAMP)"
			if !strings.Contains(m.SQL, `INSERT INTO "agentstore_schema_version" (version, applied_at) `+rec) {
				t.Errorf("%s does not record its version (%s)", m.File, rec)
			}
		}
		if lite[i].NoTransaction {
			t.Errorf("sqlite %s is marked executeInTransaction=false", lite[i].File)
		}
	}
}

// TestFlywayChecksum: the checksum ignores line terminators (LF, CRLF, CR)
// and a leading byte-order mark, as Flyway's does.
func TestFlywayChecksum(t *testing.T) {
	a := migrations.FlywayChecksum("SELECT 1;\nSELECT 2;\n")
	for _, v := range []string{"SELECT 1;\r\nSELECT 2;\r\n", "\uFEFFSELECT 1;\nSELECT 2;", "SELECT 1;\rSELECT 2;"} {
		if got := migrations.FlywayChecksum(v); got != a {
			t.Errorf("checksum of %q = %d, want %d", v, got, a)
		}
	}
	if migrations.FlywayChecksum("SELECT 1;\nSELECT 3;\n") == a {
		t.Error("different content, same checksum")
	}
}

// TestRender: the committed files name tables, indexes and constraints
// with the default prefix; Render moves them to another prefix and schema
// and leaves nothing of the default prefix behind.
func TestRender(t *testing.T) {
	pg, err := migrations.Chain("postgres")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range pg {
		if migrations.Render(m.SQL, migrations.DefaultPrefix, "") != m.SQL {
			t.Fatalf("%s: rendering for the default prefix changed it", m.File)
		}
		out := migrations.Render(m.SQL, "claude_", "agents")
		if strings.Contains(out, "agentstore_") {
			t.Fatalf("%s rendered for prefix claude_ still names agentstore_:\n%s", m.File, out)
		}
		if !strings.Contains(out, `"agents"."claude_`) {
			t.Fatalf("%s rendered for schema agents has no qualified table", m.File)
		}
	}
	got := migrations.Render(`DROP INDEX IF EXISTS "idx_agentstore_x"; CREATE INDEX "idx_agentstore_y" ON "agentstore_queue" ("a");`, "p_", "s")
	want := `DROP INDEX IF EXISTS "s"."idx_p_x"; CREATE INDEX "idx_p_y" ON "s"."p_queue" ("a");`
	if got != want {
		t.Fatalf("Render = %s, want %s", got, want)
	}
}

func itoa(v int64) string {
	b := []byte{}
	for v > 0 || len(b) == 0 {
		b = append([]byte{byte('0' + v%10)}, b...)
		v /= 10
	}
	return string(b)
}
