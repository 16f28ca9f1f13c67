package slurm

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestBatchScript(t *testing.T) {
	script := "#!/bin/bash\nexec rubick-srun python pretrain_gpt.py\n"
	tests := []struct {
		name string
		r    scriptedRunner
		want string
		err  error
	}{
		{name: "a script", r: scriptedRunner{out: []byte(script)}, want: script},
		// scontrol exits 0 for a job without one, with the reason on stderr.
		{name: "none", r: scriptedRunner{}, err: ErrNoScript},
		{name: "too long", r: scriptedRunner{out: []byte(strings.Repeat("#", MaxScriptBytes+1))}, err: ErrNoScript},
		{name: "scontrol fails", r: scriptedRunner{err: &CommandError{ExitCode: 1, Err: context.DeadlineExceeded}}, err: context.DeadlineExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := BatchScripts{Runner: &tt.r, Scontrol: "scontrol"}.BatchScript(context.Background(), 42)
			if tt.err != nil {
				if !errors.Is(err, tt.err) {
					t.Fatalf("BatchScript() error = %v, want %v", err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("BatchScript() = %q, %v; want %q", got, err, tt.want)
			}
			if diff := cmp.Diff([]string{"scontrol", "write", "batch_script", "42", "-"}, tt.r.argv); diff != "" {
				t.Errorf("argv (-want +got):\n%s", diff)
			}
		})
	}
}
