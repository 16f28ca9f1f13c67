package store

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rubick-sched/rubick/model"
)

// t0 is the first time the test clock returns.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// fakeClock returns t0, t0+1s, t0+2s, ... so every stored time is known.
type fakeClock struct {
	mu sync.Mutex
	n  int
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := t0.Add(time.Duration(c.n) * time.Second)
	c.n++
	return t
}

func openTest(t testing.TB, path string, opts ...Option) *Store {
	t.Helper()
	if path == "" {
		path = filepath.Join(t.TempDir(), "rubick.db")
	}
	c := &fakeClock{}
	s, err := Open(context.Background(), path, append([]Option{WithClock(c.now)}, opts...)...)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	// Open read the clock for the migrations; tests count from t0 after it.
	c.mu.Lock()
	c.n = 0
	c.mu.Unlock()
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func gpt2() model.Spec {
	return model.Spec{Name: "gpt2", Params: 1.5e9, Layers: 48, Hidden: 1600, Heads: 25,
		SeqLen: 1024, GlobalBatch: 64, ForwardMs: 812.5}
}

func sample(dp, tp, pp int, placement model.Placement, iter float64) model.Sample {
	return model.Sample{
		Plan:      model.Plan{DP: dp, TP: tp, PP: pp, MicroBatch: 2, Accum: 4, ZeRO: 1},
		Resources: model.Resources{Placement: placement, CPUs: 8 * placement.GPUs(), HostMemGB: 100},
		IterS:     iter,
	}
}

func TestOpenSetsPragmas(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, "")
	for _, db := range []struct {
		name string
		q    querier
		want map[string]string
	}{
		{"writer", s.w, map[string]string{"journal_mode": "wal", "foreign_keys": "1", "synchronous": "2", "busy_timeout": "5000", "query_only": "0"}},
		{"reader", s.r, map[string]string{"journal_mode": "wal", "foreign_keys": "1", "busy_timeout": "5000", "query_only": "1"}},
	} {
		got := map[string]string{}
		for p := range db.want {
			rows, err := db.q.QueryContext(ctx, "PRAGMA "+p)
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				var v string
				if err := rows.Scan(&v); err != nil {
					t.Fatal(err)
				}
				got[p] = v
			}
			rows.Close()
		}
		if d := cmp.Diff(db.want, got); d != "" {
			t.Errorf("%s pragmas (-want +got):\n%s", db.name, d)
		}
	}
}

func TestReaderCannotWrite(t *testing.T) {
	s := openTest(t, "")
	if _, err := s.r.ExecContext(context.Background(), `DELETE FROM jobs`); err == nil {
		t.Fatal("a reader connection accepted a write")
	}
}

func TestOpenRejects(t *testing.T) {
	dir := t.TempDir()
	for name, tc := range map[string]struct {
		path string
		opts []Option
	}{
		"empty path":     {path: ""},
		"memory":         {path: ":memory:"},
		"uri":            {path: "file:x.db"},
		"query in path":  {path: filepath.Join(dir, "a.db?mode=ro")},
		"no readers":     {path: filepath.Join(dir, "b.db"), opts: []Option{WithReaders(0)}},
		"bad sync":       {path: filepath.Join(dir, "c.db"), opts: []Option{WithSync("OFF")}},
		"nil clock":      {path: filepath.Join(dir, "d.db"), opts: []Option{WithClock(nil)}},
		"negative busy":  {path: filepath.Join(dir, "e.db"), opts: []Option{WithBusyTimeout(-time.Second)}},
		"missing folder": {path: filepath.Join(dir, "no", "such", "f.db")},
	} {
		t.Run(name, func(t *testing.T) {
			s, err := Open(context.Background(), tc.path, tc.opts...)
			if err == nil {
				s.Close()
				t.Fatalf("Open(%q) succeeded", tc.path)
			}
			if name != "missing folder" && !errors.Is(err, ErrInvalid) {
				t.Errorf("Open(%q) = %v, want ErrInvalid", tc.path, err)
			}
		})
	}
}

func TestReopenPersists(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "rubick.db")
	s, err := Open(ctx, path, WithClock((&fakeClock{}).now))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.UpsertModelType(ctx, gpt2()); err != nil {
		t.Fatal(err)
	}
	fit, err := s.AddFit(ctx, "gpt2", model.FitResult{Params: model.Params{KBwd: 2, KSync: 3}, RMSLE: 0.1, MAPE: 5, Samples: 7}, SourceProfile)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.AddSamples(ctx, "gpt2", []model.Sample{sample(8, 1, 1, model.Placement{8}, 1.5)}, 42, SourceOnline); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s2 := openTest(t, path)
	got, err := s2.CurrentFit(ctx, "gpt2")
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(fit, got); d != "" {
		t.Errorf("current fit after reopen (-want +got):\n%s", d)
	}
	smp, err := s2.Samples(ctx, "gpt2")
	if err != nil {
		t.Fatal(err)
	}
	if len(smp) != 1 || smp[0].SourceJob != 42 || smp[0].IterS != 1.5 {
		t.Errorf("samples after reopen = %+v, want one from job 42 with iter_s 1.5", smp)
	}
}

// TestOpenExisting: told WithExisting, Open refuses what is not a rubick
// store and leaves it byte for byte as it was; a store opens.
func TestOpenExisting(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	foreign := filepath.Join(dir, "foreign.db")
	db, err := sql.Open("sqlite3", foreign)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE t (x INTEGER); INSERT INTO t VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	empty, text := filepath.Join(dir, "empty.db"), filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(text, []byte(strings.Repeat("not a database\n", 100)), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{foreign, empty, text} {
		before, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		st, err := Open(ctx, path, WithExisting())
		if !errors.Is(err, ErrNotStore) || !strings.Contains(err.Error(), path) {
			t.Errorf("Open(%s, WithExisting) = %v, want ErrNotStore naming the file", filepath.Base(path), err)
		}
		if err == nil {
			st.Close()
		}
		after, _ := os.ReadFile(path)
		if !bytes.Equal(before, after) {
			t.Errorf("%s changed: %d bytes, was %d", filepath.Base(path), len(after), len(before))
		}
		for _, suffix := range []string{"-wal", "-shm", "-journal"} {
			if _, err := os.Stat(path + suffix); err == nil {
				t.Errorf("%s%s created", filepath.Base(path), suffix)
			}
		}
	}
	real := filepath.Join(dir, "rubick.db")
	st, err := Open(ctx, real)
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	st, err = Open(ctx, real, WithExisting())
	if err != nil {
		t.Fatalf("Open(a store, WithExisting) = %v", err)
	}
	st.Close()
}
