package engine

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"maps"
	"reflect"
	"slices"

	"gorm.io/gorm"

	"github.com/agentstore/agentstore/internal/dialect"
	"github.com/agentstore/agentstore/models"
)

// importBatch is the number of rows of one kind an import inserts per
// statement.
const importBatch = 250

// importer reads one stream into the store.
type importer struct {
	s       *Store
	ctx     context.Context
	codec   *recordCodec
	kinds   map[string]recordKind
	r       *bufio.Reader
	line    int
	sum     hash.Hash
	counts  map[string]int64
	rep     ImportReport
	prog    TransferProgress
	report  func(TransferProgress)
	g       *importGroup
	trailer bool
}

// importGroup is the group (a session, an instance, a loose queue row)
// being imported: its rows go into one transaction, committed when the
// next group starts or the trailer is read.
type importGroup struct {
	kind    recordKind
	key     string
	name    string
	line    int
	skip    bool     // already stored: its records are read, not written
	tx      *gorm.DB // nil when skipped
	release func()
	batch   reflect.Value // pending rows of batchKind (a slice of the model)
	bkind   recordKind
	bline   int
	bname   string
	serials map[string]string // table base name -> serial column written
	// msgs counts a session's message records, want is its stored
	// message_count: they must agree when the group ends.
	msgs, want int64
}

// Import reads an export stream (docs/export.md) from r into the store.
// Each session with its rows, each provider instance with its rows and
// each loose queue row is imported in one transaction; one already stored
// with the same version (a session's version; an instance's execution,
// update time and custom-status version; a queue row's id) is skipped, so
// importing a stream again changes nothing and an interrupted import is
// resumed by running it again. It keeps every id, sequence number,
// timestamp, version and decimal as the stream has them. At the trailer it
// checks the record counts and the checksum.
//
// It stops at the first bad line with an *ImportError naming the line and
// the record: ErrInvalidStream (not JSON, unknown record or column, a
// record outside its group, counts or checksum that differ from the
// trailer's), ErrTruncatedStream (no trailer), ErrUnsupportedStreamVersion
// (a newer format), ErrNotFound (a session whose parent is neither earlier
// in the stream nor stored), ErrConflict (a session or instance stored with
// other content; ErrDuplicate for a row whose unique key another row
// holds), or a database error. The groups before that line stay imported,
// whole; the group of the line is rolled back.
func (s *Store) Import(ctx context.Context, r io.Reader, p ImportParams) (rep ImportReport, err error) {
	im := &importer{s: s, ctx: ctx, codec: newRecordCodec(s.db), kinds: kindsByType(), r: bufio.NewReaderSize(r, 64<<10),
		sum: sha256.New(), counts: map[string]int64{}, report: p.Progress}
	defer func() {
		if err != nil {
			im.abort()
		}
		// what it committed may be claimable or new to a change feed: wake
		// the waiting calls (of this Store in-process, of others through
		// the wake-up mechanism), whatever the outcome
		s.wakeAllWaiters()
	}()
	for !im.trailer {
		b, rerr := im.r.ReadBytes('\n')
		if rerr != nil && !errors.Is(rerr, io.EOF) {
			return im.rep, &ImportError{Line: im.line + 1, Err: rerr}
		}
		if errors.Is(rerr, io.EOF) {
			what := "the stream ends without its trailer record"
			if len(b) > 0 {
				what = "the stream ends in the middle of a line"
			}
			if im.line == 0 && len(b) == 0 {
				what = "the stream is empty"
			}
			return im.rep, &ImportError{Line: im.line + 1, Err: fmt.Errorf("%w: %s", ErrTruncatedStream, what)}
		}
		im.line++
		if err := im.handle(b); err != nil {
			return im.rep, err
		}
	}
	// Nothing may follow the trailer.
	if rest, _ := io.ReadAll(io.LimitReader(im.r, 1<<10)); len(bytes.TrimSpace(rest)) > 0 {
		return im.rep, &ImportError{Line: im.line + 1, Err: fmt.Errorf("%w: data after the trailer record", ErrInvalidStream)}
	}
	return im.rep, nil
}

// wakeAllWaiters wakes every call waiting on this Store's queues and
// change feed, and publishes the wake-ups to other Stores: after a bulk
// write (Import) that does not tell what it made claimable.
func (s *Store) wakeAllWaiters() {
	p := s.provider()
	for _, sig := range []*signal{p.orch, p.work, p.queue, p.feed} {
		sig.notify()
	}
}

// fail returns the *ImportError of the current line.
func (im *importer) fail(record string, err error) error {
	return &ImportError{Line: im.line, Record: record, Err: err}
}

func invalidStream(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidStream, fmt.Sprintf(format, args...))
}

