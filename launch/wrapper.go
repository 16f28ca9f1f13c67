package launch

import (
	"fmt"
	"path/filepath"
	"strings"
)

// A launch line may run its launcher inside other commands: env with its
// assignments ("env NCCL_DEBUG=INFO torchrun ..."), and a container's exec
// ("apptainer exec --nv image.sif torchrun ..."; singularity alike). They
// stay as written; what runs inside them is sized and rewritten. A wrapper
// this package cannot read to its end ("env -S", a container's run, whose
// command is the image's runscript) is the line's program, as before.

// containerValued are the flags of apptainer and singularity exec that take
// a value, long and short (from Apptainer 1.x's and SingularityCE 4's own
// definitions). Any other flag is a switch: their switches take no
// separate value.
var containerValued = func() map[string]bool {
	m := map[string]bool{}
	for _, f := range strings.Fields(`--app --bind -B --mount --home -H --overlay -o --scratch -S
		--workdir -W --cwd --pwd --hostname --network --network-args --dns --security
		--apply-cgroups --vm-ram --vm-cpu --vm-ip --containlibs --fusemount --tmpdir --no-mount
		--add-caps --drop-caps --env --env-file --blkio-weight --blkio-weight-device --cpu-shares
		--cpus --cpuset-cpus --cpuset-mems --memory --memory-reservation --memory-swap --pids-limit
		--pem-path --docker-host --docker-username --docker-password --authfile --device --cdi-dirs
		--dmtcp-launch --dmtcp-restart --data --netns-path --proot`) {
		m[f] = true
	}
	return m
}()

// containerGlobal are apptainer's and singularity's options before the
// command ("apptainer --debug exec ..."), the switches with false.
var containerGlobal = map[string]bool{"-d": false, "--debug": false, "-q": false, "--quiet": false,
	"-s": false, "--silent": false, "-v": false, "--verbose": false, "--nocolor": false,
	"-c": true, "--config": true}

// envValued are env's options that take a value.
var envValued = map[string]bool{"-u": true, "--unset": true, "-C": true, "--chdir": true}

// envSwitches are env's options that take none.
var envSwitches = map[string]bool{"-i": true, "--ignore-environment": true, "-": true, "-0": true, "--null": true,
	"-v": true, "--debug": true}

// wrapperRefused are the wrappers' options that defeat what rubick-srun
// does, with why: each rank's RANK, LOCAL_RANK and rendezvous, and the
// step's CUDA_DEVICE_MAX_CONNECTIONS, are set in the environment, which
// these empty; and the line's files (its DeepSpeed config) are read from
// rubick-srun's working directory, which these change.
var wrapperRefused = func() map[string]string {
	const cleared = "it clears the environment in which rubick-srun passes each rank its RANK, LOCAL_RANK and rendezvous"
	const moved = "it changes the working directory, and rubick-srun reads the line's files (its DeepSpeed config) from its own: cd there before rubick-srun"
	m := map[string]string{}
	for _, f := range strings.Fields(`env:-i env:--ignore-environment env:- ctr:-e ctr:--cleanenv
		ctr:-C ctr:--containall ctr:--compat`) {
		m[f] = cleared
	}
	for _, f := range strings.Fields(`env:-C env:--chdir ctr:--pwd ctr:--cwd`) {
		m[f] = moved
	}
	return m
}()

// wrapperEnd returns where the command inside argv's wrappers starts (0
// for a line without one), and whether a wrapper is a container.
func wrapperEnd(argv []string) (end int, container bool) {
	end, container, _ = walkWrappers(argv)
	return end, container
}

// CheckWrappers refuses a launch line whose wrappers (env, a container's
// exec) take an option that defeats rubick-srun (wrapperRefused), naming
// it.
func CheckWrappers(argv []string) error {
	_, _, err := walkWrappers(argv)
	return err
}

// walkWrappers is wrapperEnd, and the error CheckWrappers returns.
func walkWrappers(argv []string) (end int, container bool, err error) {
	i := 0
	for i < len(argv) {
		next, image, kind := 0, false, ""
		flag := func(f string) {
			if why, ok := wrapperRefused[kind+":"+f]; ok && err == nil {
				err = fmt.Errorf("%w: %s %s in the launch line: %s", ErrBadInput, filepath.Base(argv[i]), f, why)
			}
		}
		switch filepath.Base(argv[i]) {
		case "env":
			kind = "env"
			next = envEnd(argv, i+1, flag)
		case "apptainer", "singularity":
			kind = "ctr"
			if k := containerCommand(argv, i+1); k < len(argv) && argv[k] == "exec" {
				next, image = containerEnd(argv, k+1, flag), true
			}
		}
		if next <= 0 || next >= len(argv) {
			// Not a wrapper, or one that runs nothing this package can
			// read: the line's program.
			return i, container, err
		}
		i, container = next, container || image
	}
	return i, container, err
}

