package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx" (raw baselines, schema cleanup)

	"github.com/agentstore/agentstore"
)

// pgPool is the connection pool every PostgreSQL and MariaDB subject of
// the bench gets (agentstore, raw SQL, River, go-workflows' MySQL backend),
// so pool size is not what is compared.
const pgPool = 16

// openStore opens a fresh, migrated agentstore Store: a new SQLite file in
// the temp dir, a new PostgreSQL schema or a new MariaDB database (dropped
// by the returned cleanup).
// sync is the SQLite synchronous mode ("" = the shipped default); extra
// options are appended to the store's.
func (b *bench) openStore(ctx context.Context, dialect, name, sync string, extra ...agentstore.Option) (*agentstore.Store, func(), error) {
	opts := slices.Clone(extra)
	var dsn string
	cleanup := func() {}
	switch dialect {
	case "sqlite":
		path := filepath.Join(b.dir, name+".db")
		for _, suf := range []string{"", "-wal", "-shm"} {
			_ = os.Remove(path + suf)
		}
		dsn = "sqlite:" + path
		if sync != "" {
			opts = append(opts, agentstore.WithSQLiteSynchronous(sync))
		}
		cleanup = func() {
			for _, suf := range []string{"", "-wal", "-shm"} {
				_ = os.Remove(path + suf)
			}
		}
	case "postgres":
		schema := "bench_as_" + name
		if err := b.resetSchema(ctx, schema); err != nil {
			return nil, nil, err
		}
		dsn = b.pgDSN
		opts = append(opts, agentstore.WithSchema(schema), agentstore.WithPool(agentstore.PoolConfig{MaxOpenConns: pgPool, MinIdleConns: pgPool}))
		cleanup = func() { _ = b.dropSchema(context.Background(), schema) }
	case "mariadb":
		db, err := b.resetMariaDB(ctx, "as_"+name)
		if err != nil {
			return nil, nil, err
		}
		if dsn, err = b.mariaNative(db); err != nil {
			return nil, nil, err
		}
		opts = append(opts, agentstore.WithPool(agentstore.PoolConfig{MaxOpenConns: pgPool, MinIdleConns: pgPool}))
		cleanup = func() { _ = b.dropMariaDB(context.Background(), "as_"+name) }
	default:
		return nil, nil, fmt.Errorf("unknown dialect %q", dialect)
	}
	st, err := agentstore.Open(ctx, dsn, opts...)
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	if err := st.Migrate(ctx); err != nil {
		_ = st.Close()
		cleanup()
		return nil, nil, err
	}
	return st, func() { _ = st.Close(); cleanup() }, nil
}

// openHandle opens a second Store on the same database as st (another
// "process" in the wakeup scenario).
func (b *bench) openHandle(ctx context.Context, dialect, name, sync string) (*agentstore.Store, error) {
	switch dialect {
	case "sqlite":
		var opts []agentstore.Option
		if sync != "" {
			opts = append(opts, agentstore.WithSQLiteSynchronous(sync))
		}
		return agentstore.Open(ctx, "sqlite:"+filepath.Join(b.dir, name+".db"), opts...)
	case "mariadb":
		dsn, err := b.mariaNative(mariaPrefix + "as_" + name)
		if err != nil {
			return nil, err
		}
		return agentstore.Open(ctx, dsn, agentstore.WithPool(agentstore.PoolConfig{MaxOpenConns: pgPool, MinIdleConns: pgPool}))
	default:
		return agentstore.Open(ctx, b.pgDSN, agentstore.WithSchema("bench_as_"+name),
			agentstore.WithPool(agentstore.PoolConfig{MaxOpenConns: pgPool, MinIdleConns: pgPool}))
	}
}

// pgAdmin runs one statement on the PostgreSQL server.
func (b *bench) pgAdmin(ctx context.Context, stmt string) error {
	db, err := sql.Open("pgx", b.pgDSN)
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.ExecContext(ctx, stmt)
	return err
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

func (b *bench) resetSchema(ctx context.Context, schema string) error {
	if err := b.dropSchema(ctx, schema); err != nil {
		return err
	}
	return b.pgAdmin(ctx, "CREATE SCHEMA "+quoteIdent(schema))
}

func (b *bench) dropSchema(ctx context.Context, schema string) error {
	return b.pgAdmin(ctx, "DROP SCHEMA IF EXISTS "+quoteIdent(schema)+" CASCADE")
}

// pgDSNWithSearchPath returns the bench DSN with search_path set to schema.
func (b *bench) pgDSNWithSearchPath(schema string) string {
	sep := "?"
	if strings.Contains(b.pgDSN, "?") {
		sep = "&"
	}
	return b.pgDSN + sep + "search_path=" + schema
}
