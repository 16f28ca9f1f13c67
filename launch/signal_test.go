package launch

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// CheckSignals finds a job whose checkpoint signals disagree: rubick-srun's
// --signal against the site's, and a --signal=B:SIG the job asks Slurm for
// against what rubick-srun, the batch shell, passes on.
func TestCheckSignals(t *testing.T) {
	const line = "exec rubick-srun %s python pretrain_gpt.py --global-batch-size 8\n"
	srun := func(flags, sbatch string) string {
		return "#!/bin/bash\n" + sbatch + strings.Replace(line, "%s", flags, 1)
	}
	for _, tc := range []struct {
		name   string
		script string
		site   string
		want   []string // what each warning says, in order
	}{
		{name: "no signal asked for", script: srun("", "#SBATCH --gres=gpu:8\n")},
		{name: "the checkpoint signal before the time limit", script: srun("", "#SBATCH --signal=B:USR1@120\n")},
		{name: "another signal to the batch shell", script: srun("", "#SBATCH -N1 --signal=B:USR2@120 # save\n"),
			want: []string{"--signal=B:USR2@120 sends USR2 to the batch shell alone, rubick-srun, which passes on only its checkpoint signal (USR1)"}},
		{name: "by number, separate value, the last directive counts", script: srun("", "#SBATCH --signal=B:USR1@60\n#SBATCH --signal B:12@60\n"),
			want: []string{"sends USR2 to the batch shell alone"}},
		{name: "to the steps: the trainer's own", script: srun("", "#SBATCH --signal=USR2@120\n")},
		{name: "TERM to the batch shell is passed on", script: srun("", "#SBATCH --signal=RB:SIGTERM@60\n")},
		{name: "a directive after the first command is not sbatch's", script: "#!/bin/bash\nmodule load cuda\n#SBATCH --signal=B:USR2@60\n" +
			strings.Replace(line, "%s", "", 1)},
		{name: "rubick-srun's signal is not the site's", script: srun("--signal TERM", ""), site: "USR1",
			want: []string{"rubick-srun takes TERM as the checkpoint signal (its --signal), but the site's rubickd sends USR1 before a restart"}},
		{name: "rubick-srun defaults to the site's", script: srun("", "#SBATCH --signal=B:15@60\n"), site: "SIGTERM"},
		{name: "the job asks for rubickd's default, the site sends TERM", script: srun("", "#SBATCH --signal=B:USR1@60\n"), site: "TERM",
			want: []string{"which passes on only its checkpoint signal (TERM), TERM and INT: the trainer would not get it. Ask for --signal=B:TERM@SECONDS"}},
		{name: "both", script: srun("--signal=USR2", "#SBATCH --signal=B:USR1@60\n"), site: "USR1",
			want: []string{"rubick-srun takes USR2", "sends USR1 to the batch shell alone"}},
		{name: "rubick-srun's signal left to the run", script: srun(`--signal "$SIG"`, "#SBATCH --signal=B:USR2@60\n"), site: "USR1"},
		{name: "not a signal", script: srun("", "#SBATCH --signal=B:0@60\n"), want: []string{`sbatch --signal="B:0@60": bad input: signal "0"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sl, err := FromScript(tc.script)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, err := range sl.CheckSignals(tc.site) {
				if !errors.Is(err, ErrSignal) {
					t.Errorf("%v does not wrap ErrSignal", err)
				}
				got = append(got, err.Error())
			}
			if len(got) != len(tc.want) {
				t.Fatalf("CheckSignals = %q, want %d warnings saying %q", got, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("warning %d = %q, want it to say %q", i, got[i], w)
				}
			}
		})
	}
}

func TestSignalName(t *testing.T) {
	got := map[string]string{}
	for _, s := range []string{"USR1", "sigterm", "SIGUSR2", "10", "15", "2", "34", "KILL"} {
		n, err := SignalName(s)
		if err != nil {
			t.Fatalf("SignalName(%q): %v", s, err)
		}
		got[s] = n
	}
	want := map[string]string{"USR1": "USR1", "sigterm": "TERM", "SIGUSR2": "USR2", "10": "USR1", "15": "TERM", "2": "INT", "34": "34", "KILL": "KILL"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("SignalName (-want +got):\n%s", d)
	}
	for _, s := range []string{"", "0", "65", "US R1", "-1"} {
		if _, err := SignalName(s); !errors.Is(err, ErrBadInput) {
			t.Errorf("SignalName(%q) = %v, want ErrBadInput", s, err)
		}
	}
}
