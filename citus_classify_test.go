package agentstore_test

import "testing"

// TestCitusClassifier: the audit's classification of statements (as GORM's
// logger renders them, arguments inlined) against agentstore.CitusLayout,
// and the templates that identify them in the committed list.
func TestCitusClassifier(t *testing.T) {
	t.Parallel()
	const sch = `"t_0123456789abcdef0123456789abcdef".`
	cases := []struct {
		name, sql, class, template string
	}{
		{"load pinned", `SELECT * FROM ` + sch + `"agentstore_messages" WHERE session_id = '0190a' AND seq > 5 ORDER BY seq`,
			"single", `SELECT * FROM {messages} WHERE session_id = ? AND seq > ? ORDER BY seq`},
		{"tenant list", `SELECT count(*) FROM "agentstore_sessions" WHERE tenant_id = 'acme'`, "global", ""},
		{"append one session", `INSERT INTO "agentstore_messages" ("session_id","seq","id") VALUES ('s1',1,'a'),('s1',2,'b')`,
			"single", `INSERT INTO {messages} (session_id, seq, id) VALUES (?)`},
		{"insert two sessions", `INSERT INTO "agentstore_messages" ("session_id","seq","id") VALUES ('s1',1,'a'),('s2',2,'b')`, "multi", ""},
		{"insert cast", `INSERT INTO "agentstore_todos" ("id","session_id") VALUES (CAST('a' AS uuid),CAST('s1' AS uuid)),(CAST('b' AS uuid),CAST('s1' AS uuid))`, "single", ""},
		{"enqueue", `INSERT INTO "agentstore_queue" (id, session_id, operation) SELECT CAST('i' AS uuid), id, 'enqueue' FROM "agentstore_sessions" WHERE id = 's1' ON CONFLICT (session_id, idempotency_key) DO NOTHING RETURNING seq`,
			"single", ""},
		{"enqueue for update of a missing pin", `INSERT INTO "agentstore_queue" (id, session_id) SELECT 'i', id FROM "agentstore_sessions" WHERE tenant_id = 'a'`, "global", ""},
		{"fork copy", `INSERT INTO "agentstore_messages" (session_id, seq, id) SELECT 'child', seq, id FROM "agentstore_messages" WHERE session_id = 'parent' AND seq <= 3`,
			"multi", ""},
		{"complete by id", `UPDATE "agentstore_queue" SET status = 'completed' WHERE id = 'i' AND lease_token = 't'`, "global", ""},
		{"complete by session and id", `UPDATE "agentstore_queue" SET status = 'completed' WHERE session_id = 's' AND id = 'i' AND lease_token = 't'`, "single", ""},
		{"queue item by id", `SELECT * FROM "agentstore_queue" WHERE id = 'x'`, "global", ""},
		{"no table", `SELECT 1`, "none", "SELECT ?"},
		{"reference table", `SELECT version FROM "agentstore_schema_version" ORDER BY version DESC LIMIT 1`, "none", ""},
		{"ddl", `CREATE INDEX IF NOT EXISTS "idx_agentstore_queue_id" ON "agentstore_queue" ("id")`, "ddl", ""},
		{"history of two", `SELECT * FROM "agentstore_history" h WHERE h.instance_id IN ('a','b')`, "multi", `SELECT * FROM {history} h WHERE h.instance_id IN (?)`},
		{"history of one", `SELECT * FROM "agentstore_history" h WHERE h.instance_id IN ('a')`, "single", ""},
		{"any", `DELETE FROM "agentstore_kv_store" WHERE instance_id = ANY('{a,b}')`, "multi", ""},
		{"global claim", `SELECT q.id FROM "claude_orchestrator_queue" q WHERE q.visible_at <= 5 ORDER BY q.visible_at, q.id LIMIT 1 FOR UPDATE SKIP LOCKED`,
			"global", `SELECT q.id FROM {orchestrator_queue} q WHERE q.visible_at <= ? ORDER BY q.visible_at, q.id LIMIT ? FOR UPDATE SKIP LOCKED`},
		{"co-located join", `SELECT m.id FROM "agentstore_messages" AS m JOIN "agentstore_sessions" s ON s.id = m.session_id WHERE m.session_id = 'x'`, "single", ""},
		{"alias pins another table's id", `SELECT m.id FROM "agentstore_messages" m JOIN "agentstore_sessions" s ON s.id = m.session_id WHERE m.id = 'x'`, "global", ""},
		{"two groups", `SELECT 1 FROM "agentstore_messages" WHERE session_id = 'a' UNION ALL SELECT 1 FROM "agentstore_instances" WHERE instance_id = 'b'`, "multi", ""},
		{"activity session", `SELECT * FROM "agentstore_activity_sessions" WHERE session_id = 'w'`, "single", ""},
		{"quotes in literals", `SELECT * FROM "agentstore_kv_store" WHERE instance_id = 'it''s' AND key = 'k'`, "single", `SELECT * FROM {kv_store} WHERE instance_id = ? AND key = ?`},
		{"null and params", `UPDATE "agentstore_instances" SET output = NULL WHERE instance_id = $1`, "single", `UPDATE {instances} SET output = ? WHERE instance_id = ?`},
	}
	for _, c := range cases {
		class, tmpl := classifyStatement(c.sql)
		if class != c.class {
			t.Errorf("%s: class %q, want %q (template %s)", c.name, class, c.class, tmpl)
		}
		if c.template != "" && tmpl != c.template {
			t.Errorf("%s: template\n  %s\nwant\n  %s", c.name, tmpl, c.template)
		}
	}
	// a VALUES list's rows and an IN list collapse: batches of any size are one entry
	_, a := classifyStatement(`UPDATE "agentstore_queue" AS q SET status = 'completed' FROM (VALUES ('a','b'),('c','d')) AS v WHERE q.id = v.column1 AND q.session_id IN ('x','y')`)
	_, b := classifyStatement(`UPDATE "agentstore_queue" AS q SET status = 'completed' FROM (VALUES ('a','b'),('c','d'),('e','f')) AS v WHERE q.id = v.column1 AND q.session_id IN ('x')`)
	if a != b {
		t.Errorf("batch templates differ:\n  %s\n  %s", a, b)
	}
	_, a = classifyStatement(`DELETE FROM "agentstore_worker_queue" WHERE id IN (1) AND lock_token = CASE id WHEN 1 THEN CAST('a' AS text) END RETURNING id`)
	_, b = classifyStatement(`DELETE FROM "agentstore_worker_queue" WHERE id IN (1,2,3) AND lock_token = CASE id WHEN 1 THEN CAST('a' AS text) WHEN 2 THEN CAST('b' AS text) WHEN 3 THEN CAST('c' AS text) END RETURNING id`)
	if a != b || a != `DELETE FROM {worker_queue} WHERE id IN (?) AND lock_token = CASE id WHEN ? THEN CAST (? AS text) END RETURNING id` {
		t.Errorf("CASE lists of different lengths:\n  %s\n  %s", a, b)
	}
	for op, hot := range map[string]bool{"(*sessionQueue).Dequeue": true, "(*provider).FetchOrchestrationItem": true,
		"(*sessionRepo).List": false, "(*providerAdmin).ListInstances": false, "(other)": false} {
		if citusHot(op) != hot {
			t.Errorf("citusHot(%q) = %v", op, !hot)
		}
	}
}
