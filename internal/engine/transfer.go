package engine

// Export, Import and DeleteTenant: the stream format and its record codec.
// The stream is JSON Lines: a header, one record per stored row (grouped:
// a session and its rows, an instance and its rows), a trailer with the
// record counts and the SHA-256 of every line before it. See
// docs/export.md. transfer_export.go writes it, transfer_import.go reads
// it, transfer_delete.go deletes a tenant.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"time"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"
	"gorm.io/gorm"
	"gorm.io/gorm/schema"

	"github.com/agentstore/agentstore/internal/dialect"
	"github.com/agentstore/agentstore/models"
)

// StreamFormat is the "format" of an export stream's header.
const StreamFormat = "agentstore-export"

// StreamVersion is the version of the stream format this build writes and
// the newest it reads.
const StreamVersion = 1

// The import errors' sentinels (see ImportError).
var (
	// ErrInvalidStream: the stream is not a well-formed export stream (a
	// line that is not JSON, an unknown record type or field, a record
	// outside its session or instance, a count or checksum that does not
	// match the trailer's).
	ErrInvalidStream = errors.New("agentstore: invalid export stream")
	// ErrTruncatedStream: the stream ended before its trailer record.
	ErrTruncatedStream = errors.New("agentstore: truncated export stream")
	// ErrUnsupportedStreamVersion: the stream's header names a format
	// version newer than this build reads (StreamVersion).
	ErrUnsupportedStreamVersion = errors.New("agentstore: unsupported export stream version")
)

// ImportError is the error of an Import that stopped at a record: Line is
// the stream's line number (1 is the header), Record names the record
// ("session 0b5d…", "message 0b5d…/42", "header", "trailer") when the line
// could be read that far, and Err is the cause, matching
// ErrInvalidStream, ErrTruncatedStream, ErrUnsupportedStreamVersion, or a
// store sentinel (ErrNotFound for a session whose parent is neither
// earlier in the stream nor stored, ErrConflict for a session or instance
// stored with other content, ErrRetryable...). errors.Is and errors.As see
// through it. Every session and instance before the line is imported
// whole; the one the line belongs to is not imported at all.
type ImportError struct {
	Line   int
	Record string
	Err    error
}

// Error names the line, the record and the cause.
func (e *ImportError) Error() string {
	if e.Record != "" {
		return fmt.Sprintf("import line %d (%s): %v", e.Line, e.Record, e.Err)
	}
	return fmt.Sprintf("import line %d: %v", e.Line, e.Err)
}

// Unwrap returns the cause.
func (e *ImportError) Unwrap() error { return e.Err }

// Record types of the stream.
const (
	recHeader      = "header"
	recTrailer     = "trailer"
	recSession     = "session"
	recMessage     = "message"
	recCompaction  = "compaction"
	recSummary     = "summary"
	recQueueItem   = "queue_item"
	recTodo        = "todo"
	recPlan        = "plan"
	recInstance    = "instance"
	recExecution   = "execution"
	recHistory     = "history"
	recKV          = "kv"
	recKVDelta     = "kv_delta"
	recOrchItem    = "orchestrator_item"
	recWorkerItem  = "worker_item"
	recLooseOrch   = "loose_orchestrator_item"
	recLooseWorker = "loose_worker_item"
)

// recordKind describes one record type: its model, the table it is
// stored in, the column naming its group (session_id / instance_id; ""
// for a group's first record), the order of its rows in the stream (each
// column: text columns in byte order), and whether the table's key is a
// serial whose sequence an import must advance.
type recordKind struct {
	typ    string
	model  func() any
	table  string
	parent string
	order  []string
	serial string
}

