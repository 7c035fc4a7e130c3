package agentstore_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/agentstore/agentstore"
)

// FuzzParseDSN checks that the DSN parser never panics, accepts only the
// documented schemes, and that RedactDSN never returns a URL password.
func FuzzParseDSN(f *testing.F) {
	for _, s := range []string{
		"", "sqlite:", "sqlite::memory:", "sqlite:./dev.db", "sqlite:/var/lib/app/agent.db",
		"postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "postgresql://u:p@h/d",
		"postgres://u:secret@h:1/d?password=other", "mysql://root@localhost/x", "u:s3cret@tcp(h:3306)/d", "x; DROP TABLE y",
		"sqlite:a\x00b", "postgres://%zz", "host=localhost password=abc",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, dsn string) {
		d, target, err := agentstore.ParseDSN(dsn)
		if err != nil {
			if !errors.Is(err, agentstore.ErrInvalidConfig) {
				t.Fatalf("ParseDSN(%q) error %v is not ErrInvalidConfig", dsn, err)
			}
			return
		}
		switch d {
		case agentstore.SQLite:
			if !strings.HasPrefix(dsn, "sqlite:") || target == "" || strings.ContainsRune(target, 0) {
				t.Fatalf("ParseDSN(%q) = sqlite %q", dsn, target)
			}
		case agentstore.Postgres:
			if !strings.HasPrefix(dsn, "postgres://") && !strings.HasPrefix(dsn, "postgresql://") && !strings.Contains(dsn, "=") {
				t.Fatalf("ParseDSN(%q) = postgres", dsn)
			}
			if !strings.Contains(dsn, "://") && strings.Contains(dsn, "password=") && strings.Contains(agentstore.RedactDSN(dsn), "password=abc") {
				t.Fatalf("RedactDSN(%q) keeps a key=value password", dsn)
			}
			red := agentstore.RedactDSN(dsn)
			if i := strings.Index(dsn, "://"); i >= 0 {
				rest := dsn[i+3:]
				if at := strings.LastIndex(rest, "@"); at > 0 {
					if c := strings.Index(rest[:at], ":"); c >= 0 {
						pw := rest[c+1 : at]
						if len(pw) >= 4 && !strings.ContainsAny(pw, "/?#%@") && strings.Contains(red, pw) && !strings.Contains(dsn[:i], pw) {
							t.Fatalf("RedactDSN(%q) = %q still holds the password", dsn, red)
						}
					}
				}
			}
		case agentstore.MariaDB:
			if !strings.HasPrefix(dsn, "mysql://") && !strings.HasPrefix(dsn, "mariadb://") && !strings.Contains(dsn, "(") {
				t.Fatalf("ParseDSN(%q) = mariadb", dsn)
			}
			if strings.Contains(dsn, ":s3cret@") && strings.Contains(agentstore.RedactDSN(dsn), "s3cret") {
				t.Fatalf("RedactDSN(%q) keeps the password", dsn)
			}
		default:
			t.Fatalf("ParseDSN(%q) returned dialect %q", dsn, d)
		}
	})
}
