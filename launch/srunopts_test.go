package launch

import (
	"errors"
	"strings"
	"testing"
)

// A job's own srun options come after the plan's, and srun takes the last
// of each: none may size or place the step otherwise, however it is
// spelled (srun parses with getopt_long: abbreviations, short options run
// together), and none may end the options early.
func TestCheckSrunExtra(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // in the error; "" for none
	}{
		{[]string{"--container-image=nvcr.io#nvidia/pytorch:24.05-py3"}, ""},
		{[]string{"--container-mounts", "/data:/data", "--label"}, ""}, // a plugin's option and its value
		{[]string{"--job-name", "step", "-l", "-u"}, ""},
		{[]string{"-J", "step", "-lJstep", "--time=10"}, ""},
		{[]string{"--exclusive", "--mpi=pmix", "-K1"}, "--kill-on-bad-exit"},
		{[]string{"-N2"}, "-N (--nodes)"},
		{[]string{"-lN2"}, "-N (--nodes)"},
		{[]string{"-vn16"}, "-n (--ntasks)"},
		{[]string{"-ulw", "gpu7"}, "-w (--nodelist)"},
		{[]string{"--nodelis=gpu7"}, "--nodelist"},
		{[]string{"--cpus-per-tas=2"}, "--cpus-per-task"},
		{[]string{"--ntasks-per-nod", "2"}, "--ntasks-per-node"},
		{[]string{"--gpus-per-tas=1"}, "--gpus-per-task"},
		{[]string{"--distribution=cyclic"}, "--distribution"},
		{[]string{"-m", "cyclic"}, "-m (--distribution)"},
		{[]string{"--nodefile=hosts"}, "--nodefile"},
		{[]string{"--tres-per-task=gres/gpu:1"}, "--tres-per-task"},
		{[]string{"--hint=nomultithread"}, "--hint"},
		{[]string{"--mem=1G"}, "--mem"},
		{[]string{"--label", "hostname"}, `not an srun option, nor the value of "--label"`},
		{[]string{"hostname"}, "not an srun option: srun would run it"},
		{[]string{"--job-name"}, "takes a value, and none follows"},
		{[]string{"-lJ"}, "takes a value, and none follows"},
		{[]string{"--label", ":", "--label"}, "another component"},
		{[]string{"--"}, "what follows as the program"},
		{[]string{"-y"}, "no option -y"},
		{[]string{"--mem-per=1"}, "--mem-per-cpu"}, // ambiguous, but owned
		{[]string{"--ti=5"}, "abbreviates several"},
	} {
		err := CheckSrunExtra(tc.args)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%q: %v, want it accepted", tc.args, err)
		case tc.want != "" && (!errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%q: %v, want ErrBadInput saying %q", tc.args, err, tc.want)
		}
	}
}