// sessionChildren are a session group's record kinds, in stream order.
func sessionChildren() []recordKind {
	return []recordKind{
		{typ: recMessage, model: func() any { return &models.Message{} }, table: models.TableMessages, parent: "session_id", order: []string{"seq"}},
		{typ: recCompaction, model: func() any { return &models.Compact{} }, table: models.TableCompacts, parent: "session_id", order: []string{"id"}},
		{typ: recSummary, model: func() any { return &models.Summary{} }, table: models.TableSummaries, parent: "session_id", order: []string{"id"}},
		{typ: recQueueItem, model: func() any { return &models.QueueItem{} }, table: models.TableQueue, parent: "session_id", order: []string{"seq"}, serial: "seq"},
		{typ: recTodo, model: func() any { return &models.Todo{} }, table: models.TableTodos, parent: "session_id", order: []string{"id"}},
		{typ: recPlan, model: func() any { return &models.Plan{} }, table: models.TablePlans, parent: "session_id", order: []string{"id"}},
	}
}

// instanceChildren are an instance group's record kinds, in stream order.
func instanceChildren() []recordKind {
	return []recordKind{
		{typ: recExecution, model: func() any { return &models.Execution{} }, table: models.TableExecutions, parent: "instance_id", order: []string{"execution_id"}},
		{typ: recHistory, model: func() any { return &models.HistoryEvent{} }, table: models.TableHistory, parent: "instance_id", order: []string{"execution_id", "event_id"}},
		{typ: recKV, model: func() any { return &models.KVStoreEntry{} }, table: models.TableKVStore, parent: "instance_id", order: []string{"key"}},
		{typ: recKVDelta, model: func() any { return &models.KVDeltaEntry{} }, table: models.TableKVDelta, parent: "instance_id", order: []string{"key"}},
		{typ: recOrchItem, model: func() any { return &models.OrchestratorQueueItem{} }, table: models.TableOrchestratorQueue, parent: "instance_id", order: []string{"id"}, serial: "id"},
		{typ: recWorkerItem, model: func() any { return &models.WorkerQueueItem{} }, table: models.TableWorkerQueue, parent: "instance_id", order: []string{"id"}, serial: "id"},
	}
}

// groupKinds are the record kinds that start a group.
func groupKinds() []recordKind {
	return []recordKind{
		{typ: recSession, model: func() any { return &models.Session{} }, table: models.TableSessions, order: []string{"id"}},
		{typ: recInstance, model: func() any { return &models.Instance{} }, table: models.TableInstances, order: []string{"instance_id"}},
		{typ: recLooseOrch, model: func() any { return &models.OrchestratorQueueItem{} }, table: models.TableOrchestratorQueue, order: []string{"id"}, serial: "id"},
		{typ: recLooseWorker, model: func() any { return &models.WorkerQueueItem{} }, table: models.TableWorkerQueue, order: []string{"id"}, serial: "id"},
	}
}

// kindsByType maps every record type to its kind.
func kindsByType() map[string]recordKind {
	out := map[string]recordKind{}
	for _, l := range [][]recordKind{groupKinds(), sessionChildren(), instanceChildren()} {
		for _, k := range l {
			out[k.typ] = k
		}
	}
	return out
}

// recordCodec encodes and decodes the rows of the models as the stream's
// records, by the models' GORM schemas (column names, in field order).
type recordCodec struct {
	db      *gorm.DB
	schemas map[reflect.Type]*schema.Schema
}

func newRecordCodec(db *gorm.DB) *recordCodec {
	return &recordCodec{db: db, schemas: map[reflect.Type]*schema.Schema{}}
}

// schemaOf returns the parsed schema of model (a pointer to a model).
func (c *recordCodec) schemaOf(model any) (*schema.Schema, error) {
	t := reflect.TypeOf(model)
	if sch, ok := c.schemas[t]; ok {
		return sch, nil
	}
	stmt := &gorm.Statement{DB: c.db}
	if err := stmt.Parse(model); err != nil {
		return nil, fmt.Errorf("parse model %T: %w", model, err)
	}
	c.schemas[t] = stmt.Schema
	return stmt.Schema, nil
}

