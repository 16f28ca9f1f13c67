package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/rubick-sched/rubick/model"
)

// Source says where a fit or a sample came from. Any short name is
// accepted; these are the ones rubick writes.
type Source string

// Sources rubick writes.
const (
	// SourceProfile is the profiling phase of a job of an unknown model type.
	SourceProfile Source = "profile"
	// SourceOnline is a running job's measured iterations, or a refit on them.
	SourceOnline Source = "online"
	// SourceArtifact is the paper artifact's data set.
	SourceArtifact Source = "artifact"
)

// ModelType is a stored model type.
type ModelType struct {
	Spec    model.Spec
	Created time.Time // first UpsertModelType
	Updated time.Time // latest UpsertModelType
}

// UpsertModelType stores spec under spec.Name, replacing the spec of an
// existing model type but keeping its creation time and its fits, the
// current one too: ReplaceSpec corrects a stored type's spec.
func (s *Store) UpsertModelType(ctx context.Context, spec model.Spec) error {
	blob, err := specJSON(spec)
	if err != nil {
		return fmt.Errorf("store: upsert model type %q: %w", spec.Name, err)
	}
	now := s.now().UnixNano()
	err = s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `
			INSERT INTO model_types(name, spec, created_ns, updated_ns) VALUES (?, ?, ?, ?)
			ON CONFLICT(name) DO UPDATE SET spec = excluded.spec, updated_ns = excluded.updated_ns`,
			spec.Name, string(blob), now, now)
		return err
	})
	if err != nil {
		return fmt.Errorf("store: upsert model type %q: %w", spec.Name, err)
	}
	return nil
}

// specJSON is spec as stored, or an error wrapping ErrInvalid that names
// the field at fault.
func specJSON(spec model.Spec) ([]byte, error) {
	if err := spec.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := checkName("spec.name", spec.Name); err != nil {
		return nil, err
	}
	return json.Marshal(spec)
}

// ReplacedSpec is a spec ReplaceSpec replaced.
type ReplacedSpec struct {
	Spec model.Spec
	// FitID is the fit that was current under it; 0: none.
	FitID    int64
	Replaced time.Time
}

// ReplaceSpec stores spec as the spec of the model type spec.Name and
// leaves the type without a current fit: its fits were made against the
// old spec (its forward time, layers, heads...) and would misprice its
// jobs under the new one. Every fit and sample is kept, samples being
// measurements that hold whatever the spec; so is the old spec, with the
// fit that was current under it (ReplacedSpecs). It returns the spec it
// replaced; a spec equal to it changes nothing. It wraps ErrNotFound for a
// type the store lacks and ErrInvalid for a spec UpsertModelType refuses.
func (s *Store) ReplaceSpec(ctx context.Context, spec model.Spec) (model.Spec, error) {
	blob, err := specJSON(spec)
	if err != nil {
		return model.Spec{}, fmt.Errorf("store: replace spec of %q: %w", spec.Name, err)
	}
	now := s.now().UnixNano()
	var old model.Spec
	err = s.write(ctx, func(tx *sql.Tx) error {
		var stored string
		err := tx.QueryRowContext(ctx, `SELECT spec FROM model_types WHERE name = ?`, spec.Name).Scan(&stored)
		if errors.Is(err, sql.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		if err := json.Unmarshal([]byte(stored), &old); err != nil {
			return fmt.Errorf("stored spec: %w", err)
		}
		if old == spec {
			return nil
		}
		var fit sql.NullInt64
		err = tx.QueryRowContext(ctx, `SELECT id FROM fits WHERE model_type = ? AND current = 1`, spec.Name).Scan(&fit)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO replaced_specs(model_type, spec, fit_id, replaced_ns) VALUES (?, ?, ?, ?)`,
			spec.Name, stored, fit, now); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE fits SET current = 0 WHERE model_type = ? AND current = 1`, spec.Name); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `UPDATE model_types SET spec = ?, updated_ns = ? WHERE name = ?`, string(blob), now, spec.Name)
		return err
	})
	if err != nil {
		return model.Spec{}, fmt.Errorf("store: replace spec of %q: %w", spec.Name, err)
	}
	return old, nil
}

