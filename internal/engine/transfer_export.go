package engine

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"reflect"
	"slices"
	"strings"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/agentstore/agentstore/models"
)

// exportPage is the number of rows an export reads per query: a session's
// messages are read in pages of it (keyset on seq), never all at once.
const exportPage = 500

// maxExportSessions bounds ExportParams.Sessions.
const maxExportSessions = 10000

// exporter writes one stream.
type exporter struct {
	s      *Store
	ctx    context.Context
	codec  *recordCodec
	w      *bufio.Writer
	sum    hash.Hash
	buf    bytes.Buffer
	counts map[string]int64
	prog   TransferProgress
	report func(TransferProgress)
	// filter selects the exported sessions: SQL over the sessions table's
	// columns and its arguments ("1 = 1" for every session).
	filter     string
	filterArgs []any
}

// Export writes the selected sessions and provider instances (see
// ExportParams) to w as an export stream (docs/export.md) and returns what
// it wrote. It reads in pages (memory does not grow with the data), each
// session and each instance with its rows in one snapshot where the
// database has them (CapSnapshotReads). It refuses Tenant and Sessions
// together, an invalid tenant, and more than 10000 sessions
// (ErrInvalidInput), and a listed session that does not exist
// (ErrNotFound), before writing anything. A failed write of w ends it with
// w's error; what was written before is then not a complete stream (it
// has no trailer), which Import refuses with ErrTruncatedStream.
func (s *Store) Export(ctx context.Context, w io.Writer, p ExportParams) (ExportReport, error) {
	e := &exporter{s: s, ctx: ctx, codec: newRecordCodec(s.db), w: bufio.NewWriterSize(w, 64<<10), sum: sha256.New(),
		counts: map[string]int64{}, report: p.Progress, filter: "1 = 1"}
	hdr := streamHeader{Format: StreamFormat, Version: StreamVersion, SchemaVersion: models.SchemaVersion, Scope: "all"}
	switch {
	case p.Tenant != "" && p.Sessions != nil:
		return ExportReport{}, invalidf("export: Tenant and Sessions exclude each other")
	case p.Tenant != "":
		if err := checkID("tenant id", p.Tenant); err != nil {
			return ExportReport{}, err
		}
		hdr.Scope, hdr.Tenant = "tenant", p.Tenant
		e.filter, e.filterArgs = "tenant_id = ?", []any{p.Tenant}
	case p.Sessions != nil:
		ids := slices.Clone(p.Sessions)
		slices.SortFunc(ids, func(a, b uuid.UUID) int { return strings.Compare(a.String(), b.String()) })
		ids = slices.Compact(ids)
		if len(ids) == 0 || len(ids) > maxExportSessions {
			return ExportReport{}, invalidf("export: %d sessions listed (want 1 to %d)", len(ids), maxExportSessions)
		}
		if err := s.checkSessionsExist(ctx, ids); err != nil {
			return ExportReport{}, err
		}
		hdr.Scope = "sessions"
		e.filter, e.filterArgs = "id IN ?", []any{ids}
	}
	if err := e.jsonLine(hdr); err != nil {
		return ExportReport{}, err
	}
	if err := e.sessions(); err != nil {
		return ExportReport{}, err
	}
	if hdr.Scope == "all" {
		if err := e.instances(); err != nil {
			return ExportReport{}, err
		}
		for _, k := range groupKinds()[2:] {
			if err := e.loose(k); err != nil {
				return ExportReport{}, err
			}
		}
	}
	rep := ExportReport{Records: e.prog.Records, Counts: e.counts, Checksum: "sha256:" + hex.EncodeToString(e.sum.Sum(nil))}
	tr := streamTrailer{Type: recTrailer, Records: rep.Records, Counts: rep.Counts, SHA256: hex.EncodeToString(e.sum.Sum(nil))}
	line, err := json.Marshal(tr)
	if err != nil {
		return ExportReport{}, err
	}
	if _, err := e.w.Write(append(line, '\n')); err != nil {
		return ExportReport{}, err
	}
	if err := e.w.Flush(); err != nil {
		return ExportReport{}, err
	}
	return rep, nil
}

