// Package migrations holds agentstore's versioned schema migrations, one
// chain per dialect, embedded:
//
//	postgres/V1__agentstore_baseline.sql, postgres/V2__....sql, ...
//	sqlite/V1__agentstore_baseline.sql,   sqlite/V2__....sql, ...
//
// The files are written for the default table prefix ("agentstore_") and
// no PostgreSQL schema, in Flyway's naming (V<version>__<description>.sql);
// a migration that must not run in a transaction (PostgreSQL CREATE INDEX
// CONCURRENTLY) has a Flyway script configuration file beside it
// (V<n>__<description>.sql.conf holding executeInTransaction=false).
//
// Release discipline: a committed file never changes once released (a test
// pins each file's Flyway checksum); every schema change is a new file per
// dialect, and the head of each chain must equal the GORM models (a test
// compares a database built by the chain with one built from the models).
// Store.Migrate applies the same files (rendered for the Store's prefix and
// schema); `agentstore ddl --flyway DIR` writes them for Flyway, `--format
// goose|golang-migrate` for those tools.
package migrations

import (
	"embed"
	"fmt"
	"hash/crc32"
	"io/fs"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// FS holds every migration of every dialect: postgres/*.sql, sqlite/*.sql,
// mariadb/*.sql and their *.sql.conf script configurations.
//
//go:embed postgres sqlite mariadb
var FS embed.FS

// DefaultPrefix is the table prefix the committed files are written for.
const DefaultPrefix = "agentstore_"

// Migration is one versioned step of a dialect's chain.
type Migration struct {
	// Version is the schema version the step brings the database to.
	Version int64
	// Description is the file name's description part ("agentstore_baseline").
	Description string
	// File is the file name, e.g. "V1__agentstore_baseline.sql".
	File string
	// SQL is the file's content (default prefix, no schema).
	SQL string
	// NoTransaction is set for a step that cannot run in a transaction
	// (its .sql.conf says executeInTransaction=false).
	NoTransaction bool
	// Conf is the content of the step's Flyway script configuration file
	// ("" when it has none).
	Conf string
}

var fileRE = regexp.MustCompile(`^V([1-9][0-9]*)__([A-Za-z0-9_]+)\.sql$`)

// Chain returns the migrations of dialect ("postgres" or "sqlite") in
// version order. Versions start at 1 and have no gaps.
func Chain(dialect string) ([]Migration, error) {
	entries, err := fs.ReadDir(FS, dialect)
	if err != nil {
		return nil, fmt.Errorf("migrations: no chain for dialect %q", dialect)
	}
	var out []Migration
	for _, e := range entries {
		name := e.Name()
		if strings.HasSuffix(name, ".conf") {
			continue
		}
		m := fileRE.FindStringSubmatch(name)
		if m == nil {
			return nil, fmt.Errorf("migrations: %s/%s is not named V<version>__<description>.sql", dialect, name)
		}
		v, _ := strconv.ParseInt(m[1], 10, 64)
		b, err := fs.ReadFile(FS, dialect+"/"+name)
		if err != nil {
			return nil, err
		}
		mig := Migration{Version: v, Description: m[2], File: name, SQL: string(b)}
		if c, err := fs.ReadFile(FS, dialect+"/"+name+".conf"); err == nil {
			mig.Conf = string(c)
			mig.NoTransaction = strings.Contains(strings.ReplaceAll(string(c), " ", ""), "executeInTransaction=false")
		}
		out = append(out, mig)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i, m := range out {
		if m.Version != int64(i+1) {
			return nil, fmt.Errorf("migrations: %s chain has no V%d (found %s)", dialect, i+1, m.File)
		}
	}
	return out, nil
}

// Head returns the version of the last migration of dialect's chain.
func Head(dialect string) (int64, error) {
	c, err := Chain(dialect)
	if err != nil {
		return 0, err
	}
	if len(c) == 0 {
		return 0, fmt.Errorf("migrations: %s chain is empty", dialect)
	}
	return c[len(c)-1].Version, nil
}

// FlywayChecksum computes the checksum Flyway records for a SQL migration:
// CRC32 over the file's lines without their line terminators (a leading
// UTF-8 byte-order mark dropped), as a signed 32-bit integer.
func FlywayChecksum(content string) int32 {
	content = strings.TrimPrefix(content, "\uFEFF")
	h := crc32.NewIEEE()
	for len(content) > 0 {
		i := strings.IndexAny(content, "\r\n")
		if i < 0 {
			h.Write([]byte(content))
			break
		}
		h.Write([]byte(content[:i]))
		if content[i] == '\r' && i+1 < len(content) && content[i+1] == '\n' {
			i++
		}
		content = content[i+1:]
	}
	return int32(h.Sum32())
}

// identRE finds the quoted identifiers ("..." or, in the released SQLite
// V1 written by GORM, `...`) of the committed files that carry
// the default prefix: table names ("agentstore_sessions") and the names of
// indexes and constraints derived from them ("idx_agentstore_...",
// "fk_agentstore_...", "uni_agentstore_...", "chk_agentstore_...").
var identRE = regexp.MustCompile("([\"`])((?:idx|fk|uni|chk)_)?agentstore_([A-Za-z0-9_]+)[\"`]")

// headerRE finds the prefix a file's header comment names.
var headerRE = regexp.MustCompile(`(?m)^(-- agentstore schema version \d+ for \w+ \(prefix )"agentstore_"`)

// dropIndexRE finds index names after DROP INDEX [CONCURRENTLY] [IF EXISTS]
// and ALTER INDEX, which PostgreSQL needs schema-qualified.
var dropIndexRE = regexp.MustCompile(`(?i)((?:DROP INDEX(?: CONCURRENTLY)?(?: IF EXISTS)?|ALTER INDEX(?: IF EXISTS)?) )"((?:idx|uni)_[A-Za-z0-9_]*)"`)

// Render rewrites a committed migration for a table prefix and a
// PostgreSQL schema: table names become "<schema>"."<prefix><table>" (or
// "<prefix><table>" without a schema), index and constraint names
// "<kind>_<prefix><rest>", and indexes named by DROP INDEX / ALTER INDEX
// are schema-qualified. Render(sql, DefaultPrefix, "") returns sql
// unchanged. prefix and schema must be plain identifiers (agentstore's
// options check that).
func Render(sql, prefix, schema string) string {
	if prefix == DefaultPrefix && schema == "" {
		return sql
	}
	out := identRE.ReplaceAllStringFunc(sql, func(m string) string {
		sub := identRE.FindStringSubmatch(m)
		q := sub[1]       // the file's quote: " (PostgreSQL, later SQLite files) or ` (SQLite V1)
		if sub[2] != "" { // index or constraint: never schema-qualified here
			return q + sub[2] + prefix + sub[3] + q
		}
		if schema != "" {
			return q + schema + q + "." + q + prefix + sub[3] + q
		}
		return q + prefix + sub[3] + q
	})
	if schema != "" {
		out = dropIndexRE.ReplaceAllString(out, `${1}"`+schema+`"."${2}"`)
	}
	hdr := `${1}"` + prefix + `"`
	if schema != "" {
		hdr += `, schema "` + schema + `"`
	}
	return headerRE.ReplaceAllString(out, hdr)
}

// Statements splits a migration into its statements (separated by ";" at
// the end of a line), without comments-only lines.
func Statements(sql string) []string {
	var out []string
	var cur strings.Builder
	for _, line := range strings.Split(sql, "\n") {
		t := strings.TrimSpace(line)
		if t == "" || strings.HasPrefix(t, "--") {
			continue
		}
		cur.WriteString(line)
		cur.WriteByte('\n')
		if strings.HasSuffix(t, ";") {
			s := strings.TrimSuffix(strings.TrimSpace(cur.String()), ";")
			if s != "" {
				out = append(out, s)
			}
			cur.Reset()
		}
	}
	if s := strings.TrimSpace(cur.String()); s != "" {
		out = append(out, strings.TrimSuffix(s, ";"))
	}
	return out
}