// ReplacedSpecs returns the specs ReplaceSpec replaced of modelType,
// oldest first.
func (s *Store) ReplacedSpecs(ctx context.Context, modelType string) ([]ReplacedSpec, error) {
	rows, err := s.r.QueryContext(ctx,
		`SELECT spec, fit_id, replaced_ns FROM replaced_specs WHERE model_type = ? ORDER BY id`, modelType)
	if err != nil {
		return nil, fmt.Errorf("store: replaced specs of %q: %w", modelType, err)
	}
	defer rows.Close()
	var out []ReplacedSpec
	for rows.Next() {
		var blob string
		var fit, replaced sql.NullInt64
		if err := rows.Scan(&blob, &fit, &replaced); err != nil {
			return nil, fmt.Errorf("store: replaced specs of %q: %w", modelType, err)
		}
		r := ReplacedSpec{FitID: fit.Int64, Replaced: fromTimestamp(replaced)}
		if err := json.Unmarshal([]byte(blob), &r.Spec); err != nil {
			return nil, fmt.Errorf("store: replaced specs of %q: stored spec: %w", modelType, err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: replaced specs of %q: %w", modelType, err)
	}
	return out, nil
}

// ModelType returns the model type called name, or an error wrapping
// ErrNotFound.
func (s *Store) ModelType(ctx context.Context, name string) (ModelType, error) {
	row := s.r.QueryRowContext(ctx, `SELECT spec, created_ns, updated_ns FROM model_types WHERE name = ?`, name)
	mt, err := scanModelType(row)
	if errors.Is(err, sql.ErrNoRows) {
		return ModelType{}, fmt.Errorf("store: model type %q: %w", name, ErrNotFound)
	}
	if err != nil {
		return ModelType{}, fmt.Errorf("store: model type %q: %w", name, err)
	}
	return mt, nil
}

// ModelTypes returns every model type, ordered by name.
func (s *Store) ModelTypes(ctx context.Context) ([]ModelType, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT spec, created_ns, updated_ns FROM model_types ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("store: model types: %w", err)
	}
	defer rows.Close()
	var out []ModelType
	for rows.Next() {
		mt, err := scanModelType(rows)
		if err != nil {
			return nil, fmt.Errorf("store: model types: %w", err)
		}
		out = append(out, mt)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: model types: %w", err)
	}
	return out, nil
}

type scanner interface{ Scan(dest ...any) error }

func scanModelType(sc scanner) (ModelType, error) {
	var blob string
	var created, updated sql.NullInt64
	if err := sc.Scan(&blob, &created, &updated); err != nil {
		return ModelType{}, err
	}
	var mt ModelType
	if err := json.Unmarshal([]byte(blob), &mt.Spec); err != nil {
		return ModelType{}, fmt.Errorf("stored spec: %w", err)
	}
	mt.Created, mt.Updated = fromTimestamp(created), fromTimestamp(updated)
	return mt, nil
}

// Fit is a stored fit of a model type's parameters.
type Fit struct {
	ID        int64
	ModelType string
	model.FitResult
	// Origin says how the fit was made; FitResult.Source, promoted, says
	// whose samples its parameters come from when not the model type's own.
	Origin  Source
	Created time.Time
	// Current marks the one fit per model type that jobs of that type use.
	Current bool
}

// Promotion says whether a fit AddFitAs stores becomes the current fit.
type Promotion int

const (
	// PromoteIfBetter makes it current when the model type has none or when
	// its RMSLE is strictly lower than the current fit's (AddFit).
	PromoteIfBetter Promotion = iota
	// PromoteAlways makes it current: the caller has compared the fits on
	// the same evidence (an online refit over more samples has a higher
	// RMSLE and may still be the better model).
	PromoteAlways
	// PromoteNever keeps it as a candidate unless the type has no fit.
	PromoteNever
)

// AddFit stores r as a new fit of modelType and returns it with its ID. It
// becomes the current fit only when the model type has none or when its
// RMSLE is strictly lower than the current fit's: a worse fit never replaces
// a better one silently. AddFitAs lets a caller that compared the fits on
// the same samples decide.
func (s *Store) AddFit(ctx context.Context, modelType string, r model.FitResult, src Source) (Fit, error) {
	return s.AddFitAs(ctx, modelType, r, src, PromoteIfBetter)
}

// AddFitAs is AddFit with the promotion rule given: storing the fit and
// making it current are one transaction. A model type without a fit always
// takes the new one.
func (s *Store) AddFitAs(ctx context.Context, modelType string, r model.FitResult, src Source, how Promotion) (Fit, error) {
	if how < PromoteIfBetter || how > PromoteNever {
		return Fit{}, fmt.Errorf("store: add fit for %q: %w: promotion=%d", modelType, ErrInvalid, how)
	}
	if err := checkFit(modelType, r, src); err != nil {
		return Fit{}, fmt.Errorf("store: add fit for %q: %w", modelType, err)
	}
	pinned, err := json.Marshal(r.Pinned)
	if err != nil {
		return Fit{}, fmt.Errorf("store: add fit for %q: %w", modelType, err)
	}
	if r.Pinned == nil {
		pinned = []byte("[]")
	}
	r.Params = r.Params.Normalized()
	f := Fit{ModelType: modelType, FitResult: r, Origin: src, Created: s.now().UTC()}
	err = s.write(ctx, func(tx *sql.Tx) error {
		if err := modelTypeExists(ctx, tx, modelType); err != nil {
			return err
		}
		var best sql.NullFloat64
		if err := tx.QueryRowContext(ctx,
			`SELECT MIN(rmsle) FROM fits WHERE model_type = ? AND current = 1`, modelType).Scan(&best); err != nil {
			return err
		}
		switch how {
		case PromoteAlways:
			f.Current = true
		case PromoteNever:
			f.Current = !best.Valid
		default:
			f.Current = !best.Valid || r.RMSLE < best.Float64
		}
		if f.Current {
			if _, err := tx.ExecContext(ctx,
				`UPDATE fits SET current = 0 WHERE model_type = ? AND current = 1`, modelType); err != nil {
				return err
			}
		}
		p := r.Params
		res, err := tx.ExecContext(ctx, `
			INSERT INTO fits(model_type, k_bwd, k_sync, k_opt, k_opt_off, k_off, k_swap, k_const, k_3d,
				rmsle, mape_pct, samples, pinned, params_source, origin, created_ns, current)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			modelType, p.KBwd, p.KSync, p.KOpt, p.KOptOff, p.KOff, p.KSwap, p.KConst, p.K3D,
			r.RMSLE, r.MAPE, r.Samples, string(pinned), r.Source, string(src), f.Created.UnixNano(), boolInt(f.Current))
		if err != nil {
			return err
		}
		f.ID, err = res.LastInsertId()
		return err
	})
	if err != nil {
		return Fit{}, fmt.Errorf("store: add fit for %q: %w", modelType, err)
	}
	return f, nil
}

func checkFit(modelType string, r model.FitResult, src Source) error {
	if err := checkName("model_type", modelType); err != nil {
		return err
	}
	if err := checkName("origin", string(src)); err != nil {
		return err
	}
	if len(r.Source) > maxName {
		return fmt.Errorf("%w: source=%q is longer than %d characters", ErrInvalid, r.Source, maxName)
	}
	if err := checkParams(r.Params); err != nil {
		return err
	}
	if err := checkNonNeg("rmsle", r.RMSLE); err != nil {
		return err
	}
	if err := checkNonNeg("mape_pct", r.MAPE); err != nil {
		return err
	}
	if r.Samples < 0 {
		return fmt.Errorf("%w: samples=%d must be >= 0", ErrInvalid, r.Samples)
	}
	return nil
}

func modelTypeExists(ctx context.Context, tx *sql.Tx, name string) error {
	var one int
	err := tx.QueryRowContext(ctx, `SELECT 1 FROM model_types WHERE name = ?`, name).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("model type %q: %w", name, ErrNotFound)
	}
	return err
}

// PromoteFit makes the fit with the given ID the current fit of its model
// type, whatever its error. It wraps ErrNotFound when no such fit exists.
func (s *Store) PromoteFit(ctx context.Context, id int64) error {
	err := s.write(ctx, func(tx *sql.Tx) error {
		var mt string
		err := tx.QueryRowContext(ctx, `SELECT model_type FROM fits WHERE id = ?`, id).Scan(&mt)
		if errors.Is(err, sql.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		// Clear first: the unique index on current fits allows no overlap.
		if _, err := tx.ExecContext(ctx, `UPDATE fits SET current = 0 WHERE model_type = ? AND current = 1`, mt); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `UPDATE fits SET current = 1 WHERE id = ?`, id)
		return err
	})
	if err != nil {
		return fmt.Errorf("store: promote fit %d: %w", id, err)
	}
	return nil
}

const fitColumns = `id, model_type, k_bwd, k_sync, k_opt, k_opt_off, k_off, k_swap, k_const, k_3d,
	rmsle, mape_pct, samples, pinned, params_source, origin, created_ns, current`

func scanFit(sc scanner) (Fit, error) {
	var f Fit
	var pinned, src string
	var created sql.NullInt64
	p := &f.Params
	if err := sc.Scan(&f.ID, &f.ModelType, &p.KBwd, &p.KSync, &p.KOpt, &p.KOptOff, &p.KOff, &p.KSwap, &p.KConst, &p.K3D,
		&f.RMSLE, &f.MAPE, &f.Samples, &pinned, &f.FitResult.Source, &src, &created, &f.Current); err != nil {
		return Fit{}, err
	}
	if err := json.Unmarshal([]byte(pinned), &f.Pinned); err != nil {
		return Fit{}, fmt.Errorf("stored pinned: %w", err)
	}
	if len(f.Pinned) == 0 {
		f.Pinned = nil
	}
	f.Origin, f.Created = Source(src), fromTimestamp(created)
	return f, nil
}

// CurrentFit returns the current fit of modelType. A job of a model type
// that has one reuses it, with no profiling and no refit. It wraps
// ErrNotFound when the model type has no fit.
func (s *Store) CurrentFit(ctx context.Context, modelType string) (Fit, error) {
	f, err := scanFit(s.currentFit.QueryRowContext(ctx, modelType))
	if errors.Is(err, sql.ErrNoRows) {
		return Fit{}, fmt.Errorf("store: current fit of %q: %w", modelType, ErrNotFound)
	}
	if err != nil {
		return Fit{}, fmt.Errorf("store: current fit of %q: %w", modelType, err)
	}
	return f, nil
}

// HasFit reports whether modelType has a current fit.
func (s *Store) HasFit(ctx context.Context, modelType string) (bool, error) {
	var n int
	if err := s.r.QueryRowContext(ctx,
		`SELECT COUNT(*) FROM fits WHERE model_type = ? AND current = 1`, modelType).Scan(&n); err != nil {
		return false, fmt.Errorf("store: has fit %q: %w", modelType, err)
	}
	return n > 0, nil
}

// Fits returns every fit of modelType, oldest first.
func (s *Store) Fits(ctx context.Context, modelType string) ([]Fit, error) {
	rows, err := s.r.QueryContext(ctx,
		`SELECT `+fitColumns+` FROM fits WHERE model_type = ? ORDER BY id`, modelType)
	if err != nil {
		return nil, fmt.Errorf("store: fits of %q: %w", modelType, err)
	}
	defer rows.Close()
	var out []Fit
	for rows.Next() {
		f, err := scanFit(rows)
		if err != nil {
			return nil, fmt.Errorf("store: fits of %q: %w", modelType, err)
		}
		out = append(out, f)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: fits of %q: %w", modelType, err)
	}
	return out, nil
}
