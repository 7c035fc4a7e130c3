package models

import (
	"bytes"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/shopspring/decimal"
	"gorm.io/gorm"
	"gorm.io/gorm/schema"
)

// JSON is a raw JSON document stored as jsonb on PostgreSQL and as text on
// SQLite. It is kept as bytes: fields and block types this version does not
// know survive a read/write round trip. A nil or empty JSON is stored as SQL
// NULL.
type JSON []byte

// GormDBDataType returns the type the dialect registered for TypeJSON
// (see ColumnTypes), text by default.
func (JSON) GormDBDataType(db *gorm.DB, _ *schema.Field) string { return columnType(db, TypeJSON) }

// Value implements driver.Valuer. It stores the bytes unchanged as text.
func (j JSON) Value() (driver.Value, error) {
	if len(j) == 0 {
		return nil, nil
	}
	return string(j), nil
}

// Scan implements sql.Scanner. The bytes are copied, never validated: a
// corrupt stored document is surfaced by the decoder that reads it.
func (j *JSON) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		*j = nil
	case []byte:
		*j = append(JSON(nil), v...)
	case string:
		*j = JSON(v)
	default:
		return fmt.Errorf("models.JSON: cannot scan %T", src)
	}
	return nil
}

// MarshalJSON emits the raw document (null when empty).
func (j JSON) MarshalJSON() ([]byte, error) {
	if len(j) == 0 {
		return []byte("null"), nil
	}
	return j, nil
}

// UnmarshalJSON keeps a copy of the raw document.
func (j *JSON) UnmarshalJSON(b []byte) error {
	if bytes.Equal(b, []byte("null")) {
		*j = nil
		return nil
	}
	*j = append(JSON(nil), b...)
	return nil
}

// Valid reports whether j is empty or a syntactically valid JSON document.
func (j JSON) Valid() bool { return len(j) == 0 || json.Valid(j) }

// Decimal is a shopspring decimal stored exactly: numeric without a scale
// on PostgreSQL (any value within numeric's 131072 integer and 16383
// fraction digits, scale kept) and text on SQLite, where NUMERIC affinity
// would turn the value into a float and lose digits.
type Decimal struct{ decimal.Decimal }

// NewDecimal wraps d.
func NewDecimal(d decimal.Decimal) Decimal { return Decimal{d} }

// GormDBDataType returns the type the dialect registered for TypeDecimal
// (see ColumnTypes), text by default.
func (Decimal) GormDBDataType(db *gorm.DB, _ *schema.Field) string {
	return columnType(db, TypeDecimal)
}

// Value implements driver.Valuer as the exact decimal string, with the
// value's scale kept (1.10 is written "1.10", not "1.1").
func (d Decimal) Value() (driver.Value, error) {
	if exp := d.Decimal.Exponent(); exp < 0 {
		return d.Decimal.StringFixed(-exp), nil
	}
	return d.Decimal.String(), nil
}

// Scan implements sql.Scanner from text, bytes or numbers.
func (d *Decimal) Scan(src any) error {
	if src == nil {
		d.Decimal = decimal.Zero
		return nil
	}
	var err error
	switch v := src.(type) {
	case []byte:
		d.Decimal, err = decimal.NewFromString(string(v))
	case string:
		d.Decimal, err = decimal.NewFromString(v)
	case int64:
		d.Decimal = decimal.NewFromInt(v)
	case float64:
		return errors.New("models.Decimal: refusing to scan a float (would lose precision)")
	default:
		return fmt.Errorf("models.Decimal: cannot scan %T", src)
	}
	return err
}
