package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/rubick-sched/rubick/model"
)

// StoredSample is a profiling sample with where and when it was measured.
type StoredSample struct {
	ID        int64
	ModelType string
	model.Sample
	SourceJob int64 // Slurm job that measured it; 0 when none did
	Source    Source
	Created   time.Time
	// Iteration is the trainer's iteration counter at the measurement, -1
	// when not reported (profile and artifact samples).
	Iteration int
}

// AddSamples stores samples of modelType measured by the Slurm job
// sourceJob (0 for none) in one transaction: either all are stored or none.
// It rejects the whole batch, naming the sample, the field and the value,
// when any sample is malformed, and wraps ErrNotFound when the model type is
// not stored.
func (s *Store) AddSamples(ctx context.Context, modelType string, samples []model.Sample, sourceJob int64, src Source) error {
	return s.addSamples(ctx, modelType, samples, sourceJob, src, -1, 0)
}

// AddReported stores one sample a running job reported, with the trainer's
// iteration counter at the measurement (>= 0), which measuring a
// checkpoint-restart's cost needs.
func (s *Store) AddReported(ctx context.Context, modelType string, smp model.Sample, sourceJob int64, iteration int) error {
	if iteration < 0 {
		return fmt.Errorf("store: add samples for %q: %w: iteration=%d must be >= 0", modelType, ErrInvalid, iteration)
	}
	return s.AddOnline(ctx, modelType, smp, sourceJob, iteration, 0)
}

// ErrTooManyConfigs is returned for a reported sample of a configuration
// its job has not reported before when the job has already reported as
// many configurations as it may.
var ErrTooManyConfigs = errors.New("too many configurations reported by one job")

// AddOnline stores one sample the running job sourceJob reported, with the
// trainer's iteration counter (-1 when the report has none). With
// maxConfigs > 0, a sample of a configuration (plan, placement, CPUs) the
// job has not reported before is refused with ErrTooManyConfigs once the
// job has reported maxConfigs configurations: retention keeps a number of
// samples per job and configuration, so only this bounds what one job can
// make the store (and every refit of its model type) hold. The check and
// the insert share one write transaction, so concurrent reports of one
// job cannot pass the bound together.
func (s *Store) AddOnline(ctx context.Context, modelType string, smp model.Sample, sourceJob int64, iteration, maxConfigs int) error {
	if iteration < -1 {
		return fmt.Errorf("store: add samples for %q: %w: iteration=%d must be >= 0", modelType, ErrInvalid, iteration)
	}
	if sourceJob <= 0 {
		return fmt.Errorf("store: add samples for %q: %w: source_job=%d must be > 0", modelType, ErrInvalid, sourceJob)
	}
	if maxConfigs < 0 {
		return fmt.Errorf("store: add samples for %q: %w: max_configs=%d must be >= 0", modelType, ErrInvalid, maxConfigs)
	}
	return s.addSamples(ctx, modelType, []model.Sample{smp}, sourceJob, SourceOnline, iteration, maxConfigs)
}

// configWhere selects a job's online samples of one configuration; its
// columns are those Prune partitions by.
const configWhere = `source_job = ? AND source = ? AND model_type = ? AND dp = ? AND tp = ? AND pp = ?
	AND micro_batch = ? AND accum = ? AND zero = ? AND offload = ? AND checkpoint = ? AND placement = ? AND cpus = ?`