// columns returns the stored columns of sch, in field order.
func columns(sch *schema.Schema) []*schema.Field {
	var out []*schema.Field
	for _, f := range sch.Fields {
		if f.DBName != "" {
			out = append(out, f)
		}
	}
	return out
}

// encode appends the record line of row (a pointer to a model) to buf:
// {"type":typ,"data":{column:value,...}} and a newline. Values are
// canonical, so the same stored rows give the same bytes on every
// dialect: times in UTC RFC 3339 with nanoseconds (trailing zeros
// dropped), decimals as strings with their scale, JSON columns as
// canonical JSON (keys sorted, no spaces, numbers in their shortest exact
// form), message content as a string holding its stored bytes.
func (c *recordCodec) encode(buf *bytes.Buffer, typ string, row any) error {
	sch, err := c.schemaOf(row)
	if err != nil {
		return err
	}
	rv := reflect.ValueOf(row).Elem()
	buf.WriteString(`{"type":`)
	writeJSONString(buf, typ)
	buf.WriteString(`,"data":{`)
	for i, f := range columns(sch) {
		if i > 0 {
			buf.WriteByte(',')
		}
		writeJSONString(buf, f.DBName)
		buf.WriteByte(':')
		if err := encodeValue(buf, rv.FieldByIndex(f.StructField.Index).Interface()); err != nil {
			return fmt.Errorf("%s column %s: %w", typ, f.DBName, err)
		}
	}
	buf.WriteString("}}\n")
	return nil
}

func encodeValue(buf *bytes.Buffer, v any) error {
	switch x := v.(type) {
	case models.VerbatimJSON:
		if x == nil {
			buf.WriteString("null")
			return nil
		}
		writeJSONString(buf, string(x))
	case models.JSON:
		if len(x) == 0 {
			buf.WriteString("null")
			return nil
		}
		return canonicalJSON(buf, x)
	case models.Decimal:
		s, _ := x.Value()
		writeJSONString(buf, s.(string))
	case time.Time:
		writeJSONString(buf, x.UTC().Format(time.RFC3339Nano))
	case *time.Time:
		if x == nil {
			buf.WriteString("null")
			return nil
		}
		writeJSONString(buf, x.UTC().Format(time.RFC3339Nano))
	default:
		return writeJSON(buf, v)
	}
	return nil
}

// writeJSON appends v as JSON without HTML escaping and without the
// encoder's newline.
func writeJSON(buf *bytes.Buffer, v any) error {
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	buf.Truncate(buf.Len() - 1)
	return nil
}

func writeJSONString(buf *bytes.Buffer, s string) { _ = writeJSON(buf, s) }

// canonicalJSON appends the canonical form of the JSON document doc:
// object keys sorted (the last of duplicate keys kept, as PostgreSQL's
// jsonb does), no insignificant space, strings as encoding/json writes
// them (without HTML escaping), numbers as their exact decimal value in
// the shortest form (1.50 and 15e-1 are 1.5). jsonb on PostgreSQL and
// text on SQLite store the same document with different bytes; their
// canonical forms are equal.
func canonicalJSON(buf *bytes.Buffer, doc []byte) error {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return fmt.Errorf("stored JSON does not parse: %w", err)
	}
	return writeCanonical(buf, v)
}

func writeCanonical(buf *bytes.Buffer, v any) error {
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		buf.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				buf.WriteByte(',')
			}
			writeJSONString(buf, k)
			buf.WriteByte(':')
			if err := writeCanonical(buf, x[k]); err != nil {
				return err
			}
		}
		buf.WriteByte('}')
	case []any:
		buf.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				buf.WriteByte(',')
			}
			if err := writeCanonical(buf, e); err != nil {
				return err
			}
		}
		buf.WriteByte(']')
	case json.Number:
		d, err := decimal.NewFromString(string(x))
		if err != nil {
			return fmt.Errorf("number %q: %w", clip(string(x)), err)
		}
		buf.WriteString(d.String())
	default:
		return writeJSON(buf, x)
	}
	return nil
}

