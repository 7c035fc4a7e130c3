package mariadb

import (
	"reflect"
	"regexp"
	"strings"

	gormmysql "gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/migrator"
	"gorm.io/gorm/schema"

	"github.com/agentstore/agentstore/internal/dialect"
	"github.com/agentstore/agentstore/models"
)

// What Verify expects of a MariaDB schema and how it repairs one: the
// models' column types as the MariaDB chain spells them (migrations/mariadb
// V1, V13), and the fixes in MariaDB's ALTER TABLE syntax.

// chainType returns the type the MariaDB chain gives a column the models
// declare "text", by base table and column ("table.column"), if another:
// keys and indexed columns are VARCHAR (an index needs a length; instance
// and session ids of the provider 360 characters, other ids 255),
// documents LONGTEXT.
func chainType(key string) (string, bool) {
	switch key {
	case models.TableSessions + ".agent_type",
		models.TableSessions + ".tenant_id",
		models.TableSessions + ".current_leaf_id",
		models.TableMessages + ".id",
		models.TableMessages + ".parent_id",
		models.TableMessages + ".request_id",
		models.TableCompacts + ".logical_parent_id",
		models.TableSummaries + ".leaf_message_id",
		models.TableQueue + ".lease_owner",
		models.TableQueue + ".idempotency_key",
		models.TableSessionChanges + ".tenant_id",
		models.TableHistory + ".event_type",
		models.TableOrchestratorQueue + ".lock_token",
		models.TableWorkerQueue + ".lock_token",
		models.TableInstanceLocks + ".lock_token",
		models.TableKVStore + ".key",
		models.TableKVDelta + ".key":
		return "varchar(255)", true
	case models.TableSessions + ".summary",
		models.TableCompacts + ".summary",
		models.TableSummaries + ".summary",
		models.TableQueue + ".content",
		models.TablePlans + ".content",
		models.TableInstances + ".custom_status",
		models.TableExecutions + ".output",
		models.TableHistory + ".event_data",
		models.TableOrchestratorQueue + ".work_item",
		models.TableWorkerQueue + ".work_item",
		models.TableKVStore + ".value",
		models.TableKVDelta + ".value":
		return "longtext", true
	case models.TableInstances + ".instance_id",
		models.TableInstances + ".parent_instance_id",
		models.TableExecutions + ".instance_id",
		models.TableHistory + ".instance_id",
		models.TableOrchestratorQueue + ".instance_id",
		models.TableWorkerQueue + ".instance_id",
		models.TableWorkerQueue + ".session_id",
		models.TableWorkerQueue + ".tag",
		models.TableInstanceLocks + ".instance_id",
		models.TableActivitySessions + ".session_id",
		models.TableActivitySessions + ".worker_id",
		models.TableKVStore + ".instance_id",
		models.TableKVDelta + ".instance_id":
		return "varchar(360)", true
	case models.TableExecutions + ".status":
		return "varchar(64)", true
	}
	return "", false
}

// baseTable returns the unprefixed table name of the model sch parses
// (its TableName with a Namer that adds nothing), "" for another type.
func baseTable(sch *schema.Schema) string {
	if sch == nil || sch.ModelType == nil {
		return ""
	}
	if tn, ok := reflect.New(sch.ModelType).Interface().(interface{ TableName(schema.Namer) string }); ok {
		return tn.TableName(nil)
	}
	return ""
}

// mdGorm is GORM's mysql dialector with the column types of the MariaDB
// chain: DDL rendered from the models (Verify's expected types, its CREATE
// TABLE and ADD COLUMN fixes, `agentstore ddl`) is what the chain creates.
type mdGorm struct{ *gormmysql.Dialector }

// DataTypeOf: GORM's type, or the chain's where it differs.
func (g mdGorm) DataTypeOf(f *schema.Field) string {
	t := g.Dialector.DataTypeOf(f)
	if strings.EqualFold(t, "text") {
		if ct, ok := chainType(baseTable(f.Schema) + "." + f.DBName); ok {
			return ct
		}
	}
	return t
}

// Migrator is GORM's mysql migrator whose generic part asks mdGorm for
// column types.
func (g mdGorm) Migrator(db *gorm.DB) gorm.Migrator {
	return mdMigrator{gormmysql.Migrator{
		Migrator:  migrator.Migrator{Config: migrator.Config{DB: db, Dialector: g}},
		Dialector: *g.Dialector,
	}}
}

// mdMigrator resolves DataTypeOf, which GORM's mysql migrator inherits
// twice (from the generic migrator and from its dialector) and so does not
// promote: the generic one (a type's GormDBDataType, then mdGorm).
type mdMigrator struct{ gormmysql.Migrator }

