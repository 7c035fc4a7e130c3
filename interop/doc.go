// Package interop checks that the migrations agentstore exports
// (agentstore.ExportMigrations) are applied correctly by the real
// third-party tools: github.com/pressly/goose/v3 (FormatGoose),
// github.com/golang-migrate/migrate/v4 (FormatGolangMigrate, with its pgx/v5
// and sqlite3 database drivers) and, since Flyway itself (a JVM program)
// cannot run here, a database/sql runner that applies FormatFlyway files the
// way Flyway does (version order, one transaction per file unless its
// .sql.conf says executeInTransaction=false).
//
// It is a separate module so that agentstore itself does not depend on
// those tools. Everything is in the tests:
//
//	cd interop && go test ./...
//
// Each test runs on SQLite (a file in t.TempDir()) and on PostgreSQL at
// AGENTSTORE_TEST_POSTGRES_DSN (default
// postgres://postgres@127.0.0.1:5432/test?sslmode=disable), in a fresh
// schema i_<uuid> created and dropped by the test. Without a reachable
// server the PostgreSQL half is skipped with a notice;
// AGENTSTORE_REQUIRE_POSTGRES=1 makes it fail instead.
package interop