// rawRecord is a record line as decoded before its data.
type rawRecord struct {
	Type string          `json:"type"`
	Data json.RawMessage `json:"data"`
}

// decode sets the fields of row (a pointer to a fresh model) from a
// record's data object. Every column must be present, and nothing else.
func (c *recordCodec) decode(data json.RawMessage, row any) error {
	sch, err := c.schemaOf(row)
	if err != nil {
		return err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil || m == nil {
		return fmt.Errorf("%w: data is not a JSON object", ErrInvalidStream)
	}
	cols := columns(sch)
	rv := reflect.ValueOf(row).Elem()
	for _, f := range cols {
		raw, ok := m[f.DBName]
		if !ok {
			return fmt.Errorf("%w: column %s missing", ErrInvalidStream, f.DBName)
		}
		fv := rv.FieldByIndex(f.StructField.Index)
		if err := decodeValue(raw, fv.Addr().Interface()); err != nil {
			return fmt.Errorf("%w: column %s: %v", ErrInvalidStream, f.DBName, err)
		}
	}
	if len(m) != len(cols) {
		for k := range m {
			if _, ok := sch.FieldsByDBName[k]; !ok {
				return fmt.Errorf("%w: unknown column %q", ErrInvalidStream, clip(k))
			}
		}
	}
	return nil
}

func decodeValue(raw json.RawMessage, ptr any) error {
	isNull := bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
	switch p := ptr.(type) {
	case *models.VerbatimJSON:
		if isNull {
			*p = nil
			return nil
		}
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return err
		}
		if !json.Valid([]byte(s)) {
			return errors.New("content is not a JSON document")
		}
		*p = models.VerbatimJSON(s)
	case *models.JSON:
		if isNull {
			*p = nil
			return nil
		}
		var buf bytes.Buffer
		if err := canonicalJSON(&buf, raw); err != nil {
			return err
		}
		*p = models.JSON(buf.Bytes())
	case *models.Decimal:
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return err
		}
		d, err := decimal.NewFromString(s)
		if err != nil {
			return fmt.Errorf("decimal %q: %w", clip(s), err)
		}
		*p = models.NewDecimal(d)
	case *time.Time:
		t, err := parseStreamTime(raw)
		if err != nil {
			return err
		}
		*p = t
	case **time.Time:
		if isNull {
			*p = nil
			return nil
		}
		t, err := parseStreamTime(raw)
		if err != nil {
			return err
		}
		*p = &t
	default:
		return json.Unmarshal(raw, ptr)
	}
	return nil
}

func parseStreamTime(raw json.RawMessage) (time.Time, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return time.Time{}, err
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("time %q: %w", clip(s), err)
	}
	return t.UTC(), nil
}

// groupKey returns the key of a group-start row (session id, instance id,
// queue row id) as text, for record names and comparisons.
func groupKey(row any) string {
	switch r := row.(type) {
	case *models.Session:
		return r.ID.String()
	case *models.Instance:
		return r.InstanceID
	case *models.OrchestratorQueueItem:
		return fmt.Sprint(r.ID)
	case *models.WorkerQueueItem:
		return fmt.Sprint(r.ID)
	}
	return ""
}

// parentKey returns the group a child row belongs to (its session id or
// instance id) and the row's own key within it, for record names.
func parentKey(row any) (string, string) {
	switch r := row.(type) {
	case *models.Message:
		return r.SessionID.String(), fmt.Sprint(r.Seq)
	case *models.Compact:
		return r.SessionID.String(), r.ID.String()
	case *models.Summary:
		return r.SessionID.String(), r.ID.String()
	case *models.QueueItem:
		return r.SessionID.String(), r.ID.String()
	case *models.Todo:
		return r.SessionID.String(), r.ID.String()
	case *models.Plan:
		return r.SessionID.String(), r.ID.String()
	case *models.Execution:
		return r.InstanceID, fmt.Sprint(r.ExecutionID)
	case *models.HistoryEvent:
		return r.InstanceID, fmt.Sprintf("%d/%d", r.ExecutionID, r.EventID)
	case *models.KVStoreEntry:
		return r.InstanceID, r.Key
	case *models.KVDeltaEntry:
		return r.InstanceID, r.Key
	case *models.OrchestratorQueueItem:
		return r.InstanceID, fmt.Sprint(r.ID)
	case *models.WorkerQueueItem:
		if r.InstanceID == nil {
			return "", fmt.Sprint(r.ID)
		}
		return *r.InstanceID, fmt.Sprint(r.ID)
	}
	return "", ""
}