// checkSessionsExist fails with ErrNotFound naming the first listed
// session that is not stored.
func (s *Store) checkSessionsExist(ctx context.Context, ids []uuid.UUID) error {
	var found []uuid.UUID
	for chunk := range slices.Chunk(ids, 500) {
		var got []uuid.UUID
		if err := s.db.WithContext(ctx).Model(&models.Session{}).Where("id IN ?", chunk).Pluck("id", &got).Error; err != nil {
			return opErr("Export", err)
		}
		found = append(found, got...)
	}
	if len(found) == len(ids) {
		return nil
	}
	have := map[uuid.UUID]bool{}
	for _, id := range found {
		have[id] = true
	}
	for _, id := range ids {
		if !have[id] {
			return fmt.Errorf("export: session %s: %w", id, ErrNotFound)
		}
	}
	return nil
}

// line writes one line (with its newline) and adds it to the checksum.
func (e *exporter) line(b []byte) error {
	e.sum.Write(b)
	_, err := e.w.Write(b)
	return err
}

// jsonLine writes v as one line.
func (e *exporter) jsonLine(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return e.line(append(b, '\n'))
}

// record writes row as a record of type typ.
func (e *exporter) record(typ string, row any) error {
	e.buf.Reset()
	if err := e.codec.encode(&e.buf, typ, row); err != nil {
		return err
	}
	e.counts[typ]++
	e.prog.Records++
	if typ == recMessage {
		e.prog.Messages++
	}
	return e.line(e.buf.Bytes())
}

func (e *exporter) progress() {
	if e.report != nil {
		e.report(e.prog)
	}
}

// sessions writes the selected sessions: the roots (no parent, or a parent
// not selected) in id order, each followed by its selected descendants,
// depth first, children in id order. A parent is always written before its
// children, so an import never meets a child first.
func (e *exporter) sessions() error {
	tbl := e.s.quoted(models.TableSessions)
	rootCond, rootArgs := "(parent_id IS NULL OR parent_id NOT IN (SELECT id FROM "+tbl+" WHERE "+e.filter+"))", e.filterArgs
	if len(e.filterArgs) == 0 { // every session: the foreign key keeps every parent
		rootCond = "parent_id IS NULL"
	}
	var after *uuid.UUID
	for {
		q := e.s.db.WithContext(e.ctx).Model(&models.Session{}).Where(e.filter, e.filterArgs...).Where(rootCond, rootArgs...)
		if after != nil {
			q = q.Where("id > ?", *after)
		}
		var ids []uuid.UUID
		if err := q.Order("id").Limit(exportPage).Pluck("id", &ids).Error; err != nil {
			return opErr("Export", err)
		}
		for _, id := range ids {
			if err := e.tree(id); err != nil {
				return err
			}
		}
		if len(ids) < exportPage {
			return nil
		}
		after = &ids[len(ids)-1]
	}
}

// tree writes session id and then its selected children's trees.
func (e *exporter) tree(id uuid.UUID) error {
	if err := e.ctx.Err(); err != nil {
		return err
	}
	if err := e.session(id); err != nil {
		return err
	}
	var after *uuid.UUID
	for {
		q := e.s.db.WithContext(e.ctx).Model(&models.Session{}).Where("parent_id = ?", id).Where(e.filter, e.filterArgs...)
		if after != nil {
			q = q.Where("id > ?", *after)
		}
		var ids []uuid.UUID
		if err := q.Order("id").Limit(exportPage).Pluck("id", &ids).Error; err != nil {
			return opErr("Export", err)
		}
		for _, c := range ids {
			if err := e.tree(c); err != nil {
				return err
			}
		}
		if len(ids) < exportPage {
			return nil
		}
		after = &ids[len(ids)-1]
	}
}

// session writes one session and its rows, read in one snapshot where the
// database has them. A session deleted since it was listed is left out.
func (e *exporter) session(id uuid.UUID) error {
	err := e.s.readTx(e.s.db.WithContext(e.ctx), func(tx *gorm.DB) error {
		var rows []models.Session
		if err := tx.Where("id = ?", id).Limit(1).Find(&rows).Error; err != nil {
			return opErr("Export", err)
		}
		if len(rows) == 0 {
			return nil
		}
		if err := e.record(recSession, &rows[0]); err != nil {
			return err
		}
		for _, k := range sessionChildren() {
			if err := e.children(tx, k, id); err != nil {
				return err
			}
		}
		e.prog.Sessions++
		return nil
	})
	if err != nil {
		return err
	}
	e.progress()
	return nil
}

