package engine

import (
	"bytes"
	"database/sql/driver"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"

	"github.com/agentstore/agentstore/repo"
)

// The text rule of the session store, identical on every dialect: every
// string and JSON document must be valid UTF-8 and hold no NUL byte, and a
// JSON document must not contain the \u0000 escape. PostgreSQL's text type
// rejects NUL bytes and its jsonb type rejects \u0000; SQLite would store
// both, so the store refuses them everywhere with ErrInvalidInput before any
// SQL runs.

// checkText validates a string field: valid UTF-8, no NUL, at most maxLen
// bytes (maxLen 0 = unbounded).
func checkText(field, v string, maxLen int) error {
	if maxLen > 0 && len(v) > maxLen {
		return invalidf("%s is %d bytes, the limit is %d", field, len(v), maxLen)
	}
	if !utf8.ValidString(v) {
		return invalidf("%s is not valid UTF-8", field)
	}
	if strings.IndexByte(v, 0) >= 0 {
		return invalidf("%s contains a NUL byte", field)
	}
	return nil
}

// checkOptText is checkText for an optional field.
func checkOptText(field string, v *string, maxLen int) error {
	if v == nil {
		return nil
	}
	return checkText(field, *v, maxLen)
}

// checkID validates a required identifier (1..repo.MaxIDLen bytes).
func checkID(field, v string) error {
	if v == "" {
		return invalidf("%s is empty", field)
	}
	return checkText(field, v, repo.MaxIDLen)
}

// checkJSON validates a JSON document: syntactically valid, valid UTF-8,
// no NUL byte, no \u0000 escape. An empty document is allowed unless
// required.
func checkJSON(field string, v []byte, required bool) error {
	if len(v) == 0 {
		if required {
			return invalidf("%s is empty (want a JSON document)", field)
		}
		return nil
	}
	if !utf8.Valid(v) {
		return invalidf("%s is not valid UTF-8", field)
	}
	if bytes.IndexByte(v, 0) >= 0 {
		return invalidf("%s contains a NUL byte", field)
	}
	if !json.Valid(v) {
		return invalidf("%s is not valid JSON", field)
	}
	if hasNULEscape(v) {
		return invalidf(`%s contains the \u0000 escape, which PostgreSQL jsonb cannot store`, field)
	}
	return nil
}

// checkContentShape refuses message content (valid JSON) that is not an
// array of content blocks or a string (the plain-text shorthand).
func checkContentShape(field string, v []byte) error {
	v = bytes.TrimLeft(v, " \t\r\n")
	if len(v) > 0 && (v[0] == '[' || v[0] == '"') {
		return nil
	}
	kind := "an object"
	switch {
	case len(v) == 0:
		kind = "empty"
	case v[0] == 't' || v[0] == 'f':
		kind = "a boolean"
	case v[0] == 'n':
		kind = "null"
	case v[0] != '{':
		kind = "a number"
	}
	return invalidf("%s is %s: want a JSON array of content blocks or a JSON string", field, kind)
}

// hasNULEscape reports whether the JSON document v contains \u0000.
func hasNULEscape(v []byte) bool {
	for i := 0; i < len(v); i++ {
		if v[i] != '\\' {
			continue
		}
		if i+1 < len(v) && v[i+1] == 'u' && i+5 < len(v) && string(v[i+2:i+6]) == "0000" {
			return true
		}
		i++ // skip the escaped character
	}
	return false
}