// DataTypeOf returns the column type of f.
func (m mdMigrator) DataTypeOf(f *schema.Field) string { return m.Migrator.Migrator.DataTypeOf(f) }

// RedefineColumnSQL: MariaDB changes a column's type, nullability or
// AUTO_INCREMENT by restating its whole definition.
func (mdDialect) RedefineColumnSQL(table, column, definition string) string {
	return `ALTER TABLE ` + table + ` MODIFY COLUMN "` + column + `" ` + definition
}

// DropIndexSQL: an index belongs to its table in MariaDB.
func (mdDialect) DropIndexSQL(table, index string) string {
	return `DROP INDEX ` + index + ` ON ` + table
}

// DropForeignKeySQL: ALTER TABLE ... DROP FOREIGN KEY.
func (mdDialect) DropForeignKeySQL(table, name string) string {
	return `ALTER TABLE ` + table + ` DROP FOREIGN KEY "` + name + `"`
}

// reIndexWhere matches the predicate GORM appends to a partial index.
var reIndexWhere = regexp.MustCompile(`(?is)^(CREATE (?:UNIQUE )?INDEX .*?\)) WHERE .*$`)

// reOneActive matches GORM's CREATE INDEX of the one-active-plan index
// (on the generated column in the chain) once its predicate is gone.
var reOneActive = regexp.MustCompile("(?s)^(CREATE UNIQUE INDEX `[^`]*_one_active` ON `[^`]*`)\\(`session_id`\\)$")

// reReady matches the worker queue's "ready" index (its CREATE INDEX once
// the predicate is gone, or inside a CREATE TABLE) up to its columns.
var reReady = regexp.MustCompile("(INDEX `idx_[^`]*worker_queue_ready`(?: ON `[^`]*worker_queue`)? ?)\\(`visible_at`,\\s*`id`\\)")

// reCreateTable matches a CREATE TABLE GORM rendered (no table options).
var reCreateTable = regexp.MustCompile(`(?s)^CREATE TABLE .*\)$`)

// NormalizeDDL: GORM's mysql DDL uses backquotes, which work whatever the
// sql_mode. A partial index is a full index here (the predicate dropped),
// the session queue's live-items index has processed_at second (V17),
// the one-active-plan index is over the generated column active_session_id,
// the worker queue's "ready" index leads with its predicate's columns
// (session_id, tag: see readyPredicateCols),
// and a table gets the chain's options (InnoDB, utf8mb4_bin: byte order).
func (mdDialect) NormalizeDDL(stmt string) string {
	if m := reIndexWhere.FindStringSubmatch(stmt); m != nil {
		stmt = m[1]
		if o := reOneActive.FindStringSubmatch(stmt); o != nil {
			stmt = o[1] + "(`active_session_id`)"
		}
	}
	stmt = reReady.ReplaceAllString(stmt, "${1}(`session_id`,`tag`,`visible_at`,`id`)")
	// GORM's mysql CREATE INDEX has no predicate: the live-items index is
	// recognised by its name, alone or inside a CREATE TABLE
	stmt = reQueueLive.ReplaceAllString(stmt, "${1}`processed_at`,")
	if reCreateTable.MatchString(stmt) {
		stmt = reOneActiveInline.ReplaceAllString(stmt, oneActiveColumn+",${1}(`active_session_id`)")
		stmt += " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"
	}
	return stmt
}

// reQueueLive matches the start of the session queue's live-items index
// up to its first column (CREATE INDEX or inside CREATE TABLE), where the
// chain (V17) puts processed_at: the stand-in for its predicate
// processed_at IS NULL (catalog.go, predicateColumn).
var reQueueLive = regexp.MustCompile("(INDEX `[^`]*" + queueLiveIndex + "` (?:ON `[^`]*`)?\\(`session_id`,)")

// reOneActiveInline matches the one-active-plan index inside GORM's CREATE
// TABLE of the plans table (GORM drops its predicate there).
var reOneActiveInline = regexp.MustCompile("(UNIQUE INDEX `[^`]*_one_active` )\\(`session_id`\\)")

// oneActiveColumn is the generated column the one-active-plan index
// covers, as the chain declares it: session_id while the plan is draft,
// approved or executing, else NULL (which a UNIQUE index does not compare).
const oneActiveColumn = "`active_session_id` uuid AS (CASE WHEN `status` IN ('draft', 'approved', 'executing') THEN `session_id` END) PERSISTENT"

var _ dialect.SchemaFixer = mdDialect{}