// instances writes every provider instance (in instance id byte order),
// each with its rows.
func (e *exporter) instances() error {
	sch, err := e.codec.schemaOf(&models.Instance{})
	if err != nil {
		return err
	}
	col := e.s.orderColumn(sch, "instance_id")
	var after *string
	for {
		q := e.s.db.WithContext(e.ctx).Model(&models.Instance{})
		if after != nil {
			q = q.Where(col+" > ?", *after)
		}
		var ids []string
		if err := q.Order(col).Limit(exportPage).Pluck("instance_id", &ids).Error; err != nil {
			return opErr("Export", err)
		}
		for _, id := range ids {
			if err := e.instance(id); err != nil {
				return err
			}
		}
		if len(ids) < exportPage {
			return nil
		}
		after = &ids[len(ids)-1]
	}
}

func (e *exporter) instance(id string) error {
	if err := e.ctx.Err(); err != nil {
		return err
	}
	err := e.s.readTx(e.s.db.WithContext(e.ctx), func(tx *gorm.DB) error {
		var rows []models.Instance
		if err := tx.Where("instance_id = ?", id).Limit(1).Find(&rows).Error; err != nil {
			return opErr("Export", err)
		}
		if len(rows) == 0 {
			return nil
		}
		if err := e.record(recInstance, &rows[0]); err != nil {
			return err
		}
		for _, k := range instanceChildren() {
			if err := e.children(tx, k, id); err != nil {
				return err
			}
		}
		e.prog.Instances++
		return nil
	})
	if err != nil {
		return err
	}
	e.progress()
	return nil
}

// loose writes the queue rows of kind k whose instance is not stored (or
// that name none), in id order, one record each.
func (e *exporter) loose(k recordKind) error {
	tbl := e.s.quoted(k.table)
	cond := "NOT EXISTS (SELECT 1 FROM " + e.s.quoted(models.TableInstances) + " i WHERE i.instance_id = " + tbl + ".instance_id)"
	if k.typ == recLooseWorker {
		cond = "(" + tbl + ".instance_id IS NULL OR " + cond + ")"
	}
	return e.page(e.s.db.WithContext(e.ctx), k, cond, nil)
}

// children writes the rows of kind k of the group whose key is parent.
func (e *exporter) children(tx *gorm.DB, k recordKind, parent any) error {
	return e.page(tx, k, `"`+k.parent+`" = ?`, []any{parent})
}

// page writes the rows of kind k that cond selects, in the kind's order,
// exportPage rows per query (keyset on the order columns).
func (e *exporter) page(tx *gorm.DB, k recordKind, cond string, args []any) error {
	sch, err := e.codec.schemaOf(k.model())
	if err != nil {
		return err
	}
	order := make([]string, len(k.order))
	for i, c := range k.order {
		order[i] = e.s.orderColumn(sch, c)
	}
	sliceType := reflect.SliceOf(reflect.TypeOf(k.model()).Elem())
	var last []any
	for {
		q := tx.Where(cond, args...)
		if last != nil {
			ks, ka := keysetAfter(order, last)
			q = q.Where(ks, ka...)
		}
		rows := reflect.New(sliceType)
		if err := q.Order(strings.Join(order, ", ")).Limit(exportPage).Find(rows.Interface()).Error; err != nil {
			return opErr("Export", err)
		}
		n := rows.Elem().Len()
		for i := 0; i < n; i++ {
			if err := e.record(k.typ, rows.Elem().Index(i).Addr().Interface()); err != nil {
				return err
			}
		}
		if n < exportPage {
			return nil
		}
		lastRow := rows.Elem().Index(n - 1)
		last = last[:0]
		for _, c := range k.order {
			last = append(last, lastRow.FieldByIndex(sch.LookUpField(c).StructField.Index).Interface())
		}
	}
}

// keysetAfter returns the condition "(c1, c2, ...) > (v1, v2, ...)" in
// the expanded form both dialects plan as index ranges.
func keysetAfter(cols []string, vals []any) (string, []any) {
	var parts []string
	var args []any
	for i := range cols {
		var conj []string
		for j := 0; j < i; j++ {
			conj = append(conj, cols[j]+" = ?")
			args = append(args, vals[j])
		}
		conj = append(conj, cols[i]+" > ?")
		args = append(args, vals[i])
		parts = append(parts, "("+strings.Join(conj, " AND ")+")")
	}
	return "(" + strings.Join(parts, " OR ") + ")", args
}
