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
