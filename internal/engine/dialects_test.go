package engine

import (
	"context"

	"gorm.io/gorm"

	"github.com/agentstore/agentstore/internal/dialect"
	"github.com/agentstore/agentstore/internal/dialect/mariadb"
	"github.com/agentstore/agentstore/internal/dialect/postgres"
	"github.com/agentstore/agentstore/internal/dialect/sqlite"
)

// The engine's own tests wire the dialects as the root package does.

func testDialects() []dialect.Dialect {
	return []dialect.Dialect{postgres.New(), sqlite.New(), mariadb.New()}
}

// Open is engine.Open with the dialects of the build.
func testOpen(ctx context.Context, dsn string, opts ...Option) (*Store, error) {
	return Open(ctx, testDialects(), dsn, opts...)
}

var _ = func(db *gorm.DB) (*Store, error) { return New(testDialects(), db) }
