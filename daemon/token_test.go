package daemon

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/rubick-sched/rubick/slurm"
)

// expiryGauge reads rubick_slurm_token_expiry_timestamp_seconds as the
// endpoint serves it.
func expiryGauge(t *testing.T, m *Metrics) float64 {
	t.Helper()
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == "rubick_slurm_token_expiry_timestamp_seconds" {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatal("no rubick_slurm_token_expiry_timestamp_seconds")
	return 0
}

type claimingCluster struct {
	fakeCluster
	claims slurm.TokenClaims
	err    error
}

func (c *claimingCluster) TokenClaims() (slurm.TokenClaims, error) { return c.claims, c.err }

func TestWatchToken(t *testing.T) {
	now := time.Date(2026, 11, 25, 5, 0, 0, 0, time.UTC)
	c := &claimingCluster{claims: slurm.TokenClaims{User: "root", Expires: now.Add(30 * 24 * time.Hour)}}
	var logs bytes.Buffer
	d := &Daemon{deps: Deps{Cluster: c, Metrics: NewMetrics(), Logger: slog.New(slog.NewTextHandler(&logs, nil))}}
	warnings := func() int { return strings.Count(logs.String(), "slurmrestd token expires soon") }

	d.watchToken(now)
	if got := expiryGauge(t, d.deps.Metrics); got != float64(c.claims.Expires.Unix()) || warnings() != 0 {
		t.Fatalf("a month ahead: gauge %v, %d warnings; want its exp and none", got, warnings())
	}
	// Two days left: one warning, then none for an hour.
	c.claims.Expires = now.Add(48 * time.Hour)
	d.watchToken(now)
	d.watchToken(now.Add(59 * time.Minute))
	if warnings() != 1 || !strings.Contains(logs.String(), "left=48h0m0s") {
		t.Fatalf("two days left, twice within the hour: %d warnings, want 1 saying 48h left:\n%s", warnings(), logs.String())
	}
	d.watchToken(now.Add(time.Hour))
	if warnings() != 2 {
		t.Fatalf("an hour later: %d warnings, want 2", warnings())
	}
	// A rotation to a token without exp, or a token that is no JWT.
	for _, tc := range []struct {
		claims slurm.TokenClaims
		err    error
	}{{slurm.TokenClaims{User: "root"}, nil}, {slurm.TokenClaims{}, errors.New("not a JWT")}} {
		c.claims, c.err = tc.claims, tc.err
		d.watchToken(now.Add(3 * time.Hour))
		if got := expiryGauge(t, d.deps.Metrics); got != 0 || warnings() != 2 {
			t.Errorf("%+v %v: gauge %v, %d warnings; want 0 and no new one", tc.claims, tc.err, got, warnings())
		}
	}
	// A Cluster that cannot say leaves the gauge alone.
	d2 := &Daemon{deps: Deps{Cluster: &fakeCluster{}, Metrics: NewMetrics(), Logger: slog.New(slog.DiscardHandler)}}
	d2.watchToken(now)
}
