package main

import (
	"database/sql"
	"fmt"
	"os"
	"sort"
	"time"

	_ "github.com/mattn/go-sqlite3"
)

const schema = `create table s(id text primary key, last_seq int not null, message_count int not null, current_leaf_id text, tenant_id text, version int not null, updated_at datetime, total_input_tokens int not null default 0, total_output_tokens int not null default 0);
create table m(session_id text not null, seq int not null, id text not null, parent_id text, role text not null, content text not null, is_sidechain int not null default 0, is_compact_summary int not null default 0, usage text, metadata text, model text, request_id text, environment text, created_at datetime not null, primary key(session_id, seq));
create unique index m2 on m(session_id,id); create index m3 on m(session_id, created_at);`

func main() {
	os.Remove("/tmp/micro.db")
	os.Remove("/tmp/micro.db-wal")
	db, err := sql.Open("sqlite3", "file:/tmp/micro.db?_journal_mode=WAL&_busy_timeout=10000&_foreign_keys=on&_txlock=immediate&_synchronous=NORMAL&_stmt_cache_size=128")
	if err != nil {
		panic(err)
	}
	db.SetMaxOpenConns(1)
	if _, err := db.Exec(schema); err != nil {
		panic(err)
	}
	ids := map[string]string{}
	for _, v := range []string{"A", "B", "C", "D", "E", "F", "G"} {
		id := "sess-" + v
		ids[v] = id
		db.Exec("insert into s(id, last_seq, message_count, version, updated_at) values (?, 0, 0, 1, ?)", id, time.Now())
	}
	cols := "session_id, seq, id, parent_id, role, content, is_sidechain, is_compact_summary, usage, metadata, model, request_id, environment, created_at"
	content := `[{"type":"text","text":"hello"}]`
	n := 0
	upd := "UPDATE s SET last_seq = +?, message_count = message_count + 1, current_leaf_id = ?, total_input_tokens = total_input_tokens + ?, total_output_tokens = total_output_tokens + ?, updated_at = ?, version = version + 1 WHERE id = +?"
	fns := map[string]func(tx *sql.Tx, id, mid string) error{
		"A": func(tx *sql.Tx, id, mid string) error { // old: select, update, insert
			var ls int64
			var leaf sql.NullString
			var v int64
			if err := tx.QueryRow("SELECT last_seq, version, current_leaf_id FROM s WHERE id = +?", id).Scan(&ls, &v, &leaf); err != nil {
				return err
			}
			if _, err := tx.Exec(upd, ls+1, mid, 10, 5, time.Now(), id); err != nil {
				return err
			}
			_, err := tx.Exec("INSERT INTO m ("+cols+") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", id, ls+1, mid, leaf, "user", content, false, false, `{"a":1}`, nil, nil, nil, nil, time.Now())
			return err
		},
		"B": func(tx *sql.Tx, id, mid string) error { // CTE insert-select returning, update
			rows, err := tx.Query("WITH v(n, mid, mparent, mrole, mcontent, msc, mcs, musage, mmeta, mmodel, mreq, menv, mat) AS (VALUES (1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)) INSERT INTO m ("+cols+") SELECT s.id, s.last_seq + v.n, v.mid, COALESCE(v.mparent, CASE WHEN v.n = 1 AND NOT v.mcs THEN s.current_leaf_id END), v.mrole, v.mcontent, v.msc, v.mcs, v.musage, v.mmeta, v.mmodel, v.mreq, v.menv, v.mat FROM s, v WHERE s.id = +? RETURNING seq, parent_id",
				mid, nil, "user", content, false, false, `{"a":1}`, nil, nil, nil, nil, time.Now(), id)
			if err != nil {
				return err
			}
			var seq int64
			var p sql.NullString
			for rows.Next() {
				rows.Scan(&seq, &p)
			}
			rows.Close()
			_, err = tx.Exec(upd, seq, mid, 10, 5, time.Now(), id)
			return err
		},
		"C": func(tx *sql.Tx, id, mid string) error { // insert-select no CTE, returning
			rows, err := tx.Query("INSERT INTO m ("+cols+") SELECT s.id, s.last_seq + 1, ?, COALESCE(?, s.current_leaf_id), ?, ?, ?, ?, ?, ?, ?, ?, ?, ? FROM s WHERE s.id = +? RETURNING seq, parent_id",
				mid, nil, "user", content, false, false, `{"a":1}`, nil, nil, nil, nil, time.Now(), id)
			if err != nil {
				return err
			}
			var seq int64
			var p sql.NullString
			for rows.Next() {
				rows.Scan(&seq, &p)
			}
			rows.Close()
			_, err = tx.Exec(upd, seq, mid, 10, 5, time.Now(), id)
			return err
		},
		"D": func(tx *sql.Tx, id, mid string) error { // insert-select no CTE exec, update returning
			if _, err := tx.Exec("INSERT INTO m ("+cols+") SELECT s.id, s.last_seq + 1, ?, COALESCE(?, s.current_leaf_id), ?, ?, ?, ?, ?, ?, ?, ?, ?, ? FROM s WHERE s.id = +?",
				mid, nil, "user", content, false, false, `{"a":1}`, nil, nil, nil, nil, time.Now(), id); err != nil {
				return err
			}
			var ls int64
			return tx.QueryRow("UPDATE s SET last_seq = last_seq + 1, message_count = message_count + 1, current_leaf_id = ?, total_input_tokens = total_input_tokens + ?, total_output_tokens = total_output_tokens + ?, updated_at = ?, version = version + 1 WHERE id = +? RETURNING last_seq", mid, 10, 5, time.Now(), id).Scan(&ls)
		},
		"F": func(tx *sql.Tx, id, mid string) error { // CTE exec, update returning
			if _, err := tx.Exec("WITH v(n, mid, mparent, mrole, mcontent, msc, mcs, musage, mmeta, mmodel, mreq, menv, mat) AS (VALUES (1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)) INSERT INTO m ("+cols+") SELECT s.id, s.last_seq + v.n, v.mid, COALESCE(v.mparent, CASE WHEN v.n = 1 AND NOT v.mcs THEN s.current_leaf_id END), v.mrole, v.mcontent, v.msc, v.mcs, v.musage, v.mmeta, v.mmodel, v.mreq, v.menv, v.mat FROM s, v WHERE s.id = +?",
				mid, nil, "user", content, false, false, `{"a":1}`, nil, nil, nil, nil, time.Now(), id); err != nil {
				return err
			}
			var ls int64
			return tx.QueryRow("UPDATE s SET last_seq = last_seq + 1, message_count = message_count + 1, current_leaf_id = ?, total_input_tokens = total_input_tokens + ?, total_output_tokens = total_output_tokens + ?, updated_at = ?, version = version + 1 WHERE id = +? RETURNING last_seq", mid, 10, 5, time.Now(), id).Scan(&ls)
		},
		"G": func(tx *sql.Tx, id, mid string) error { // CTE exec, update returning + parent subquery
			if _, err := tx.Exec("WITH v(n, mid, mparent, mrole, mcontent, msc, mcs, musage, mmeta, mmodel, mreq, menv, mat) AS (VALUES (1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)) INSERT INTO m ("+cols+") SELECT s.id, s.last_seq + v.n, v.mid, COALESCE(v.mparent, CASE WHEN v.n = 1 AND NOT v.mcs THEN s.current_leaf_id END), v.mrole, v.mcontent, v.msc, v.mcs, v.musage, v.mmeta, v.mmodel, v.mreq, v.menv, v.mat FROM s, v WHERE s.id = +?",
				mid, nil, "user", content, false, false, `{"a":1}`, nil, nil, nil, nil, time.Now(), id); err != nil {
				return err
			}
			var ls int64
			var p sql.NullString
			return tx.QueryRow("UPDATE s SET last_seq = last_seq + 1, message_count = message_count + 1, current_leaf_id = ?, total_input_tokens = total_input_tokens + ?, total_output_tokens = total_output_tokens + ?, updated_at = ?, version = version + 1 WHERE id = +? RETURNING last_seq, (SELECT parent_id FROM m WHERE m.session_id = s.id AND m.seq = s.last_seq - 0)", mid, 10, 5, time.Now(), id).Scan(&ls, &p)
		},
		"E": func(tx *sql.Tx, id, mid string) error { // raw
			var ls int64
			if err := tx.QueryRow("UPDATE s SET last_seq = last_seq + 1, message_count = message_count + 1, current_leaf_id = ?, total_input_tokens = total_input_tokens + ?, total_output_tokens = total_output_tokens + ?, updated_at = ?, version = version + 1 WHERE id = +? RETURNING last_seq", mid, 10, 5, time.Now(), id).Scan(&ls); err != nil {
				return err
			}
			_, err := tx.Exec("INSERT INTO m (session_id, seq, id, role, content, usage, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)", id, ls, mid, "user", content, `{"a":1}`, time.Now())
			return err
		},
	}
	vs := []string{"A", "E", "F", "G"}
	blocks := map[string][]float64{}
	for round := 0; round < 150; round++ {
		for j := range vs {
			v := vs[(j+round)%len(vs)]
			t0 := time.Now()
			for i := 0; i < 100; i++ {
				n++
				tx, err := db.Begin()
				if err != nil {
					panic(err)
				}
				if err := fns[v](tx, ids[v], fmt.Sprint("m", n)); err != nil {
					panic(v + ": " + err.Error())
				}
				if err := tx.Commit(); err != nil {
					panic(err)
				}
			}
			blocks[v] = append(blocks[v], float64(time.Since(t0).Microseconds())/100)
		}
	}
	for _, v := range vs {
		b := blocks[v]
		sort.Float64s(b)
		fmt.Printf("%s median %.1f p25 %.1f us/op\n", v, b[len(b)/2], b[len(b)/4])
	}
}
