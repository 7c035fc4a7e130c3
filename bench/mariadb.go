package main

// MariaDB (issue 26): every subject gets its own database on the server of
// -mariadb ($AGENTSTORE_TEST_MARIADB_DSN, else the local default), named
// agentstore_bench_* (never the tests' maria_*), dropped before and after.
// The raw baselines open their own database/sql handles on the same driver
// (go-sql-driver/mysql) with the session settings the store's dialect
// gives every connection (internal/dialect/mariadb configure), so the two
// sides differ only in the SQL they send.

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
)

// defaultMariaDBDSN is the local test server (same default as the library tests).
const defaultMariaDBDSN = "mysql://root@127.0.0.1:3306/test"

// mariaPrefix starts every database the bench creates on MariaDB.
const mariaPrefix = "agentstore_bench_"

// mariaConfig parses b.mariaDSN (mysql://, mariadb:// or the driver's own
// form) and returns the driver configuration for database db with the
// store's session settings.
func (b *bench) mariaConfig(db string) (*mysql.Config, error) {
	dsn := b.mariaDSN
	var c *mysql.Config
	if strings.HasPrefix(dsn, "mysql://") || strings.HasPrefix(dsn, "mariadb://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return nil, fmt.Errorf("MariaDB DSN %s: %w", redact(dsn), err)
		}
		c = mysql.NewConfig()
		if u.User != nil {
			c.User = u.User.Username()
			c.Passwd, _ = u.User.Password()
		}
		host := u.Host
		if host == "" {
			host = "127.0.0.1"
		}
		if u.Port() == "" {
			host = net.JoinHostPort(strings.Trim(host, "[]"), "3306")
		}
		c.Net, c.Addr = "tcp", host
	} else {
		var err error
		if c, err = mysql.ParseDSN(dsn); err != nil {
			return nil, fmt.Errorf("MariaDB DSN %s: %w", redact(dsn), err)
		}
	}
	c.DBName = db
	if c.Params == nil {
		c.Params = map[string]string{}
	}
	c.ParseTime = true
	c.Loc = time.UTC
	c.ClientFoundRows = true
	c.InterpolateParams = true
	c.Collation = "utf8mb4_bin"
	c.Params["sql_mode"] = "'ANSI_QUOTES,PIPES_AS_CONCAT,NO_BACKSLASH_ESCAPES,STRICT_ALL_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION'"
	c.Params["time_zone"] = "'+00:00'"
	c.Params["tx_isolation"] = "'READ-COMMITTED'"
	return c, nil
}

// mariaNative returns the driver DSN of database db.
func (b *bench) mariaNative(db string) (string, error) {
	c, err := b.mariaConfig(db)
	if err != nil {
		return "", err
	}
	return c.FormatDSN(), nil
}

// openMaria opens a database/sql handle on database db with pool pool.
func (b *bench) openMaria(db string, pool int) (*sql.DB, error) {
	dsn, err := b.mariaNative(db)
	if err != nil {
		return nil, err
	}
	h, err := sql.Open("mysql", dsn)
	if err != nil {
		return nil, err
	}
	h.SetMaxOpenConns(pool)
	h.SetMaxIdleConns(pool)
	return h, nil
}

// mariaAdmin runs statements on the MariaDB server (no database selected).
func (b *bench) mariaAdmin(ctx context.Context, stmts ...string) error {
	db, err := b.openMaria("", 1)
	if err != nil {
		return err
	}
	defer db.Close()
	for _, s := range stmts {
		if _, err := db.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("MariaDB %s: %w", redact(b.mariaDSN), err)
		}
	}
	return nil
}

// resetMariaDB (re)creates the bench database named mariaPrefix+name.
func (b *bench) resetMariaDB(ctx context.Context, name string) (string, error) {
	db := mariaPrefix + name
	return db, b.mariaAdmin(ctx, "DROP DATABASE IF EXISTS "+quoteIdent(db), "CREATE DATABASE "+quoteIdent(db))
}

// dropMariaDB drops the bench database named mariaPrefix+name.
func (b *bench) dropMariaDB(ctx context.Context, name string) error {
	return b.mariaAdmin(ctx, "DROP DATABASE IF EXISTS "+quoteIdent(mariaPrefix+name))
}