// handle processes one line (with its newline).
func (im *importer) handle(b []byte) error {
	if err := im.ctx.Err(); err != nil {
		return im.fail("", err)
	}
	if im.line == 1 {
		var h streamHeader
		if err := json.Unmarshal(b, &h); err != nil || h.Format != StreamFormat {
			return im.fail(recHeader, invalidStream("the first line is not an agentstore export header"))
		}
		if h.Version > StreamVersion {
			return im.fail(recHeader, fmt.Errorf("%w: format version %d, this build reads up to %d (upgrade agentstore)",
				ErrUnsupportedStreamVersion, h.Version, StreamVersion))
		}
		if h.Version < 1 {
			return im.fail(recHeader, invalidStream("format version %d", h.Version))
		}
		im.sum.Write(b)
		return nil
	}
	var rec rawRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return im.fail("", invalidStream("the line is not a JSON record: %v", err))
	}
	if rec.Type == recTrailer {
		return im.finish(b)
	}
	k, ok := im.kinds[rec.Type]
	if !ok {
		return im.fail("", invalidStream("unknown record type %q", clip(rec.Type)))
	}
	row := k.model()
	if err := im.codec.decode(rec.Data, row); err != nil {
		return im.fail(rec.Type, err)
	}
	im.sum.Write(b)
	im.counts[rec.Type]++
	im.rep.Records++
	im.prog.Records++
	if rec.Type == recMessage {
		im.prog.Messages++
	}
	if k.parent == "" {
		if err := im.endGroup(); err != nil {
			return err
		}
		return im.startGroup(k, row)
	}
	parent, own := parentKey(row)
	name := rec.Type + " " + parent + "/" + own
	g := im.g
	if g == nil || g.key != parent || !childOf(g.kind.typ, rec.Type) {
		return im.fail(name, invalidStream("the record does not follow its %s", map[bool]string{true: "session", false: "instance"}[k.parent == "session_id"]))
	}
	if g.skip {
		return nil
	}
	return im.add(k, row, name)
}

// childOf reports whether records of type child belong to a group of type
// group.
func childOf(group, child string) bool {
	var kinds []recordKind
	switch group {
	case recSession:
		kinds = sessionChildren()
	case recInstance:
		kinds = instanceChildren()
	}
	for _, k := range kinds {
		if k.typ == child {
			return true
		}
	}
	return false
}

// startGroup opens the group of row (a group-start record): skipped when
// the store holds it already, else its transaction begun and row inserted.
func (im *importer) startGroup(k recordKind, row any) error {
	key := groupKey(row)
	g := &importGroup{kind: k, key: key, name: k.typ + " " + key, line: im.line, serials: map[string]string{}}
	im.g = g
	release := (&sessionStore{s: im.s}).writeLock(im.ctx)
	tx := im.s.db.WithContext(im.ctx).Begin()
	if tx.Error != nil {
		release()
		return im.fail(g.name, dbErr(tx.Error))
	}
	g.tx, g.release = tx, release
	stored, err := im.stored(tx, row)
	if err != nil {
		return im.fail(g.name, err)
	}
	if stored {
		g.skip = true
		im.closeTx(false)
		return nil
	}
	if s, ok := row.(*models.Session); ok {
		g.want = s.MessageCount
	}
	if s, ok := row.(*models.Session); ok && s.ParentID != nil {
		var n int64
		if err := tx.Model(&models.Session{}).Where("id = ?", *s.ParentID).Count(&n).Error; err != nil {
			return im.fail(g.name, dbErr(err))
		}
		if n == 0 {
			return im.fail(g.name, fmt.Errorf("parent session %s is neither earlier in the stream nor stored: %w", *s.ParentID, ErrNotFound))
		}
	}
	if err := tx.Create(row).Error; err != nil {
		return im.fail(g.name, dbErr(err))
	}
	if k.serial != "" {
		g.serials[k.table] = k.serial
	}
	return nil
}

// stored reports whether the store holds the group of row already: false
// when it does not, true when it holds it with the same version, an
// ErrConflict error when it holds other content under the same key.
func (im *importer) stored(tx *gorm.DB, row any) (bool, error) {
	switch r := row.(type) {
	case *models.Session:
		var vs []int64
		if err := tx.Model(&models.Session{}).Where("id = ?", r.ID).Pluck("version", &vs).Error; err != nil {
			return false, dbErr(err)
		}
		if len(vs) == 0 {
			return false, nil
		}
		if vs[0] != r.Version {
			return false, fmt.Errorf("%w: the store holds session %s at version %d, the stream at version %d", ErrConflict, r.ID, vs[0], r.Version)
		}
		return true, nil
	case *models.Instance:
		var rows []models.Instance
		if err := tx.Where("instance_id = ?", r.InstanceID).Limit(1).Find(&rows).Error; err != nil {
			return false, dbErr(err)
		}
		if len(rows) == 0 {
			return false, nil
		}
		if o := rows[0]; o.CurrentExecutionID != r.CurrentExecutionID || o.UpdatedAt != r.UpdatedAt || o.CustomStatusVersion != r.CustomStatusVersion {
			return false, fmt.Errorf("%w: the store holds instance %q at execution %d (updated at %d ms), the stream at execution %d (updated at %d ms)",
				ErrConflict, clip(r.InstanceID), o.CurrentExecutionID, o.UpdatedAt, r.CurrentExecutionID, r.UpdatedAt)
		}
		return true, nil
	default:
		var n int64
		var id int64
		switch r := row.(type) {
		case *models.OrchestratorQueueItem:
			id = r.ID
		case *models.WorkerQueueItem:
			id = r.ID
		}
		if err := tx.Model(row).Where("id = ?", id).Count(&n).Error; err != nil {
			return false, dbErr(err)
		}
		return n > 0, nil
	}
}

