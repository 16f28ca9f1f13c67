package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"net/url"
	"os"
	"strings"
	"time"

	// The driver also registers itself as "sqlite3".
	"github.com/mattn/go-sqlite3"
)

// Sentinel errors callers branch on.
var (
	// ErrNotFound reports a model type, fit, job, decision or action that is not stored.
	ErrNotFound = errors.New("not found")
	// ErrInvalid reports input the store refuses; the message names the field and its value.
	ErrInvalid = errors.New("invalid input")
	// ErrSchemaTooNew reports a database migrated by a newer rubick than this binary.
	ErrSchemaTooNew = errors.New("database schema is newer than this binary")
	// ErrSchemaTooOld reports a database, opened WithoutMigrating, at an
	// older schema than this binary's.
	ErrSchemaTooOld = errors.New("database schema is older than this binary")
	// ErrResolved reports a MarkApplied on an action that already has a result.
	ErrResolved = errors.New("action already resolved")
	// ErrNotStore reports a file Open, told WithExisting, found not to be a
	// rubick store.
	ErrNotStore = errors.New("not a rubick store")
	// ErrReadOnly reports a write to a store opened ReadOnly.
	ErrReadOnly = errors.New("store opened read-only")
)

// Sync is the SQLite synchronous level of the writer connection.
type Sync string

// Synchronous levels.
const (
	// SyncFull fsyncs the write-ahead log on every commit: a committed
	// transaction survives a power loss. The default, because a recorded
	// plan action is the only memory of a side effect already sent to Slurm.
	SyncFull Sync = "FULL"
	// SyncNormal fsyncs only at checkpoints: commits survive a process crash
	// but the last few may be lost on power loss. For simulations and tests.
	SyncNormal Sync = "NORMAL"
)

// Option configures Open.
type Option func(*config)

type config struct {
	now         func() time.Time
	log         *slog.Logger
	busyTimeout time.Duration
	readers     int
	sync        Sync
	existing    bool
	noMigrate   bool
	readOnly    bool
}

// WithClock sets the clock every stored time comes from; the default is time.Now.
func WithClock(now func() time.Time) Option { return func(c *config) { c.now = now } }

// WithLogger sets the logger for migrations; the default discards.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.log = l } }

// WithBusyTimeout sets how long a connection waits for a lock held by
// another process before failing with SQLITE_BUSY; the default is 5 s.
func WithBusyTimeout(d time.Duration) Option { return func(c *config) { c.busyTimeout = d } }

// WithExisting makes Open refuse, with ErrNotStore and before writing
// anything, a file that is not already a rubick store: an empty file, or
// another program's database. Commands that only read the store use it,
// so a mistyped --store never becomes one.
func WithExisting() Option { return func(c *config) { c.existing = true } }

// WithoutMigrating makes Open leave the schema as it finds it: besides
// what WithExisting refuses, it refuses with ErrSchemaTooOld, before
// writing anything, a store whose schema is older than this binary's,
// which its statements cannot read. Commands other than rubickd use it:
// a store they migrated would be one the running, older rubickd refuses
// with ErrSchemaTooNew; the new rubickd migrates it when it starts.
func WithoutMigrating() Option { return func(c *config) { c.noMigrate = true } }

// ReadOnly makes Open open no writer: every write fails with ErrReadOnly,
// and nothing is written, the schema included (WithoutMigrating). It
// needs read access to the database file only: for users running rubick
// explain or queue on a store they may read but whose directory they may
// not write. A WAL read needs the store's shared-memory file (-shm), which
// a running rubickd keeps; with none and no log (-wal), no one has the
// store open, and it is read as immutable, since SQLite could not create
// the file.
func ReadOnly() Option { return func(c *config) { c.readOnly, c.noMigrate = true, true } }

// WithReaders sets the size of the reader pool; the default is 4.
func WithReaders(n int) Option { return func(c *config) { c.readers = n } }

// WithSync sets the synchronous level of the writer; the default is SyncFull.
func WithSync(s Sync) Option { return func(c *config) { c.sync = s } }

// Store is rubick's SQLite database. Its methods are safe for concurrent use.
type Store struct {
	w *sql.DB // exactly one connection: every write goes through it
	r *sql.DB // query-only connections
	// currentFit is prepared once: it runs for every job of a known model
	// type, and preparing costs about as much as running it.
	currentFit *sql.Stmt
	now        func() time.Time
	log        *slog.Logger
}

// Open opens or creates the database at path, applies any pending
// migrations, each in its own transaction, unless told WithoutMigrating,
// and returns the Store. It fails with ErrSchemaTooNew when the database
// was migrated by a newer binary.
// path must name a file: an in-memory database would not be shared between
// the writer and the readers.
func Open(ctx context.Context, path string, opts ...Option) (*Store, error) {
	return open(ctx, path, migrations(), opts...)
}