// containerCommand returns where apptainer's command ("exec") is, argv[j:]
// being its arguments: after its global options.
func containerCommand(argv []string, j int) int {
	for j < len(argv) {
		name, _, attached := strings.Cut(argv[j], "=")
		valued, ok := containerGlobal[name]
		switch {
		case !ok:
			return j
		case valued && !attached:
			j += 2
		default:
			j++
		}
	}
	return j
}

// envEnd returns where the command env runs starts, argv[j:] being env's
// arguments; -1 for options it does not know. flag sees each option.
func envEnd(argv []string, j int, flag func(string)) int {
	for ; j < len(argv); j++ {
		tok := argv[j]
		switch {
		case tok == "--":
			// GNU env still reads NAME=VALUE after it.
			for j++; j < len(argv) && strings.Contains(argv[j], "=") && !strings.HasPrefix(argv[j], "="); j++ {
			}
			return j
		case envSwitches[tok]:
			flag(tok)
		case envValued[tok]:
			flag(tok)
			j++
		case strings.HasPrefix(tok, "--unset=") || strings.HasPrefix(tok, "--chdir="):
			flag(tok[:strings.Index(tok, "=")])
		case len(tok) > 2 && (strings.HasPrefix(tok, "-u") || strings.HasPrefix(tok, "-C")):
			// The short option's value attached ("-uNAME").
			flag(tok[:2])
		case strings.HasPrefix(tok, "-"):
			return -1
		case strings.Contains(tok, "="):
			// NAME=VALUE
		default:
			return j
		}
	}
	return -1
}

// containerEnd returns where the command a container's exec runs starts,
// argv[j:] being exec's arguments: after its flags and the image; -1 when
// there is none. flag sees each flag.
func containerEnd(argv []string, j int, flag func(string)) int {
	for ; j < len(argv); j++ {
		tok := argv[j]
		switch {
		case !strings.HasPrefix(tok, "-") || tok == "-":
			return j + 1 // the image
		case strings.Contains(tok, "="):
			flag(tok[:strings.Index(tok, "=")])
		case containerValued[tok]:
			flag(tok)
			j++
		case !strings.HasPrefix(tok, "--") && len(tok) > 2:
			// Short flags run together ("-ec", "-B/data"): a short flag
			// that takes a value takes the rest, or the next argument.
			for k := 1; k < len(tok); k++ {
				flag("-" + tok[k:k+1])
				if containerValued["-"+tok[k:k+1]] {
					if k == len(tok)-1 {
						j++
					}
					break
				}
			}
		default:
			flag(tok)
		}
	}
	return -1
}

// Unwrapped is the command argv runs inside its wrappers (env, a
// container's exec): argv itself for a line without one.
func Unwrapped(argv []string) []string { return argv[parseLayout(argv).wrap:] }

// DefaultPath is the PATH execvp looks a command up in when the
// environment has none (glibc's _CS_PATH): where env -u PATH runs it.
const DefaultPath = "/bin:/usr/bin"

// WrapperPath returns the PATH argv's env wrappers run their command
// with, and whether they set one: their last PATH=VALUE, or DefaultPath
// after env -u PATH. env looks its command up in the PATH it sets, so the
// line's launcher is that PATH's, not the caller's. A container's is the
// image's, which this does not read (InContainer).
func WrapperPath(argv []string) (path string, set bool) {
	end, container := wrapperEnd(argv)
	if container {
		return "", false
	}
	for i := 0; i < end; i++ {
		tok := argv[i]
		switch {
		case (tok == "-u" || tok == "--unset") && i+1 < end:
			i++
			if argv[i] == "PATH" {
				path, set = DefaultPath, true
			}
		case tok == "-uPATH" || tok == "--unset=PATH":
			path, set = DefaultPath, true
		case strings.HasPrefix(tok, "PATH="):
			path, set = tok[len("PATH="):], true
		}
	}
	return path, set
}

// InContainer reports whether argv runs its command in a container, whose
// programs are not the host's.
func InContainer(argv []string) bool { return parseLayout(argv).container }
