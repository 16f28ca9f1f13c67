package store

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rubick-sched/rubick/model"
)

type appliedMigration struct {
	Version int
	Name    string
}

func appliedMigrations(t *testing.T, s *Store) []appliedMigration {
	t.Helper()
	rows, err := s.r.QueryContext(context.Background(), `SELECT version, name FROM schema_migrations ORDER BY version`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []appliedMigration
	for rows.Next() {
		var m appliedMigration
		if err := rows.Scan(&m.Version, &m.Name); err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

func wantMigrations(migs []migration) []appliedMigration {
	var out []appliedMigration
	for _, m := range migs {
		out = append(out, appliedMigration{m.version, m.name})
	}
	return out
}

func TestMigrationsAreContiguous(t *testing.T) {
	for i, m := range migrations() {
		if m.version != i+1 || m.name == "" || m.up == "" {
			t.Errorf("migration %d = {version %d, name %q}, want version %d with a name and SQL", i, m.version, m.name, i+1)
		}
	}
	if SchemaVersion() != len(migrations()) {
		t.Errorf("SchemaVersion() = %d, want %d", SchemaVersion(), len(migrations()))
	}
}

func TestMigrationsIdempotent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rubick.db")
	for range 3 {
		s := openTest(t, path)
		if d := cmp.Diff(wantMigrations(migrations()), appliedMigrations(t, s)); d != "" {
			t.Fatalf("schema_migrations (-want +got):\n%s", d)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestMigrationUpgradesOlderDatabase(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "rubick.db")
	s := openTest(t, path)
	if err := s.UpsertModelType(ctx, gpt2()); err != nil {
		t.Fatal(err)
	}
	s.Close()

	v2 := append(migrations(), migration{version: SchemaVersion() + 1, name: "add note",
		up: `ALTER TABLE model_types ADD COLUMN note TEXT NOT NULL DEFAULT 'kept'`})
	s2, err := open(ctx, path, v2)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if d := cmp.Diff(wantMigrations(v2), appliedMigrations(t, s2)); d != "" {
		t.Errorf("schema_migrations (-want +got):\n%s", d)
	}
	var note string
	if err := s2.r.QueryRowContext(ctx, `SELECT note FROM model_types WHERE name = 'gpt2'`).Scan(&note); err != nil || note != "kept" {
		t.Errorf("migrated row: note=%q err=%v, want note=kept", note, err)
	}
}

func TestSchemaTooNew(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "rubick.db")
	newer := append(migrations(), migration{version: SchemaVersion() + 1, name: "future", up: `CREATE TABLE future (x INTEGER)`})
	s, err := open(ctx, path, newer)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()

	s, err = Open(ctx, path)
	if err == nil {
		s.Close()
		t.Fatal("Open of a newer database succeeded")
	}
	if !errors.Is(err, ErrSchemaTooNew) {
		t.Fatalf("Open = %v, want ErrSchemaTooNew", err)
	}
	t.Logf("error: %v", err)
}

func TestFailedMigrationRollsBack(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "rubick.db")
	s := openTest(t, path)
	s.Close()

	// The first statement succeeds, the second fails: neither may remain.
	bad := append(migrations(), migration{version: SchemaVersion() + 1, name: "broken",
		up: `CREATE TABLE half (x INTEGER); INSERT INTO no_such_table VALUES (1);`})
	if s, err := open(ctx, path, bad); err == nil {
		s.Close()
		t.Fatal("open with a broken migration succeeded")
	}
	s = openTest(t, path)
	if d := cmp.Diff(wantMigrations(migrations()), appliedMigrations(t, s)); d != "" {
		t.Errorf("schema_migrations (-want +got):\n%s", d)
	}
	var n int
	if err := s.r.QueryRowContext(ctx, `SELECT COUNT(*) FROM sqlite_schema WHERE name = 'half'`).Scan(&n); err != nil || n != 0 {
		t.Errorf("table of the failed migration: count=%d err=%v, want 0", n, err)
	}
}

func TestConcurrentOpenMigratesOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rubick.db")
	var wg sync.WaitGroup
	stores := make([]*Store, 4)
	errs := make([]error, len(stores))
	for i := range stores {
		wg.Go(func() { stores[i], errs[i] = Open(context.Background(), path) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Open %d: %v", i, err)
		}
		defer stores[i].Close()
	}
	if d := cmp.Diff(wantMigrations(migrations()), appliedMigrations(t, stores[0])); d != "" {
		t.Errorf("schema_migrations (-want +got):\n%s", d)
	}
}

// olderDB creates a database at path at schema version v, as an older
// rubick left it: a Store cannot open one (its statements need the newest
// schema).
func olderDB(t *testing.T, path string, v int) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite3", path)
	if err != nil {
		t.Fatal(err)
	}
	if err := migrate(context.Background(), db, migrations()[:v], time.Now, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	return db
}

// migratedFrom opens, at the newest schema, a database an older rubick
// left at schema version v holding the rows the SQL statements rows add.
func migratedFrom(t *testing.T, v int, rows string) *Store {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rubick.db")
	db := olderDB(t, path, v)
	if _, err := db.ExecContext(context.Background(), rows); err != nil {
		t.Fatal(err)
	}
	db.Close()
	return openTest(t, path)
}

// A fit stored before k_3d existed reads back with k_3d = 1: it priced 3D
// plans as if at 1.
func TestMigrationV3KeepsFits(t *testing.T) {
	ctx := context.Background()
	s := migratedFrom(t, 2, `
		INSERT INTO model_types(name, spec, created_ns, updated_ns) VALUES ('gpt2', '{}', 1, 1);
		INSERT INTO fits(model_type, k_bwd, k_sync, k_opt, k_opt_off, k_off, k_swap, k_const,
			rmsle, mape_pct, samples, pinned, params_source, origin, created_ns, current)
		VALUES ('gpt2', 2, 1.5, 0.1, 4, 1, 2, 0.01, 0.05, 4.5, 7, '[]', '', 'profile', 5, 1)`)
	got, err := s.CurrentFit(ctx, "gpt2")
	if err != nil {
		t.Fatal(err)
	}
	want := model.Params{KBwd: 2, KSync: 1.5, KOpt: 0.1, KOptOff: 4, KOff: 1, KSwap: 2, KConst: 0.01, K3D: 1}
	if d := cmp.Diff(want, got.Params); d != "" {
		t.Errorf("fit after migrating (-want +got):\n%s", d)
	}
}

// A database written before samples had an iteration column keeps its
// samples, which read back with the iteration unknown.
func TestMigrationV2KeepsSamples(t *testing.T) {
	ctx := context.Background()
	s := migratedFrom(t, 1, `
		INSERT INTO model_types(name, spec, created_ns, updated_ns) VALUES ('gpt2', '{}', 1, 1);
		INSERT INTO samples(model_type, dp, tp, pp, micro_batch, accum, zero, offload, checkpoint, placement,
			gpus, cpus, host_mem_gb, iter_s, fwd_s, cc_s, opt_s, source_job, source, created_ns)
		VALUES ('gpt2', 8, 1, 1, 2, 4, 1, 0, 0, '8', 8, 64, 100, 1.5, 0, 0, 0, 12, 'online', 5)`)
	got, err := s.JobSamples(ctx, 12)
	if err != nil {
		t.Fatal(err)
	}
	want := []StoredSample{{ID: 1, ModelType: "gpt2", Sample: sample(8, 1, 1, model.Placement{8}, 1.5),
		SourceJob: 12, Source: SourceOnline, Created: time.Unix(0, 5).UTC(), Iteration: -1}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("samples after migrating (-want +got):\n%s", d)
	}
}

// Jobs stored under their estimator's name ("gpt2@gb64") get their model
// type back; other names stay as they are.
func TestMigrationV6ModelTypes(t *testing.T) {
	ctx := context.Background()
	s := migratedFrom(t, 5, `
		INSERT INTO jobs(job_id, model_type, class, tenant, state, first_seen_ns, updated_ns) VALUES
			(1, 'gpt2@gb64', 'best-effort', '', 'RUNNING', 1, 1),
			(2, 'gpt2', 'best-effort', '', 'RUNNING', 1, 1),
			(3, 'my@gbnet', 'best-effort', '', 'RUNNING', 1, 1),
			(4, 'x@gb12y', 'best-effort', '', 'RUNNING', 1, 1),
			(5, NULL, 'best-effort', '', 'PENDING', 1, 1),
			(6, 't5@gb0', 'best-effort', '', 'PENDING', 1, 1),
			(7, 'llama7@gb1024', 'guaranteed', 'physics', 'COMPLETED', 1, 1)`)
	got := map[int64]string{}
	for id := int64(1); id <= 7; id++ {
		j, err := s.Job(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		got[id] = j.ModelType
	}
	want := map[int64]string{1: "gpt2", 2: "gpt2", 3: "my@gbnet", 4: "x@gb12y", 5: "", 6: "t5@gb0", 7: "llama7"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("model types after migrating (-want +got):\n%s", d)
	}
}

// A user's launch limits stored under an estimator's name ("gpt2@gb64")
// stand for their next job of the model type: the newest report of those
// that share the name after the migration stays.
func TestMigrationV15LaunchLimits(t *testing.T) {
	ctx := context.Background()
	s := migratedFrom(t, 14, `
		INSERT INTO jobs(job_id, model_type, class, tenant, state, first_seen_ns, updated_ns) VALUES
			(1, 'gpt2', 'best-effort', '', 'COMPLETED', 1, 1), (2, 'gpt2', 'best-effort', '', 'COMPLETED', 1, 1),
			(3, 'gpt2', 'best-effort', '', 'COMPLETED', 1, 1), (4, 'gpt2', 'best-effort', '', 'COMPLETED', 1, 1),
			(5, 'gpt2', 'best-effort', '', 'COMPLETED', 1, 1), (6, 'gpt2', 'best-effort', '', 'COMPLETED', 1, 1),
			(7, 'my@gbnet', 'best-effort', '', 'COMPLETED', 1, 1);
		INSERT INTO launch_limits(user_name, model_type, cannot, global_batch, job_id, updated_ns) VALUES
			('alice', 'gpt2@gb64', 'offload', 64, 1, 10),
			('bob', 'gpt2', '', 16, 2, 20), ('bob', 'gpt2@gb64', 'offload', 64, 3, 10),
			('carol', 'gpt2', '', 16, 4, 5), ('carol', 'gpt2@gb64', 'offload', 64, 5, 10), ('carol', 'gpt2@gb128', 'tp', 128, 6, 30),
			('dave', 'my@gbnet', 'pp', 8, 7, 10)`)
	var keys []LaunchKey
	for i, u := range []string{"alice", "bob", "carol", "dave"} {
		keys = append(keys, LaunchKey{ID: int64(100 + i), User: u, ModelType: "gpt2"})
	}
	keys = append(keys, LaunchKey{ID: 104, User: "dave", ModelType: "my@gbnet"})
	got, err := s.LaunchLimits(ctx, keys)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int64]Launch{
		100: {Cannot: model.FeatureOffload, GlobalBatch: 64},
		101: {GlobalBatch: 16},
		102: {Cannot: model.FeatureTP, GlobalBatch: 128},
		104: {Cannot: model.FeaturePP, GlobalBatch: 8},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("launch limits after migrating (-want +got):\n%s", d)
	}
}

// Jobs stored before schema 7 read back with no wait, and take one.
func TestMigrationV7Deferred(t *testing.T) {
	ctx := context.Background()
	s := migratedFrom(t, 6, `
		INSERT INTO jobs(job_id, model_type, class, tenant, state, submitted_ns, first_seen_ns, updated_ns) VALUES
			(1, NULL, 'best-effort', '', 'PENDING', 5, 1, 1)`)
	j, err := s.Job(ctx, 1)
	if err != nil || !j.Deferred.IsZero() || !j.Submitted.Equal(time.Unix(0, 5).UTC()) {
		t.Fatalf("job 1 after migrating: %+v, %v; want no wait, its submit time kept", j, err)
	}
	waited := time.Unix(1800000000, 0).UTC()
	j.Deferred = waited
	if err := s.UpsertJob(ctx, j); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Deferred(ctx, []int64{1}); err != nil || !got[1].Equal(waited) {
		t.Errorf("Deferred = %v, %v; want job 1 at %v", got, err, waited)
	}
}

// Told WithoutMigrating, Open leaves an older store as it is and refuses
// it, so that the older rubickd still running opens it; a store at this
// binary's version opens, one at a newer version is refused.
func TestOpenWithoutMigrating(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	older := filepath.Join(dir, "older.db")
	olderDB(t, older, SchemaVersion()-1).Close()
	newer := filepath.Join(dir, "newer.db")
	s, err := open(ctx, newer, append(migrations(), migration{version: SchemaVersion() + 1, name: "future", up: `CREATE TABLE future (x INTEGER)`}))
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	current := filepath.Join(dir, "current.db")
	openTest(t, current)

	for name, tc := range map[string]struct {
		path string
		is   error
		say  string
	}{
		"older":   {path: older, is: ErrSchemaTooOld, say: fmt.Sprintf("database is at version %d, this binary reads version %d", SchemaVersion()-1, SchemaVersion())},
		"newer":   {path: newer, is: ErrSchemaTooNew, say: fmt.Sprintf("database is at version %d", SchemaVersion()+1)},
		"current": {path: current},
	} {
		t.Run(name, func(t *testing.T) {
			before, err := os.ReadFile(tc.path)
			if err != nil {
				t.Fatal(err)
			}
			s, err := Open(ctx, tc.path, WithoutMigrating())
			if err == nil {
				s.Close()
			}
			if (tc.is == nil) != (err == nil) || (tc.is != nil && !errors.Is(err, tc.is)) || !strings.Contains(fmt.Sprint(err), tc.say) {
				t.Fatalf("Open(WithoutMigrating) = %v, want %v saying %q", err, tc.is, tc.say)
			}
			if tc.is == nil {
				return
			}
			if after, _ := os.ReadFile(tc.path); !bytes.Equal(before, after) {
				t.Errorf("refused store changed: %d bytes, was %d", len(after), len(before))
			}
		})
	}
	// The older store is still one its own rubickd opens.
	db, err := sql.Open("sqlite3", older)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var v int
	if err := db.QueryRowContext(ctx, `SELECT MAX(version) FROM schema_migrations`).Scan(&v); err != nil || v != SchemaVersion()-1 {
		t.Errorf("older store's version = %d, %v; want %d", v, err, SchemaVersion()-1)
	}
}

// Actions stored before schema 10 read back with no tag and not awaiting
// one, and can be marked as awaiting it.
func TestMigrationV10Actions(t *testing.T) {
	ctx := context.Background()
	s := migratedFrom(t, 9, `
		INSERT INTO jobs(job_id, model_type, class, tenant, state, first_seen_ns, updated_ns) VALUES
			(1, NULL, 'best-effort', '', 'PENDING', 1, 1);
		INSERT INTO plan_history(job_id, kind, cpus, host_mem_gb, decided_ns, applied_ns, result, error) VALUES
			(1, 'preempt', 0, 0, 2, 3, 'failed', 'exit status 1')`)
	want := []Action{{ID: 1, JobID: 1, Kind: "preempt", DecidedAt: time.Unix(0, 2).UTC(), AppliedAt: time.Unix(0, 3).UTC(),
		Result: ResultFailed, Error: "exit status 1"}}
	got, err := s.PlanHistory(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("plan history after migrating (-want +got):\n%s", d)
	}
	if err := s.AwaitAck(ctx, 1, ""); err != nil {
		t.Fatal(err)
	}
	want[0].AwaitsAck = true
	if got, err := s.Unacked(ctx); err != nil || !cmp.Equal(want, got) {
		t.Errorf("Unacked = %+v, %v; want %+v", got, err, want)
	}
}

// Preemptions and restarts an older rubickd left unresolved (pending, or
// awaiting their tag) read back with RequeueUnknown: their requeue, if
// any, went unrecorded. Resolved ones, and other kinds, have none.
func TestMigrationV16RequeueCount(t *testing.T) {
	ctx := context.Background()
	s := migratedFrom(t, 15, `
		INSERT INTO jobs(job_id, model_type, class, tenant, state, first_seen_ns, updated_ns) VALUES
			(1, NULL, 'best-effort', '', 'PENDING', 1, 1);
		INSERT INTO plan_history(job_id, kind, cpus, host_mem_gb, decided_ns, applied_ns, result, error, awaits_ack) VALUES
			(1, 'preempt', 0, 0, 2, NULL, NULL, '', 0),
			(1, 'restart', 0, 0, 3, 4, 'failed', 'exit status 1', 1),
			(1, 'restart', 0, 0, 5, 6, 'ok', '', 0),
			(1, 'start', 0, 0, 7, NULL, NULL, '', 0)`)
	got, err := s.PlanHistory(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	counts := map[int64]int{}
	for _, a := range got {
		counts[a.ID] = a.RequeueCount
	}
	if d := cmp.Diff(map[int64]int{1: RequeueUnknown, 2: RequeueUnknown, 3: 0, 4: 0}, counts); d != "" {
		t.Errorf("requeue counts after migrating (-want +got):\n%s", d)
	}
}

// A store at schema 11 takes the profiling phases jobs report over once
// migrated, and a second open migrates nothing and keeps them.
func TestMigrationV12Phases(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "rubick.db")
	db := olderDB(t, path, 11)
	if _, err := db.ExecContext(ctx, `
		INSERT INTO jobs(job_id, model_type, class, tenant, state, first_seen_ns, updated_ns) VALUES
			(1, 'gpt13b', 'best-effort', '', 'RUNNING', 1, 1)`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	s := openTest(t, path)
	if err := s.SetJobLaunch(ctx, 1, "alice", Launch{Profiled: "gpt13b"}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = openTest(t, path)
	if d := cmp.Diff(wantMigrations(migrations()), appliedMigrations(t, s)); d != "" {
		t.Errorf("schema_migrations (-want +got):\n%s", d)
	}
	got, err := s.PendingPhases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(map[string][]int64{"gpt13b": {1}}, phaseJobs(got)); d != "" {
		t.Errorf("PendingPhases after migrating (-want +got):\n%s", d)
	}
}
