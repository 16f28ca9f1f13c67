package sim

import (
	"cmp"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

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
	if _, err := Run(context.Background(), cfg, d, rows, fifo, nil); !errors.Is(err, ErrBadTrace) || !strings.Contains(err.Error(), "line 3: job gpt2-1: account is empty") {
		t.Errorf("a trace job without an account: err = %v, want one naming it", err)
	}
}

// priorityPolicy records each round's priorities and factors by model.
type priorityPolicy struct {
	policy.Policy
	seen []map[string]policy.Job
}

func (p *priorityPolicy) Decide(ctx context.Context, s *policy.Snapshot) (policy.Plan, error) {
	round := map[string]policy.Job{}
	for _, j := range s.Jobs {
		round[j.Model] = j
	}
	p.seen = append(p.seen, round)
	return p.Policy.Decide(ctx, s)
}

// With PriorityWeights a job carries Slurm's multifactor priority of its
// age, its account's fair-share factor and its size: bert (8 GPUs, one of
// the 8 nodes, 64 of 768 CPUs) submitted at 0 and, 10 minutes later, gpt2
// (16 GPUs, 2 nodes, 128 CPUs), weighed age 1000 over a 1-hour
// PriorityMaxAge, fair share 10000 and job size 1000.
func TestPriorityWeights(t *testing.T) {
	d := data(t)
	rows := []artifact.Job{
		{Name: "bert-0", SubmitS: 0, App: "bert", GPUs: 8, CPUs: 64, ExecPlan: "ga", Steps: 20000, Line: 2},
		{Name: "gpt2-1", SubmitS: 600, App: "gpt2", GPUs: 16, CPUs: 128, ExecPlan: "ga", Steps: 100, Line: 3},
	}
	cfg := DefaultConfig()
	cfg.FairShareAccounts = AccountsByModel
	cfg.PriorityWeights = PriorityWeights{Age: 1000, FairShare: 10000, JobSize: 1000}
	cfg.PriorityMaxAge = time.Hour
	pc := policy.DefaultConfig()
	pc.BestEffortOrder = policy.OrderPriority
	rubick, err := policy.New("rubick", pc)
	if err != nil {
		t.Fatal(err)
	}
	p := &priorityPolicy{Policy: rubick}
	if _, err := Run(context.Background(), cfg, d, rows, p, nil); err != nil {
		t.Fatal(err)
	}
	// First round, at 0: bert has no age, fair share 1 and size
	// (1/8 + 64/768) / 2.
	first := p.seen[0]["bert"]
	if first.Priority != 10104 || first.PriorityFactors != "fairshare 10000, jobsize 104" {
		t.Errorf("bert at 0: priority %v (%s), want 10104 (fairshare 10000, jobsize 104)", first.Priority, first.PriorityFactors)
	}
	// The first round with gpt2, submitted at 600 s: bert has aged 10
	// minutes, 167 of 1000, and used GPUs, so its factor is below gpt2's.
	for _, r := range p.seen {
		g, ok := r["gpt2"]
		b, hasBert := r["bert"]
		if !ok || !hasBert {
			continue
		}
		if !strings.HasPrefix(g.PriorityFactors, "fairshare 10000, jobsize 208") || !strings.HasPrefix(b.PriorityFactors, "age 167, fairshare 5000") {
			t.Errorf("the first round with both: bert %v (%s), gpt2 %v (%s)", b.Priority, b.PriorityFactors, g.Priority, g.PriorityFactors)
		}
		return
	}
	t.Fatalf("no round had both jobs")
}

func TestPriorityWeightsConfig(t *testing.T) {
	for name, tc := range map[string]struct {
		f    func(*Config)
		want string
	}{
		"negative":         {func(c *Config) { c.PriorityWeights.Age = -1 }, "PriorityWeights="},
		"age without age":  {func(c *Config) { c.PriorityWeights.Age, c.PriorityMaxAge = 1, 0 }, "PriorityMaxAge=0s must be > 0"},
		"fair share alone": {func(c *Config) { c.PriorityWeights.FairShare = 1 }, "PriorityWeights.FairShare=1 needs FairShareAccounts"},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := DefaultConfig()
			tc.f(&cfg)
			if err := cfg.Validate(); !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want ErrBadConfig naming %q", err, tc.want)
			}
		})
	}
}