// checkMessage validates message i of a write; maxContent is the Store's
// WithMaxContentBytes.
func checkMessage(i int, m *repo.Message, maxContent int) error {
	f := func(name string) string { return fmt.Sprintf("message %d %s", i, name) }
	if len(m.Content) > maxContent {
		return invalidf("%s is %d bytes, the limit is %d (WithMaxContentBytes)", f("content"), len(m.Content), maxContent)
	}
	if m.ID != "" {
		if err := checkID(f("id"), m.ID); err != nil {
			return err
		}
	}
	if m.ParentID != nil {
		if err := checkID(f("parent id"), *m.ParentID); err != nil {
			return err
		}
	}
	if _, err := repo.ParseRole(string(m.Role)); err != nil {
		return fmt.Errorf("%s: %w", f("role"), err)
	}
	if err := checkJSON(f("content"), m.Content, true); err != nil {
		return err
	}
	if err := checkContentShape(f("content"), m.Content); err != nil {
		return err
	}
	if err := checkJSON(f("metadata"), m.Metadata, false); err != nil {
		return err
	}
	if err := refuseEnvelope(f("metadata"), m.Metadata); err != nil {
		return err
	}
	if err := checkJSON(f("environment"), m.Environment, false); err != nil {
		return err
	}
	if err := checkOptText(f("model"), m.Model, repo.MaxModelLen); err != nil {
		return err
	}
	return checkOptText(f("request id"), m.RequestID, repo.MaxIDLen)
}

func checkSessionRow(s *repo.Session) error {
	if err := checkText("tenant id", s.TenantID, repo.MaxIDLen); err != nil {
		return err
	}
	if s.Type.Kind != "" {
		if _, err := repo.ParseSessionKind(string(s.Type.Kind)); err != nil {
			return err
		}
	}
	if err := checkText("agent type", s.Type.AgentType, repo.MaxIDLen); err != nil {
		return err
	}
	if err := checkText("agent description", s.Type.Description, 0); err != nil {
		return err
	}
	if s.State != "" {
		if _, err := repo.ParseSessionState(string(s.State)); err != nil {
			return err
		}
	}
	if err := checkJSON("config", s.Config, false); err != nil {
		return err
	}
	if err := checkJSON("permissions", s.Permissions, false); err != nil {
		return err
	}
	if s.CurrentLeafID != nil {
		if err := checkID("current leaf id", *s.CurrentLeafID); err != nil {
			return err
		}
	}
	if err := checkOptText("summary", s.Summary, 0); err != nil {
		return err
	}
	if s.Summary != nil {
		if err := refuseEnvelope("summary", []byte(*s.Summary)); err != nil {
			return err
		}
	}
	if err := checkOptText("static context hash", s.StaticContextHash, repo.MaxHashLen); err != nil {
		return err
	}
	if err := checkCost(s.TotalCostUSD); err != nil {
		return err
	}
	return checkOptText("error", s.Error, 0)
}

// checkCost refuses a total cost outside the documented bound
// (repo.MaxCostIntegerDigits, repo.MaxCostFractionDigits).
func checkCost(d decimal.Decimal) error {
	exp := int64(d.Exponent())
	digits := int64(d.NumDigits())
	if d.IsZero() {
		return nil
	}
	if exp < 0 && -exp > repo.MaxCostFractionDigits {
		return invalidf("total cost has %d digits after the decimal point, the limit is %d", -exp, repo.MaxCostFractionDigits)
	}
	if intDigits := digits + exp; intDigits > repo.MaxCostIntegerDigits {
		return invalidf("total cost has %d digits before the decimal point, the limit is %d", intDigits, repo.MaxCostIntegerDigits)
	}
	return nil
}

// checkTodos validates a todo list: every item, and no id twice.
func checkTodos(todos []repo.TodoItem) error {
	seen := make(map[uuid.UUID]int, len(todos))
	for i := range todos {
		if err := checkTodo(i, &todos[i]); err != nil {
			return err
		}
		id := todos[i].ID
		if id == uuid.Nil {
			continue
		}
		if j, dup := seen[id]; dup {
			return invalidf("todos %d and %d have the same id %s", j, i, id)
		}
		seen[id] = i
	}
	return nil
}