// add queues row (of kind k) for insertion in the open group.
func (im *importer) add(k recordKind, row any, name string) error {
	g := im.g
	if w, ok := row.(*models.WorkerQueueItem); ok && w.InstanceID == nil {
		w.InstanceID = ptr("") // exported before V13: instance_id NOT NULL since
	}
	if k.typ == recMessage {
		g.msgs++
	}
	if g.batch.IsValid() && (g.bkind.typ != k.typ || g.batch.Len() >= importBatch) {
		if err := im.flush(); err != nil {
			return err
		}
	}
	if !g.batch.IsValid() {
		g.batch = reflect.MakeSlice(reflect.SliceOf(reflect.TypeOf(row).Elem()), 0, importBatch)
		g.bkind, g.bline, g.bname = k, im.line, name
	}
	g.batch = reflect.Append(g.batch, reflect.ValueOf(row).Elem())
	return nil
}

// flush inserts the open group's pending rows.
func (im *importer) flush() error {
	g := im.g
	if !g.batch.IsValid() || g.batch.Len() == 0 {
		return nil
	}
	ptr := reflect.New(g.batch.Type())
	ptr.Elem().Set(g.batch)
	g.batch = reflect.Value{}
	if err := g.tx.Create(ptr.Interface()).Error; err != nil {
		return &ImportError{Line: g.bline, Record: g.bname, Err: dbErr(err)}
	}
	if g.bkind.serial != "" {
		g.serials[g.bkind.table] = g.bkind.serial
	}
	return nil
}

// endGroup commits the open group (nothing for a skipped one).
func (im *importer) endGroup() error {
	g := im.g
	if g == nil {
		return nil
	}
	if !g.skip {
		if g.kind.typ == recSession && g.msgs != g.want {
			return &ImportError{Line: g.line, Record: g.name, Err: invalidStream("the session's message_count is %d, the stream holds %d of its messages", g.want, g.msgs)}
		}
		if err := im.flush(); err != nil {
			return err
		}
		if adv, ok := im.s.d.(dialect.SerialAdvancer); ok {
			for _, table := range slices.Sorted(maps.Keys(g.serials)) {
				q := im.s.quoted(table)
				if err := g.tx.Exec(adv.AdvanceSerialSQL(q, g.serials[table]), q).Error; err != nil {
					return &ImportError{Line: g.line, Record: g.name, Err: dbErr(err)}
				}
			}
		}
		if err := im.closeTx(true); err != nil {
			return &ImportError{Line: g.line, Record: g.name, Err: dbErr(err)}
		}
	}
	switch g.kind.typ {
	case recSession:
		im.prog.Sessions++
		if g.skip {
			im.rep.SessionsSkipped++
		} else {
			im.rep.SessionsImported++
		}
	case recInstance:
		im.prog.Instances++
		if g.skip {
			im.rep.InstancesSkipped++
		} else {
			im.rep.InstancesImported++
		}
	default:
		if g.skip {
			im.rep.QueueRowsSkipped++
		} else {
			im.rep.QueueRowsImported++
		}
	}
	im.g = nil
	if im.report != nil {
		im.report(im.prog)
	}
	return nil
}

// closeTx commits (or rolls back) the open group's transaction and
// releases the write lock.
func (im *importer) closeTx(commit bool) error {
	g := im.g
	if g == nil || g.tx == nil {
		return nil
	}
	var err error
	if commit {
		err = g.tx.Commit().Error
	} else {
		_ = g.tx.Rollback()
	}
	g.tx = nil
	g.release()
	return err
}

// abort rolls back the open group.
func (im *importer) abort() {
	if im.g != nil {
		_ = im.closeTx(false)
		im.g = nil
	}
}

// finish handles the trailer line b: commits the open group and checks
// the counts and the checksum.
func (im *importer) finish(b []byte) error {
	var tr streamTrailer
	if err := json.Unmarshal(b, &tr); err != nil {
		return im.fail(recTrailer, invalidStream("the trailer does not parse: %v", err))
	}
	if err := im.endGroup(); err != nil {
		return err
	}
	im.trailer = true
	if tr.Records != im.rep.Records || !maps.Equal(tr.Counts, im.counts) {
		return im.fail(recTrailer, invalidStream("the trailer counts %d records %v, the stream has %d %v", tr.Records, tr.Counts, im.rep.Records, im.counts))
	}
	sum := hex.EncodeToString(im.sum.Sum(nil))
	if tr.SHA256 != sum {
		return im.fail(recTrailer, invalidStream("checksum mismatch: the trailer says sha256 %s, the lines before it hash to %s", clip(tr.SHA256), sum))
	}
	im.rep.Counts = maps.Clone(im.counts)
	im.rep.Checksum = "sha256:" + sum
	return nil
}
