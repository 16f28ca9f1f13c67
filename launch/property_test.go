package launch

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rubick-sched/rubick/model"
	"pgregory.net/rapid"
)

// propertyChecks is the number of generated (launch line, plan) pairs.
const propertyChecks = 10000

// unknownFlags are flags rubick must pass through untouched; the last ones
// look like rubick's but are not.
var unknownFlags = []string{"--lr", "--seed", "--data-path", "--log-interval", "--num-layers",
	"--tensor-model-parallel", "--micro-batch", "--save-interval", "--zero", "--deepspeed_mpi"}

// genPlan draws a plan the dialect can run.
func genPlan(t *rapid.T, d Dialect) model.Plan {
	p := model.Plan{
		DP: rapid.IntRange(1, 8).Draw(t, "dp"), TP: 1, PP: 1,
		MicroBatch: rapid.IntRange(1, 8).Draw(t, "mb"),
		Accum:      rapid.IntRange(1, 8).Draw(t, "accum"),
		ZeRO:       rapid.IntRange(0, 3).Draw(t, "zero"),
		Checkpoint: rapid.Bool().Draw(t, "gc"),
	}
	if d != DeepSpeed {
		p.TP = rapid.IntRange(1, 4).Draw(t, "tp")
		p.PP = rapid.IntRange(1, 4).Draw(t, "pp")
	}
	p.Offload = p.ZeRO > 0 && rapid.Bool().Draw(t, "offload")
	return p
}

// genLine draws a launch line of dialect d whose global batch, when it
// states one, is gb. It returns the line, its config file and the unknown
// tokens in order.
func genLine(t *rapid.T, d Dialect, gb int) ([]string, []byte, []string) {
	argv := []string{"python", "pretrain_gpt.py"}
	if d == DeepSpeed {
		argv = []string{"deepspeed", "train.py"}
	}
	var unknown []string
	add := func(name, value string) {
		if rapid.Bool().Draw(t, "inline") {
			argv = append(argv, name+"="+value)
		} else {
			argv = append(argv, name, value)
		}
	}
	ours := []flagSpec{fTP, fPP, fMB, fRecGran, fRecMethod, fRecLayers, fRecAct, fCkptAct, fDistOpt,
		fCPUOffload, fSave, fLoad, fZeroStage, fDSActCkpt}
	n := rapid.IntRange(0, 14).Draw(t, "flags")
	for range n {
		if rapid.IntRange(0, 2).Draw(t, "kind") == 0 {
			name := rapid.SampledFrom(unknownFlags).Draw(t, "unknown")
			v := strconv.Itoa(rapid.IntRange(0, 99).Draw(t, "value"))
			before := len(argv)
			add(name, v)
			unknown = append(unknown, argv[before:]...)
			continue
		}
		f := rapid.SampledFrom(ours).Draw(t, "ours")
		if d == DeepSpeed {
			continue // a plain DeepSpeed script has none of Megatron's flags
		}
		if !f.valued {
			argv = append(argv, f.names[0])
			continue
		}
		add(f.names[0], strconv.Itoa(rapid.IntRange(1, 64).Draw(t, "ours value")))
	}
	if d != DeepSpeed && rapid.Bool().Draw(t, "states gb") {
		add("--global-batch-size", strconv.Itoa(gb))
	}
	if d == Megatron {
		return argv, nil, unknown
	}
	argv = append(argv, "--deepspeed")
	add("--deepspeed_config", "ds.json")
	cfg := map[string]any{"steps_per_print": 10}
	if rapid.Bool().Draw(t, "config gb") {
		cfg["train_batch_size"] = gb
	}
	if rapid.Bool().Draw(t, "config mb") {
		cfg["train_micro_batch_size_per_gpu"] = rapid.IntRange(1, 64).Draw(t, "config mb value")
	}
	if rapid.Bool().Draw(t, "config zero") {
		cfg["zero_optimization"] = map[string]any{"stage": rapid.IntRange(0, 3).Draw(t, "stage"),
			"offload_optimizer": map[string]any{"device": "cpu"}, "offload_param": map[string]any{"device": "cpu"}}
	}
	if rapid.Bool().Draw(t, "config gc") {
		cfg["activation_checkpointing"] = map[string]any{"partition_activations": true}
	}
	data, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return argv, data, unknown
}