// orderColumn returns the SQL expression a walk orders column col by:
// text columns in byte order on every dialect (dialect.BinaryOrderer).
func (s *Store) orderColumn(sch *schema.Schema, col string) string {
	q := `"` + col + `"`
	if f := sch.LookUpField(col); f != nil && f.FieldType.Kind() == reflect.String {
		if b, ok := s.d.(dialect.BinaryOrderer); ok {
			return b.BinaryOrder(q)
		}
	}
	return q
}

// ExportParams selects what Export writes: every session and every
// provider instance (the zero value), the sessions of one tenant (Tenant),
// or the listed sessions (Sessions). Tenant and Sessions exclude each
// other; with either, no provider instance is written (instances have no
// tenant). A session's sub-sessions and forks (ParentID) are written after
// it when they are selected too; a selected session whose parent is not
// selected starts its own tree (importing it needs the parent stored).
type ExportParams struct {
	Tenant   string
	Sessions []uuid.UUID
	// Progress, if not nil, is called after each session and instance
	// written (from Export's goroutine).
	Progress func(TransferProgress)
}

// ImportParams configures Import.
type ImportParams struct {
	// Progress, if not nil, is called after each session and instance
	// imported or skipped (from Import's goroutine).
	Progress func(TransferProgress)
}

// TransferProgress is what Export and Import have done so far.
type TransferProgress struct {
	Records   int64 // records written or read (header and trailer excluded)
	Sessions  int64 // sessions written, or imported and skipped
	Instances int64 // provider instances written, or imported and skipped
	Messages  int64 // message records written or read
}

// ExportReport is what Export wrote: the number of records (header and
// trailer excluded), the count per record type (as in the trailer) and the
// stream's checksum ("sha256:" and the hex digest of every line before the
// trailer).
type ExportReport struct {
	Records  int64
	Counts   map[string]int64
	Checksum string
}

// ImportReport is what Import read and did: Records and Counts as in the
// stream's trailer (checked), the sessions and instances it imported and
// those it skipped because the store already held them (same version),
// the loose queue rows (of no stored instance) likewise, and the checksum
// it verified.
type ImportReport struct {
	Records           int64
	Counts            map[string]int64
	SessionsImported  int64
	SessionsSkipped   int64
	InstancesImported int64
	InstancesSkipped  int64
	QueueRowsImported int64
	QueueRowsSkipped  int64
	Checksum          string
}

// DeleteReport is what DeleteTenant deleted: the tenant's sessions (and
// any session below one of them, by ParentID, whatever its tenant) and
// their rows, by table.
type DeleteReport struct {
	Tenant      string
	Sessions    int64
	Messages    int64
	Compactions int64
	Summaries   int64
	QueueItems  int64
	Todos       int64
	Plans       int64
}

// streamHeader is the first line of a stream.
type streamHeader struct {
	Format        string `json:"format"`
	Version       int    `json:"version"`
	SchemaVersion int64  `json:"schema_version"`
	Scope         string `json:"scope"`
	Tenant        string `json:"tenant,omitempty"`
}

// streamTrailer is the last line of a stream.
type streamTrailer struct {
	Type    string           `json:"type"`
	Records int64            `json:"records"`
	Counts  map[string]int64 `json:"counts"`
	SHA256  string           `json:"sha256"`
}