func open(ctx context.Context, path string, migs []migration, opts ...Option) (*Store, error) {
	cfg := config{
		now:         time.Now,
		log:         slog.New(slog.DiscardHandler),
		busyTimeout: 5 * time.Second,
		readers:     4,
		sync:        SyncFull,
	}
	for _, o := range opts {
		o(&cfg)
	}
	switch {
	case path == "" || path == ":memory:" || strings.HasPrefix(path, "file:"):
		return nil, fmt.Errorf("store: open: %w: path=%q must name a database file", ErrInvalid, path)
	case strings.ContainsAny(path, "?#"):
		// The driver reads everything after '?' as its own parameters.
		return nil, fmt.Errorf("store: open: %w: path=%q must not contain '?' or '#'", ErrInvalid, path)
	case cfg.readers < 1:
		return nil, fmt.Errorf("store: open: %w: readers=%d must be >= 1", ErrInvalid, cfg.readers)
	case cfg.busyTimeout < 0:
		return nil, fmt.Errorf("store: open: %w: busy timeout=%v must be >= 0", ErrInvalid, cfg.busyTimeout)
	case cfg.sync != SyncFull && cfg.sync != SyncNormal:
		return nil, fmt.Errorf("store: open: %w: sync=%q must be FULL or NORMAL", ErrInvalid, cfg.sync)
	case cfg.now == nil:
		return nil, fmt.Errorf("store: open: %w: clock is nil", ErrInvalid)
	}
	if cfg.log == nil {
		cfg.log = slog.New(slog.DiscardHandler)
	}

	common := url.Values{}
	common.Set("_busy_timeout", fmt.Sprint(cfg.busyTimeout.Milliseconds()))
	common.Set("_foreign_keys", "on")
	if cfg.readOnly {
		return openReadOnly(ctx, path, common, len(migs), cfg)
	}
	if cfg.existing || cfg.noMigrate {
		v, err := checkExisting(ctx, path, common, false)
		if err == nil && cfg.noMigrate {
			err = checkVersion(v, len(migs))
		}
		if err != nil {
			return nil, fmt.Errorf("store: open %s: %w", path, err)
		}
	}

	wq := maps.Clone(common)
	wq.Set("_journal_mode", "WAL")
	wq.Set("_synchronous", string(cfg.sync))
	// BEGIN IMMEDIATE takes the write lock up front: a deferred transaction
	// that reads first and writes later can fail with SQLITE_BUSY when
	// another process wrote in between, and busy_timeout cannot help it.
	wq.Set("_txlock", "immediate")
	w, err := sql.Open("sqlite3", path+"?"+wq.Encode())
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)

	s := &Store{w: w, now: cfg.now, log: cfg.log}
	if err := retryBusy(ctx, cfg.busyTimeout, func() error { return s.checkWriter(ctx, cfg.sync) }); err != nil {
		w.Close()
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	if !cfg.noMigrate {
		if err := retryBusy(ctx, cfg.busyTimeout, func() error { return migrate(ctx, w, migs, cfg.now, cfg.log) }); err != nil {
			w.Close()
			return nil, fmt.Errorf("store: open %s: %w", path, err)
		}
	}

	rq := maps.Clone(common)
	rq.Set("_query_only", "on")
	if err := s.openReaders(ctx, path+"?"+rq.Encode(), cfg.readers); err != nil {
		s.Close()
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	return s, nil
}

// openReaders opens s's pool of n readers on dsn, and prepares the
// statements they run.
func (s *Store) openReaders(ctx context.Context, dsn string, n int) error {
	r, err := sql.Open("sqlite3", dsn)
	if err != nil {
		return err
	}
	r.SetMaxOpenConns(n)
	r.SetMaxIdleConns(n)
	s.r = r
	if err := r.PingContext(ctx); err != nil {
		return fmt.Errorf("readers: %w", err)
	}
	if s.currentFit, err = r.PrepareContext(ctx, `SELECT `+fitColumns+` FROM fits WHERE model_type = ? AND current = 1`); err != nil {
		return fmt.Errorf("prepare: %w", err)
	}
	return nil
}

// openReadOnly is open told ReadOnly: readers only, on a store at
// schema version want.
func openReadOnly(ctx context.Context, path string, common url.Values, want int, cfg config) (*Store, error) {
	immutable := false
	v, err := checkExisting(ctx, path, common, false)
	if err != nil && unsharable(path, err) {
		immutable = true
		v, err = checkExisting(ctx, path, common, true)
	}
	if err == nil {
		err = checkVersion(v, want)
	}
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	s := &Store{now: cfg.now, log: cfg.log}
	if err := s.openReaders(ctx, readOnlyDSN(path, common, immutable), cfg.readers); err != nil {
		s.Close()
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	return s, nil
}

// unsharable reports whether err, from a read-only open of the store at
// path, is SQLite's failure to create the shared-memory file of a WAL
// read in a directory the reader may not write, with no log beside the
// store: no one has it open, and it may be read as immutable.
func unsharable(path string, err error) bool {
	var se sqlite3.Error
	if !errors.As(err, &se) || se.Code != sqlite3.ErrReadonly && se.Code != sqlite3.ErrCantOpen {
		return false
	}
	_, serr := os.Stat(path + "-wal")
	return errors.Is(serr, fs.ErrNotExist)
}

// readOnlyDSN opens path read-only, as immutable where told: SQLite then
// neither locks it nor looks for a log.
func readOnlyDSN(path string, common url.Values, immutable bool) string {
	q := maps.Clone(common)
	q.Set("mode", "ro")
	q.Set("_query_only", "on")
	if immutable {
		q.Set("immutable", "1")
	}
	// Only a "file:" URI takes mode=ro; '?' and '#' are refused above, and
	// '%' would start an escape.
	return "file:" + strings.ReplaceAll(path, "%", "%25") + "?" + q.Encode()
}

// checkExisting fails with ErrNotStore unless path is a rubick store, and
// returns its schema version. It reads through a read-only connection
// (immutable where told, readOnlyDSN): the writer's own opening would
// already turn another program's database to WAL.
func checkExisting(ctx context.Context, path string, common url.Values, immutable bool) (int, error) {
	db, err := sql.Open("sqlite3", readOnlyDSN(path, common, immutable))
	if err != nil {
		return 0, err
	}
	defer db.Close()
	var n int
	err = db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'`).Scan(&n)
	var se sqlite3.Error
	switch {
	case errors.As(err, &se) && se.Code == sqlite3.ErrNotADB:
		return 0, fmt.Errorf("%w: the file is not an SQLite database", ErrNotStore)
	case err != nil:
		return 0, err
	case n == 0:
		return 0, fmt.Errorf("%w: the database has no schema_migrations table (an empty file, or another program's database)", ErrNotStore)
	}
	return schemaVersion(ctx, db)
}

// checkVersion fails unless a store at schema version v is one a binary
// that knows want versions reads as it is.
func checkVersion(v, want int) error {
	switch {
	case v > want:
		return fmt.Errorf("%w: database is at version %d, this binary knows up to %d", ErrSchemaTooNew, v, want)
	case v < want:
		return fmt.Errorf("%w: database is at version %d, this binary reads version %d; upgrade rubickd, which migrates the store when it starts", ErrSchemaTooOld, v, want)
	}
	return nil
}

// retryBusy runs f until it returns anything but SQLITE_BUSY, or timeout
// has passed. SQLite answers some statements with SQLITE_BUSY without
// calling the busy handler, such as reading the journal mode while another
// connection turns a new database to WAL: processes opening a fresh store
// at the same time meet exactly that. f must be safe to repeat.
func retryBusy(ctx context.Context, timeout time.Duration, f func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		var se sqlite3.Error
		if err == nil || !errors.As(err, &se) || se.Code != sqlite3.ErrBusy || !time.Now().Before(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// checkWriter verifies that the pragmas the durability argument rests on
// took effect; the driver silently keeps the rollback journal on file
// systems where WAL is unavailable.
func (s *Store) checkWriter(ctx context.Context, want Sync) error {
	var mode string
	if err := s.w.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return fmt.Errorf("read journal_mode: %w", err)
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("journal_mode is %q, want wal", mode)
	}
	var fk int
	if err := s.w.QueryRowContext(ctx, "PRAGMA foreign_keys").Scan(&fk); err != nil {
		return fmt.Errorf("read foreign_keys: %w", err)
	}
	if fk != 1 {
		return errors.New("foreign keys are off")
	}
	var sync int
	if err := s.w.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&sync); err != nil {
		return fmt.Errorf("read synchronous: %w", err)
	}
	if levels := map[Sync]int{SyncNormal: 1, SyncFull: 2}; sync != levels[want] {
		return fmt.Errorf("synchronous is %d, want %s", sync, want)
	}
	return nil
}

// Close closes both pools. The Store must not be used afterwards.
func (s *Store) Close() error {
	var errs []error
	if s.currentFit != nil {
		errs = append(errs, s.currentFit.Close())
	}
	if s.r != nil {
		errs = append(errs, s.r.Close())
	}
	if s.w != nil {
		errs = append(errs, s.w.Close())
	}
	return errors.Join(errs...)
}

// write runs fn in one writer transaction and commits it, or rolls it back
// when fn fails.
func (s *Store) write(ctx context.Context, fn func(tx *sql.Tx) error) error {
	if s.w == nil {
		return ErrReadOnly
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	if err := fn(tx); err != nil {
		return errors.Join(err, ignoreDone(tx.Rollback()))
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// read runs fn in one read transaction, so that the queries it makes see a
// single snapshot.
func (s *Store) read(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := s.r.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	err = fn(tx)
	return errors.Join(err, ignoreDone(tx.Rollback()))
}

func ignoreDone(err error) error {
	if errors.Is(err, sql.ErrTxDone) {
		return nil
	}
	return err
}

// timestamp converts the clock's time for storage; the zero time is stored
// as NULL so that "unknown" survives a round trip.
func timestamp(t time.Time) sql.NullInt64 {
	if t.IsZero() {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: t.UnixNano(), Valid: true}
}

func fromTimestamp(n sql.NullInt64) time.Time {
	if !n.Valid {
		return time.Time{}
	}
	return time.Unix(0, n.Int64).UTC()
}
