package engine

import (
	"fmt"
	"strings"

	"gorm.io/gorm"

	"github.com/agentstore/agentstore/internal/dialect"
	"github.com/agentstore/agentstore/migrations"
	"github.com/agentstore/agentstore/models"
)

// IssueChangeFeed: a trigger or function the session change feed's rows
// come from is missing or disabled (see dialect.IssueChangeFeed).
const IssueChangeFeed = dialect.IssueChangeFeed

// feedIssues reports the change feed's objects that are not present and
// enabled. A trigger of a table that is missing altogether is not
// reported (Verify reports the table), nor PostgreSQL's trigger function
// while the sessions table is. The fix of a missing object is the
// statements of the Store's own migration chain that create it (the last
// migration that does), which recreate it as Migrate would have; of a
// disabled trigger, the statement that enables it.
func (s *Store) feedIssues(db *gorm.DB, nsp string, live map[string]*dialect.LiveTable) ([]SchemaIssue, error) {
	fv, ok := s.d.(dialect.FeedVerifier)
	if !ok {
		return nil, nil
	}
	objs, err := fv.FeedObjects(db, s.env(), nsp)
	if err != nil {
		return nil, fmt.Errorf("verify: %w", translateError(err))
	}
	var out []SchemaIssue
	for _, o := range objs {
		on := o.Table // a function is reported with the sessions table's triggers
		if on == "" {
			on = s.cfg.Prefix + models.TableSessions
		}
		if o.State == "present" || live[on] == nil {
			continue
		}
		is := SchemaIssue{Kind: IssueChangeFeed, Table: o.Table, Object: o.Kind + " " + o.Name, Expected: "present", Actual: o.State}
		switch o.State {
		case "disabled":
			is.Expected, is.Fix = "enabled", o.EnableFix
		default:
			fix, err := s.creatingStatements(o.Kind, o.Name)
			if err != nil {
				return nil, fmt.Errorf("verify: %w", err)
			}
			is.Fix = fix
		}
		out = append(out, is)
	}
	return out, nil
}

// creatingStatements returns, joined by ";\n", the statements of the last
// migration of the Store's chain (rendered for its prefix and schema) that
// create the trigger or function name.
func (s *Store) creatingStatements(kind, name string) (string, error) {
	chain, err := migrations.Chain(string(s.d.Name()))
	if err != nil {
		return "", err
	}
	quoted := `"` + name + `"`
	for i := len(chain) - 1; i >= 0; i-- {
		var found []string
		for _, st := range migrations.Statements(s.renderMigration(chain[i])) {
			head := strings.ToUpper(strings.Join(strings.Fields(st), " "))
			creates := strings.HasPrefix(head, "CREATE TRIGGER")
			if kind == "function" {
				creates = strings.HasPrefix(head, "CREATE OR REPLACE FUNCTION") || strings.HasPrefix(head, "CREATE FUNCTION")
			}
			if !creates {
				continue
			}
			// The created object's name is the first quoted name that is
			// name (a function's may be schema-qualified: "s"."name").
			first := st
			if j := strings.Index(st, "("); kind == "function" && j > 0 {
				first = st[:j]
			} else if j := strings.Index(strings.ToUpper(st), " ON "); kind == "trigger" && j > 0 {
				first = st[:j]
			}
			if strings.Contains(first, quoted) {
				found = append(found, st)
			}
		}
		if len(found) > 0 {
			return strings.Join(found, ";\n"), nil
		}
	}
	return "", fmt.Errorf("no migration of the %s chain creates %s %s", s.d.Name(), kind, name)
}
