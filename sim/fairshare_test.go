package sim

import (
	"cmp"
	"context"
	"strings"
	"testing"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/rubick-sched/rubick/artifact"
	"github.com/rubick-sched/rubick/policy"
)

// Fair Tree's flat ranking: the least used account gets 1, ties share a
// rank, and usage decays by half every half-life.
func TestFairShareFactors(t *testing.T) {
	f := newFairShare([]string{"a", "b", "c", "d"}, 100)
	if diff := gocmp.Diff(map[string]float64{"a": 1, "b": 1, "c": 1, "d": 1}, f.factors()); diff != "" {
		t.Errorf("no usage (-want +got):\n%s", diff)
	}
	f.add(10, map[string]float64{"a": 300, "b": 100, "c": 100})
	// d unused ranks first (4/4); b and c tie (3/4); a, most used, 1/4.
	if diff := gocmp.Diff(map[string]float64{"a": 0.25, "b": 0.75, "c": 0.75, "d": 1}, f.factors()); diff != "" {
		t.Errorf("after usage (-want +got):\n%s", diff)
	}
	f.add(100, map[string]float64{"d": 500})
	want := map[string]float64{"a": 150, "b": 50, "c": 50, "d": 500}
	if diff := gocmp.Diff(want, f.usage, cmpopts.EquateApprox(0, 1e-9)); diff != "" {
		t.Errorf("usage after one half-life (-want +got):\n%s", diff)
	}
	if diff := gocmp.Diff(map[string]float64{"a": 0.5, "b": 1, "c": 1, "d": 0.25}, f.factors()); diff != "" {
		t.Errorf("after d's usage (-want +got):\n%s", diff)
	}
}

// factorPolicy records the fair-share factors each round's jobs carry, per
// model type.
type factorPolicy struct {
	policy.Policy
	seen []map[string]float64
}

func (p *factorPolicy) Decide(ctx context.Context, s *policy.Snapshot) (policy.Plan, error) {
	round := map[string]float64{}
	for _, j := range s.Jobs {
		round[j.Model] = j.FairShare
	}
	p.seen = append(p.seen, round)
	return p.Policy.Decide(ctx, s)
}

// A job carries its account's factor: 1 for both accounts until the
// first job has used GPUs, then the first account's falls below the
// second's, which has used none. Accounts are the model types, or the
// trace's column, which puts both jobs in one account: equal factors.
// Without accounts every factor is 0.
func TestFairShareAccounts(t *testing.T) {
	d := data(t)
	rows := []artifact.Job{
		{Name: "bert-0", SubmitS: 0, App: "bert", GPUs: 8, CPUs: 64, ExecPlan: "ga", Steps: 20000, Line: 2, Account: "physics"},
		{Name: "gpt2-1", SubmitS: 600, App: "gpt2", GPUs: 8, CPUs: 64, ExecPlan: "ga", Steps: 100, Line: 3, Account: "physics"},
	}
	for _, accounts := range []string{"", AccountsByModel, AccountsFromTrace} {
		t.Run(cmp.Or(accounts, "none"), func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.FairShareAccounts = accounts
			pc := policy.DefaultConfig()
			pc.BestEffortOrder = policy.OrderFairShare
			rubick, err := policy.New("rubick", pc)
			if err != nil {
				t.Fatal(err)
			}
			p := &factorPolicy{Policy: rubick}
			if _, err := Run(context.Background(), cfg, d, rows, p, nil); err != nil {
				t.Fatal(err)
			}
			first, later := p.seen[0], p.seen[len(p.seen)-1]
			if accounts == "" {
				if first["bert"] != 0 || later["bert"] != 0 || later["gpt2"] != 0 {
					t.Errorf("without accounts: factors %v, then %v; want 0", first, later)
				}
				return
			}
			if first["bert"] != 1 {
				t.Errorf("bert's factor before any usage %v, want 1", first["bert"])
			}
			both := 0
			for _, r := range p.seen[1:] {
				_, hasBert := r["bert"]
				if g, ok := r["gpt2"]; ok && hasBert {
					both++
					if sameAccount := accounts == AccountsFromTrace; sameAccount != (r["bert"] == g) || !sameAccount && !(r["bert"] < g) {
						t.Fatalf("a round with both jobs: factors %v; want bert's below gpt2's, or equal in one account", r)
					}
				}
			}
			if both == 0 {
				t.Fatalf("no round had both jobs: %v", p.seen)
			}
		})
	}
	// From the trace, every job needs an account.
	cfg := DefaultConfig()
	cfg.FairShareAccounts = AccountsFromTrace
	rows[1].Account = ""
	fifo, _ := policy.New("fifo", policy.DefaultConfig())
	if _, err := Run(context.Background(), cfg, d, rows, fifo, nil); err == nil || !strings.Contains(err.Error(), "job gpt2-1 (line 3): account is empty") {
		t.Errorf("a trace job without an account: err = %v, want one naming it", err)
	}
}