// checkConfigs refuses smp when it is a configuration new to job and the
// job has reported maxConfigs configurations already.
func checkConfigs(ctx context.Context, tx *sql.Tx, modelType string, smp model.Sample, job int64, maxConfigs int) error {
	p, r := smp.Plan, smp.Resources
	var one int
	// The newest rows come first through samples_by_job, and a job reports
	// mostly the configuration it runs, so this stops at once.
	err := tx.QueryRowContext(ctx, `SELECT 1 FROM samples WHERE `+configWhere+` ORDER BY id DESC LIMIT 1`,
		job, string(SourceOnline), modelType, p.DP, p.TP, p.PP, p.MicroBatch, p.Accum, p.ZeRO,
		boolInt(p.Offload), boolInt(p.Checkpoint), encodePlacement(r.Placement), r.CPUs).Scan(&one)
	if err == nil {
		return nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	var n int
	if err := tx.QueryRowContext(ctx, `
		SELECT COUNT(*) FROM (SELECT DISTINCT model_type, dp, tp, pp, micro_batch, accum, zero, offload,
			checkpoint, placement, cpus FROM samples WHERE source_job = ? AND source = ?)`,
		job, string(SourceOnline)).Scan(&n); err != nil {
		return err
	}
	if n >= maxConfigs {
		return fmt.Errorf("%w: job %d has reported %d configurations, the most one job may (%s on %s, cpus=%d would be one more)",
			ErrTooManyConfigs, job, n, p, r.Placement, r.CPUs)
	}
	return nil
}

func (s *Store) addSamples(ctx context.Context, modelType string, samples []model.Sample, sourceJob int64, src Source, iteration, maxConfigs int) error {
	if err := checkSamples(modelType, samples, sourceJob, src); err != nil {
		return fmt.Errorf("store: add samples for %q: %w", modelType, err)
	}
	if len(samples) == 0 {
		return nil
	}
	iter := sql.NullInt64{Int64: int64(iteration), Valid: iteration >= 0}
	job := sql.NullInt64{Int64: sourceJob, Valid: sourceJob != 0}
	now := s.now().UnixNano()
	err := s.write(ctx, func(tx *sql.Tx) error {
		if err := modelTypeExists(ctx, tx, modelType); err != nil {
			return err
		}
		st, err := tx.PrepareContext(ctx, `
			INSERT INTO samples(model_type, dp, tp, pp, micro_batch, accum, zero, offload, checkpoint,
				placement, gpus, cpus, host_mem_gb, iter_s, fwd_s, cc_s, opt_s, source_job, source, created_ns, iteration)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
		if err != nil {
			return err
		}
		defer st.Close()
		for i, smp := range samples {
			if maxConfigs > 0 {
				if err := checkConfigs(ctx, tx, modelType, smp, sourceJob, maxConfigs); err != nil {
					return fmt.Errorf("sample %d: %w", i, err)
				}
			}
			p, r := smp.Plan, smp.Resources
			if _, err := st.ExecContext(ctx, modelType, p.DP, p.TP, p.PP, p.MicroBatch, p.Accum, p.ZeRO,
				boolInt(p.Offload), boolInt(p.Checkpoint), encodePlacement(r.Placement), r.Placement.GPUs(),
				r.CPUs, r.HostMemGB, smp.IterS, smp.FwdS, smp.CCS, smp.OptS, job, string(src), now, iter); err != nil {
				return fmt.Errorf("sample %d: %w", i, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: add samples for %q: %w", modelType, err)
	}
	return nil
}

func checkSamples(modelType string, samples []model.Sample, sourceJob int64, src Source) error {
	if err := checkName("model_type", modelType); err != nil {
		return err
	}
	if err := checkName("source", string(src)); err != nil {
		return err
	}
	if sourceJob < 0 {
		return fmt.Errorf("%w: source_job=%d must be >= 0", ErrInvalid, sourceJob)
	}
	for i, smp := range samples {
		if err := checkSample(smp); err != nil {
			return fmt.Errorf("sample %d: %w", i, err)
		}
	}
	return nil
}

func checkSample(smp model.Sample) error {
	if err := checkPlan(smp.Plan, smp.Resources); err != nil {
		return err
	}
	if !finite(smp.IterS) || smp.IterS <= 0 {
		return fmt.Errorf("%w: iter_s=%v must be finite and > 0", ErrInvalid, smp.IterS)
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"fwd_s", smp.FwdS}, {"cc_s", smp.CCS}, {"opt_s", smp.OptS}} {
		if err := checkNonNeg(f.name, f.v); err != nil {
			return err
		}
	}
	return nil
}

// Samples returns every sample of modelType, oldest first.
func (s *Store) Samples(ctx context.Context, modelType string) ([]StoredSample, error) {
	out, err := s.samples(ctx, `model_type = ? ORDER BY id`, modelType)
	if err != nil {
		return nil, fmt.Errorf("store: samples of %q: %w", modelType, err)
	}
	return out, nil
}

// JobSamples returns every sample the Slurm job measured, oldest first.
func (s *Store) JobSamples(ctx context.Context, jobID int64) ([]StoredSample, error) {
	out, err := s.samples(ctx, `source_job = ? ORDER BY created_ns, id`, jobID)
	if err != nil {
		return nil, fmt.Errorf("store: samples of job %d: %w", jobID, err)
	}
	return out, nil
}

// maxVars bounds the ids in one IN list, under SQLite's limit on
// variables in a statement.
const maxVars = 500

// RecentJobSamples returns, for each of the Slurm jobs, the newest n
// samples it reported while running (source online), oldest first; one
// query per maxVars jobs, whatever the samples stored.
func (s *Store) RecentJobSamples(ctx context.Context, jobIDs []int64, n int) (map[int64][]StoredSample, error) {
	out := map[int64][]StoredSample{}
	for ids := range slices.Chunk(jobIDs, maxVars) {
		args := make([]any, 0, len(ids)+2)
		for _, id := range ids {
			args = append(args, id)
		}
		args = append(args, string(SourceOnline), n)
		rows, err := s.samples(ctx, `id IN (
			SELECT id FROM (
				SELECT id, ROW_NUMBER() OVER (PARTITION BY source_job ORDER BY created_ns DESC, id DESC) AS rn
				FROM samples WHERE source_job IN (?`+strings.Repeat(",?", len(ids)-1)+`) AND source = ?)
			WHERE rn <= ?)
			ORDER BY source_job, created_ns, id`, args...)
		if err != nil {
			return nil, fmt.Errorf("store: recent samples of %d jobs: %w", len(ids), err)
		}
		for _, r := range rows {
			out[r.SourceJob] = append(out[r.SourceJob], r)
		}
	}
	return out, nil
}

func (s *Store) samples(ctx context.Context, where string, args ...any) ([]StoredSample, error) {
	rows, err := s.r.QueryContext(ctx, `
		SELECT id, model_type, dp, tp, pp, micro_batch, accum, zero, offload, checkpoint, placement,
			cpus, host_mem_gb, iter_s, fwd_s, cc_s, opt_s, source_job, source, created_ns, iteration
		FROM samples WHERE `+where, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []StoredSample
	for rows.Next() {
		var ss StoredSample
		p, r := &ss.Plan, &ss.Resources
		var placement, src string
		var job, created, iter sql.NullInt64
		if err := rows.Scan(&ss.ID, &ss.ModelType, &p.DP, &p.TP, &p.PP, &p.MicroBatch, &p.Accum, &p.ZeRO, &p.Offload, &p.Checkpoint,
			&placement, &r.CPUs, &r.HostMemGB, &ss.IterS, &ss.FwdS, &ss.CCS, &ss.OptS, &job, &src, &created, &iter); err != nil {
			return nil, err
		}
		if r.Placement, err = decodePlacement(placement); err != nil {
			return nil, fmt.Errorf("sample %d: %w", ss.ID, err)
		}
		ss.SourceJob, ss.Source, ss.Created = job.Int64, Source(src), fromTimestamp(created)
		ss.Iteration = -1
		if iter.Valid {
			ss.Iteration = int(iter.Int64)
		}
		out = append(out, ss)
	}
	return out, rows.Err()
}
