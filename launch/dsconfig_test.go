package launch

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// DeepSpeed reads its config as Hjson: comments, trailing commas and
// unquoted keys pass. The rewritten copy is plain JSON, which DeepSpeed
// and Hugging Face (strict JSON) both read.
func TestConfigHjson(t *testing.T) {
	files := mapReader(map[string][]byte{
		"ds.hjson": []byte(`// ZeRO-2, batch 32
{
  "train_batch_size": 32, // the global batch
  /* per GPU */ train_micro_batch_size_per_gpu: 4,
  "optimizer": {"type": "Adam", "params": {"lr": 1.5e-4, "betas": [0.9, 0.95,],},},
  "zero_optimization": {"stage": 2, "reduce_bucket_size": 500000000},
}
`),
		"broken.json": []byte("{\"train_batch_size\": 32, // no closing brace\n"),
		"dup.json":    []byte("{\"zero_optimization\": {\"stage\": 1, \"stage\": 2}, // DeepSpeed refuses duplicate keys\n}"),
		"list.json":   []byte(`[1]`),
	})
	line := func(cfg string) []string { return []string{"deepspeed", "train.py", "--deepspeed_config", cfg} }

	res, err := Rewrite(line("ds.hjson"), mustPlan(t, "dp4.tp1.pp1.mb2.a4.z1"), Options{ConfigDir: "/job", ReadFile: files})
	if err != nil {
		t.Fatal(err)
	}
	want := `{
  "train_batch_size": 32,
  "train_micro_batch_size_per_gpu": 2,
  "optimizer": {
    "type": "Adam",
    "params": {
      "lr": 1.5e-4,
      "betas": [
        0.9,
        0.95
      ]
    }
  },
  "zero_optimization": {
    "stage": 1,
    "reduce_bucket_size": 500000000
  },
  "gradient_accumulation_steps": 4,
  "steps_per_print": 10
}
`
	if diff := cmp.Diff(want, string(res.Config.Data)); diff != "" || !json.Valid(res.Config.Data) {
		t.Errorf("rewritten config (-want +got):\n%s", diff)
	}
	if gb, err := GlobalBatch(line("ds.hjson"), Options{ReadFile: files}); err != nil || gb != 32 {
		t.Errorf("GlobalBatch = %d, %v; want 32", gb, err)
	}

	for name, c := range map[string]struct {
		file    string
		message string
	}{
		"neither JSON nor Hjson": {"broken.json", "broken.json"},
		"duplicate key":          {"dup.json", "duplicate"},
		"JSON, not an object":    {"list.json", "not a JSON object"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Rewrite(line(c.file), mustPlan(t, "dp4.tp1.pp1.mb2.a4.z1"), Options{ConfigDir: "/job", ReadFile: files})
			if !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), c.message) {
				t.Errorf("Rewrite error = %v, want ErrBadInput containing %q", err, c.message)
			}
		})
	}
}

// TestGlobalBatchDeepSpeedConfig: a plain DeepSpeed config without
// train_batch_size trains with micro-batch x accumulation x world size, as
// DeepSpeed computes it; on the GPUs the job asks for, that is the batch
// its user meant. Before, it stated none, and the job trained with the
// plan's.
func TestGlobalBatchDeepSpeedConfig(t *testing.T) {
	files := mapReader(map[string][]byte{
		"mb-ga.json":   []byte(`{"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2}`),
		"mb.json":      []byte(`{"train_micro_batch_size_per_gpu": 4}`),
		"tbs.json":     []byte(`{"train_batch_size": 16, "train_micro_batch_size_per_gpu": 1}`),
		"auto.json":    []byte(`{"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": 2}`),
		"zero-mb.json": []byte(`{"train_micro_batch_size_per_gpu": 0}`),
		"bad-ga.json":  []byte(`{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": "two"}`),
	})
	for name, tc := range map[string]struct {
		line    string
		gpus    int
		want    int
		message string // of the error ErrBadInput wraps; "" for none
	}{
		"micro-batch x accumulation x GPUs": {line: "deepspeed train.py --deepspeed --deepspeed_config mb-ga.json", gpus: 8, want: 64},
		"accumulation defaults to 1":        {line: "python train.py --deepspeed_config mb.json", gpus: 8, want: 32},
		"stated wins over GPUs":             {line: "deepspeed train.py --deepspeed_config tbs.json", gpus: 8, want: 16},
		"GPUs unknown":                      {line: "deepspeed train.py --deepspeed_config mb-ga.json"},
		"auto micro-batch states none":      {line: "deepspeed train.py --deepspeed_config auto.json", gpus: 8},
		// Megatron-DeepSpeed takes its batch from Megatron's flags.
		"megatron-deepspeed": {line: "python pretrain_gpt.py --deepspeed --deepspeed_config mb-ga.json", gpus: 8},
		"zero micro-batch":   {line: "deepspeed train.py --deepspeed_config zero-mb.json", gpus: 8, message: "train_micro_batch_size_per_gpu=0"},
		"accumulation not a number": {line: "deepspeed train.py --deepspeed_config bad-ga.json", gpus: 8,
			message: `bad-ga.json: bad input: gradient_accumulation_steps="two" is not an integer`},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := GlobalBatch(strings.Fields(tc.line), Options{GPUs: tc.gpus, ReadFile: files})
			if tc.message != "" {
				if !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), tc.message) {
					t.Fatalf("GlobalBatch = %d, %v; want ErrBadInput saying %q", got, err, tc.message)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("GlobalBatch = %d, %v; want %d", got, err, tc.want)
			}
		})
	}
}