// unknownTokens lists the tokens of argv that are unknown flags or their
// values, in order.
func unknownTokens(argv []string) []string {
	var out []string
	for i := 0; i < len(argv); i++ {
		name, _, inline := strings.Cut(argv[i], "=")
		if !slices.Contains(unknownFlags, name) {
			continue
		}
		out = append(out, argv[i])
		if !inline && i+1 < len(argv) {
			out = append(out, argv[i+1])
			i++
		}
	}
	return out
}

func setChecks(t *testing.T) {
	f := flag.Lookup("rapid.checks")
	if f != nil && f.Value.String() == f.DefValue {
		if err := f.Value.Set(strconv.Itoa(propertyChecks)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.Value.Set(f.DefValue) })
	}
}

// TestPropertyGlobalBatchKept: for any launch line and any plan with the same
// global batch, the rewritten line keeps that global batch, reads back as the
// plan, and keeps every unknown flag in order; a plan with another global
// batch is refused.
func TestPropertyGlobalBatchKept(t *testing.T) {
	setChecks(t)
	rapid.Check(t, func(t *rapid.T) {
		d := rapid.SampledFrom([]Dialect{Megatron, MegatronDeepSpeed, DeepSpeed}).Draw(t, "dialect")
		plan := genPlan(t, d)
		gb := plan.DP * plan.MicroBatch * plan.Accum
		argv, cfg, unknown := genLine(t, d, gb)
		files := map[string][]byte{"ds.json": cfg}
		opts := Options{Dialect: d, ConfigDir: "/job", ReadFile: mapReader(files), EnsureLoad: true}

		res, err := Rewrite(argv, plan, opts)
		if err != nil {
			t.Fatalf("Rewrite(%q, %s): %v", argv, plan, err)
		}
		if res.GlobalBatch != gb {
			t.Fatalf("global batch %d, want %d", res.GlobalBatch, gb)
		}
		if res.Config != nil {
			files[res.Config.Path] = res.Config.Data
		}
		got, gotGB, err := Inspect(res.Argv, plan.GPUs(), Options{Dialect: d, ReadFile: mapReader(files)})
		if err != nil {
			t.Fatalf("Inspect(%q): %v", res.Argv, err)
		}
		if gotGB != gb {
			t.Fatalf("rewritten line %q has global batch %d, want %d", res.Argv, gotGB, gb)
		}
		if diff := cmp.Diff(Expressible(d, plan), got); diff != "" {
			t.Fatalf("rewritten line %q reads back as another plan (-want +got):\n%s", res.Argv, diff)
		}
		if diff := cmp.Diff(unknown, unknownTokens(res.Argv)); diff != "" {
			t.Fatalf("unknown flags changed (-in +out):\n%s", diff)
		}
		if slices.Contains(argv, "--global-batch-size") || slices.ContainsFunc(argv, func(s string) bool { return strings.HasPrefix(s, "--global-batch-size=") }) ||
			strings.Contains(string(cfg), "train_batch_size") {
			// The line states its global batch: any other plan must be refused.
			other := plan
			other.Accum++
			if _, err := Rewrite(argv, other, opts); !errors.Is(err, ErrGlobalBatch) {
				t.Fatalf("plan %s changes global batch %d to %d but Rewrite returned %v", other, gb, other.DP*other.MicroBatch*other.Accum, err)
			}
		}
	})
}

func FuzzRewrite(f *testing.F) {
	f.Add(strings.Join(megatronLine, " "), "dp2.tp2.pp2.mb2.a8.z1+gc")
	f.Add("python pretrain_gpt.py --micro-batch-size=4 --global-batch-size --tensor-model-parallel-size", "dp1.tp1.pp1.mb4.a1.z0")
	f.Fuzz(func(t *testing.T, line, planText string) {
		plan, err := model.ParsePlan(planText)
		if err != nil {
			return
		}
		argv := strings.Fields(line)
		res, err := Rewrite(argv, plan, Options{ReadFile: func(string) ([]byte, error) { return []byte("{}"), nil }, ConfigDir: "/j"})
		if err != nil {
			return
		}
		if gb := plan.DP * plan.MicroBatch * plan.Accum; res.GlobalBatch != gb {
			t.Fatalf("global batch %d, want %d", res.GlobalBatch, gb)
		}
		if _, _, err := Inspect(res.Argv, plan.GPUs(), Options{ReadFile: func(name string) ([]byte, error) {
			if res.Config != nil && name == res.Config.Path {
				return res.Config.Data, nil
			}
			return []byte("{}"), nil
		}}); err != nil {
			t.Fatal(fmt.Errorf("rewritten line %q: %w", res.Argv, err))
		}
	})
}