// checkMessageIDs refuses two messages of one batch (msgs[i] for i in idx,
// or every message when idx is nil) with the same id.
func checkMessageIDs(msgs []repo.Message, idx []int) error {
	n := len(msgs)
	if idx != nil {
		n = len(idx)
	}
	if n < 2 {
		return nil
	}
	seen := make(map[string]int, n)
	for k := 0; k < n; k++ {
		i := k
		if idx != nil {
			i = idx[k]
		}
		id := msgs[i].ID
		if id == "" {
			continue
		}
		if j, dup := seen[id]; dup {
			return invalidf("messages %d and %d have the same id %q", j, i, clip(id))
		}
		seen[id] = i
	}
	return nil
}

func checkTodo(i int, t *repo.TodoItem) error {
	if err := checkText(fmt.Sprintf("todo %d content", i), t.Content, 0); err != nil {
		return err
	}
	if err := checkText(fmt.Sprintf("todo %d active form", i), t.ActiveForm, 0); err != nil {
		return err
	}
	if t.Status != "" {
		if _, err := repo.ParseTodoStatus(string(t.Status)); err != nil {
			return err
		}
	}
	return nil
}

func checkPlan(p *repo.Plan) error {
	if err := checkOptText("plan name", p.Name, 0); err != nil {
		return err
	}
	if err := checkText("plan content", p.Content, 0); err != nil {
		return err
	}
	if err := checkOptText("plan error", p.Error, 0); err != nil {
		return err
	}
	if p.Status != "" {
		if _, err := repo.ParsePlanStatus(string(p.Status)); err != nil {
			return err
		}
	}
	return nil
}

func checkCompact(i int, c *repo.CompactRecord) error {
	if err := checkText(fmt.Sprintf("compact %d summary", i), c.Summary, 0); err != nil {
		return err
	}
	if err := refuseEnvelope(fmt.Sprintf("compact %d summary", i), []byte(c.Summary)); err != nil {
		return err
	}
	if c.LogicalParentID != nil {
		if err := checkID(fmt.Sprintf("compact %d logical parent id", i), *c.LogicalParentID); err != nil {
			return err
		}
	}
	if c.Trigger != "" {
		if _, err := repo.ParseCompactTrigger(string(c.Trigger)); err != nil {
			return err
		}
	}
	return nil
}

// dbTime scans a timestamp from either driver: a time.Time (PostgreSQL,
// SQLite columns declared datetime) or the text mattn/go-sqlite3 writes
// (expressions without a declared type).
type dbTime struct {
	T     time.Time
	Valid bool
}

// sqliteTimeFormats are the time spellings SQLite columns may hold.
func sqliteTimeFormats() []string {
	return []string{
		"2006-01-02 15:04:05.999999999-07:00",
		"2006-01-02T15:04:05.999999999-07:00",
		"2006-01-02 15:04:05.999999999",
		"2006-01-02T15:04:05.999999999",
		"2006-01-02 15:04:05",
		"2006-01-02T15:04:05",
		"2006-01-02",
	}
}

// Scan implements sql.Scanner.
func (d *dbTime) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		d.T, d.Valid = time.Time{}, false
		return nil
	case time.Time:
		d.T, d.Valid = v.UTC(), true
		return nil
	case []byte:
		return d.parse(string(v))
	case string:
		return d.parse(v)
	}
	return fmt.Errorf("cannot scan %T into a timestamp", src)
}

func (d *dbTime) parse(s string) error {
	s = strings.TrimSuffix(s, "Z")
	for _, f := range sqliteTimeFormats() {
		if t, err := time.ParseInLocation(f, s, time.UTC); err == nil {
			d.T, d.Valid = t.UTC(), true
			return nil
		}
	}
	return fmt.Errorf("cannot parse timestamp %q", s)
}

// ptr returns a pointer to the time when valid, else nil.
func (d dbTime) ptr() *time.Time {
	if !d.Valid {
		return nil
	}
	t := d.T
	return &t
}

// Value implements driver.Valuer (so GORM scans dbTime as one column).
func (d dbTime) Value() (driver.Value, error) {
	if !d.Valid {
		return nil, nil
	}
	return d.T, nil
}
