package model

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestEnvSet(t *testing.T) {
	tests := map[string]struct {
		kv      string
		want    func(*Env)
		wantErr string
	}{
		"float":        {kv: "inter_gbps=25", want: func(e *Env) { e.InterGBps = 25 }},
		"int":          {kv: "gpus_per_nic=0", want: func(e *Env) { e.GPUsPerNIC = 0 }},
		"bool":         {kv: "pipeline_1f1b=true", want: func(e *Env) { e.Pipeline1F1B = true }},
		"zero ridge":   {kv: "ridge_flop_per_byte=0", want: func(e *Env) { e.RidgeFlopPerByte = 0 }},
		"no equals":    {kv: "inter_gbps", wantErr: `env "inter_gbps": want name=value`},
		"unknown":      {kv: "nvlink=400", wantErr: `env "nvlink": unknown name`},
		"bool word":    {kv: "pipeline_1f1b=1", want: func(e *Env) { e.Pipeline1F1B = true }},
		"not a number": {kv: "inter_gbps=fast", wantErr: "env inter_gbps=fast must be a finite number >= 0"},
		"nan":          {kv: "gpu_mem_gb=NaN", wantErr: "env gpu_mem_gb=NaN must be a finite number >= 0"},
		"infinite":     {kv: "intra_gbps=Inf", wantErr: "env intra_gbps=Inf must be a finite number >= 0"},
		"overflow":     {kv: "node_mem_gb=1e400", wantErr: "env node_mem_gb=1e400 must be a finite number >= 0"},
		"empty":        {kv: "host_mem_gbps=", wantErr: "env host_mem_gbps= must be a finite number >= 0"},
		"fraction":     {kv: "node_cpus=1.5", wantErr: "env node_cpus=1.5 must be a whole number >= 0"},
		"huge count":   {kv: "node_gpus=1e30", wantErr: "env node_gpus=1e30 must be a whole number >= 0"},
		"not a bool":   {kv: "pipeline_1f1b=maybe", wantErr: "env pipeline_1f1b=maybe must be true or false"},
		"negative":     {kv: "pcie_gbps=-1", wantErr: "pcie_gbps=-1 must be a finite number >= 0"},
		"string value": {kv: `intra_gbps="150"`, wantErr: `env intra_gbps="150" must be a finite number >= 0`},
		"no bandwidth": {kv: "inter_gbps=0", wantErr: "env.inter_gbps=0 must be >= 0.001 GB/s"},
		// Before, these priced every plan at an infinite time: the fit
		// panicked on 1e-310.
		"tiny bandwidth":      {kv: "intra_gbps=1e-310", wantErr: "env.intra_gbps=1e-310 must be >= 0.001 GB/s"},
		"tiny host bandwidth": {kv: "host_mem_gbps=1e-310", wantErr: "env.host_mem_gbps=1e-310 must be >= 0.001 GB/s"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, want := DefaultEnv(), DefaultEnv()
			err := got.Set(tc.kv)
			if tc.wantErr != "" {
				if !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Set(%q) = %v, want ErrBadInput with %q", tc.kv, err, tc.wantErr)
				}
			} else {
				if err != nil {
					t.Fatalf("Set(%q) = %v", tc.kv, err)
				}
				tc.want(&want)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("env after Set(%q) (-want +got):\n%s", tc.kv, diff)
			}
		})
	}
}

// Every name EnvKeys lists is accepted with its current value (KeyValues),
// which leaves the environment as it was.
func TestEnvKeysRoundTrip(t *testing.T) {
	def := DefaultEnv()
	b, err := json.Marshal(def)
	if err != nil {
		t.Fatal(err)
	}
	var vals map[string]json.RawMessage
	if err := json.Unmarshal(b, &vals); err != nil {
		t.Fatal(err)
	}
	if len(EnvKeys()) != len(vals) {
		t.Errorf("EnvKeys() = %v, want the %d JSON fields of Env", EnvKeys(), len(vals))
	}
	for _, kv := range def.KeyValues() {
		e := def
		if err := e.Set(kv); err != nil || e != def {
			t.Errorf("Set(%s) = %v, env %+v; want no change", kv, err, e)
		}
	}
}
