package engine

import (
	"context"
	"errors"
	"fmt"

	"gorm.io/gorm"

	"github.com/agentstore/agentstore/internal/dialect"
)

// Driver errors are translated where they arise, by the Store's own
// dialect: every GORM call through the Store's handle (GORM calls the
// dialector's Translate for each error it records, since the handle runs
// with TranslateError), and the raw statements of the session store's
// direct executor (directTx). translateError then maps what is left
// (GORM's own errors, context and connection errors) onto the sentinels.

// translatingDialector is the Store's GORM dialector: the dialect's, with
// the dialect's error translation.
type translatingDialector struct {
	gorm.Dialector
	s *Store
}

// Translate maps err with the Store's dialect (GORM's ErrorTranslator).
func (t translatingDialector) Translate(err error) error { return t.s.translateDriver(err) }

// SavePoint forwards to the dialect's dialector (nested transactions).
func (t translatingDialector) SavePoint(tx *gorm.DB, name string) error {
	if sp, ok := t.Dialector.(gorm.SavePointerDialectorInterface); ok {
		return sp.SavePoint(tx, name)
	}
	return gorm.ErrUnsupportedDriver
}

// RollbackTo forwards to the dialect's dialector (nested transactions).
func (t translatingDialector) RollbackTo(tx *gorm.DB, name string) error {
	if sp, ok := t.Dialector.(gorm.SavePointerDialectorInterface); ok {
		return sp.RollbackTo(tx, name)
	}
	return gorm.ErrUnsupportedDriver
}

// translateDriver maps a driver error with the Store's dialect; errors
// that are not the driver's are returned unchanged. The caller's own
// deadline or cancellation stays as it is (retrying with the same context
// cannot succeed), unless the driver says it ended a connection attempt
// (the pool's ConnectTimeout: the server's failure, retryable).
func (s *Store) translateDriver(err error) error {
	if err == nil || ours(err) {
		return err
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		if c, ok := s.d.(dialect.ConnectFailureClassifier); ok && c.IsConnectFailure(err) {
			return fmt.Errorf("%w: %w", ErrRetryable, err)
		}
		return err
	}
	if t, ok := s.d.(dialect.DriverErrorTranslator); ok {
		if mapped, ok := t.TranslateDriverError(err); ok {
			return mapped
		}
	}
	return err
}

// env is what the dialect sees of this Store.
func (s *Store) env() *dialect.Env {
	return &dialect.Env{Config: &s.cfg.Config, Caps: s.caps, SQLDB: s.sqlDB, WriteDB: s.writeDB, BG: s.bg,
		MigrateLockKey: s.migrateLockKey(), Quote: s.quoted, OwnTxWrites: s.txWrites.Load}
}

// translateVia maps err with the dialect behind db's dialector (the
// Store's translatingDialector), for driver errors GORM does not record
// itself: those of row iteration and of raw statements on db's connection.
func translateVia(db *gorm.DB, err error) error {
	if err == nil {
		return nil
	}
	if t, ok := db.Dialector.(gorm.ErrorTranslator); ok {
		return t.Translate(err)
	}
	return err
}

// installTranslation makes db's Row and Rows calls translate their error
// too: GORM's row callback stores the driver's error without AddError, so
// the dialector's Translate does not see it.
func installTranslation(db *gorm.DB) error {
	return db.Callback().Row().After("gorm:row").Register("agentstore:translate_error", func(tx *gorm.DB) {
		if tx.Error != nil {
			tx.Error = translateVia(tx, tx.Error)
		}
	})
}
