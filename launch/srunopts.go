package launch

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// srunArg is how an srun option takes its value.
type srunArg int

const (
	srunSwitch   srunArg = iota // none
	srunValue                   // always: attached ("-N2", "--nodes=2") or the next argument
	srunOptional                // only attached ("-K1", "--exclusive=user")
)

// srunLong are srun's long options (22.05 to 24.11: srun --help, and
// slurm_opt.c for those its help leaves out) and how each takes a value.
// srun parses them with getopt_long, which also takes any unambiguous
// abbreviation ("--nodelis=n1" is --nodelist).
var srunLong = func() map[string]srunArg {
	m := map[string]srunArg{}
	for _, f := range strings.Fields(`accel-bind account acctg-freq bb bbf bcast-exclude begin chdir
		cluster-constraint clusters comment constraint container container-id core-spec cores-per-socket
		cpu-bind cpu-freq cpus-per-gpu cpus-per-task deadline delay-boot dependency distribution epilog
		error exclude export extra-node-info gid gpu-bind gpu-freq gpus gpus-per-node gpus-per-socket
		gpus-per-task gres gres-flags het-group hint input jobid job-name licenses mail-type mail-user
		mcs-label mem mem-bind mem-per-cpu mem-per-gpu mincpus mpi network nodefile nodelist nodes
		ntasks ntasks-per-core ntasks-per-gpu ntasks-per-node ntasks-per-socket ntasks-per-tres
		open-mode output partition power prefer priority profile prolog qos relative reservation
		segment signal slurmd-debug sockets-per-node switches task-epilog task-prolog thread-spec
		threads threads-per-core time time-min tmp tres-bind tres-per-task uid wait wckey`) {
		m[f] = srunValue
	}
	for _, f := range strings.Fields(`bcast compress exclusive immediate kill-on-bad-exit nice
		oom-kill-step propagate pty resv-ports send-libs x11`) {
		m[f] = srunOptional
	}
	for _, f := range strings.Fields(`contiguous disable-status exact help hold label multi-prog no-allocate
		no-kill overcommit overlap oversubscribe preserve-env quiet quit-on-interrupt reboot spread-job
		test-only unbuffered usage use-min-nodes verbose version whole`) {
		m[f] = srunSwitch
	}
	return m
}()

// srunShort are srun's short options, by the long option each stands for.
var srunShort = map[byte]string{
	'A': "account", 'B': "extra-node-info", 'c': "cpus-per-task", 'C': "constraint", 'd': "dependency",
	'D': "chdir", 'e': "error", 'E': "preserve-env", 'F': "nodefile", 'G': "gpus", 'h': "help", 'H': "hold",
	'i': "input", 'I': "immediate", 'J': "job-name", 'k': "no-kill", 'K': "kill-on-bad-exit", 'l': "label",
	'L': "licenses", 'm': "distribution", 'M': "clusters", 'n': "ntasks", 'N': "nodes", 'o': "output",
	'O': "overcommit", 'p': "partition", 'q': "qos", 'Q': "quiet", 'r': "relative", 's': "oversubscribe",
	'S': "core-spec", 't': "time", 'T': "threads", 'u': "unbuffered", 'v': "verbose", 'V': "version",
	'w': "nodelist", 'W': "wait", 'x': "exclude", 'X': "disable-status", 'Z': "no-allocate",
}

// srunOwned are the srun options a step's geometry sets (SrunArgs), or
// that would size or place its tasks, CPUs, GPUs or memory otherwise than
// the plan: the job's own options may not set them again (srun takes the
// last of each, and theirs come after the plan's).
var srunOwned = func() map[string]bool {
	m := map[string]bool{}
	for _, f := range strings.Fields(`nodes ntasks ntasks-per-node ntasks-per-gpu ntasks-per-core
		ntasks-per-socket ntasks-per-tres gres gres-flags gpus gpus-per-node gpus-per-task gpus-per-socket
		gpu-bind tres-per-task tres-bind cpus-per-task cpus-per-gpu cpu-bind hint threads-per-core
		cores-per-socket sockets-per-node extra-node-info distribution mem mem-per-cpu mem-per-gpu mincpus
		kill-on-bad-exit export nodelist nodefile exclude relative het-group multi-prog overlap jobid
		no-allocate`) {
		m[f] = true
	}
	return m
}()

// CheckSrunExtra checks a job's own srun options (rubick-srun's
// --srun-arg, e.g. a container's --container-image=...): each an option,
// or the value of the one before it, and none that the plan owns, spelled
// long, abbreviated or short, alone or run together ("-lN2"). An option
// srun does not list (a SPANK plugin's, as pyxis' --container-mounts)
// takes the next argument as its value unless that is an option.
func CheckSrunExtra(args []string) error {
	bad := func(a, why string, v ...any) error {
		return fmt.Errorf("%w: --srun-arg=%q: %s", ErrBadInput, a, fmt.Sprintf(why, v...))
	}
	noValue := func(a string) error {
		return bad(a, "it takes a value, and none follows: srun would take the program for it")
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == ":":
			return bad(a, "srun reads it as the start of another component of the step")
		case a == "--":
			return bad(a, "srun would run what follows as the program")
		case !strings.HasPrefix(a, "-") || a == "-":
			if i == 0 {
				return bad(a, "not an srun option: srun would run it as the program")
			}
			return bad(a, "not an srun option, nor the value of %q: srun would run it as the program", args[i-1])
		case strings.HasPrefix(a, "--"):
			name, _, attached := strings.Cut(a[2:], "=")
			full, known, err := srunLongName(name)
			switch {
			case err != nil:
				return bad(a, "%v", err)
			case srunOwned[full]:
				return bad(a, "rubick-srun sets srun's --%s from the plan", full)
			case attached:
			case !known:
				if i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
					i++ // a plugin's option and its value
				}
			case srunLong[full] == srunValue:
				if i+1 == len(args) {
					return noValue(a)
				}
				i++
			}
		default:
			for k := 1; k < len(a); k++ {
				full, ok := srunShort[a[k]]
				switch {
				case !ok:
					return bad(a, "srun has no option -%c", a[k])
				case srunOwned[full]:
					return bad(a, "rubick-srun sets srun's -%c (--%s) from the plan", a[k], full)
				case srunLong[full] == srunSwitch:
					continue
				case k == len(a)-1 && srunLong[full] == srunValue:
					if i+1 == len(args) {
						return noValue(a)
					}
					i++
				}
				break // the rest of a is its value
			}
		}
	}
	return nil
}

// srunLongName is the srun long option name stands for, as getopt_long
// reads it: itself, or the one option it abbreviates. known is false for
// a name srun does not list, which a plugin may add; an abbreviation of an
// option the plan owns is refused whatever else it may abbreviate.
func srunLongName(name string) (full string, known bool, err error) {
	if _, ok := srunLong[name]; ok {
		return name, true, nil
	}
	if name == "" {
		return "", false, fmt.Errorf("no option name")
	}
	var matches []string
	for _, f := range slices.Sorted(maps.Keys(srunLong)) {
		if strings.HasPrefix(f, name) {
			if srunOwned[f] {
				return f, true, nil
			}
			matches = append(matches, f)
		}
	}
	switch len(matches) {
	case 0:
		return name, false, nil
	case 1:
		return matches[0], true, nil
	}
	return "", false, fmt.Errorf("--%s abbreviates several srun options; write one out", name)
}
