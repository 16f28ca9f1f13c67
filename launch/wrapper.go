package launch

import (
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
// a value, long and short (from Apptainer 1.x's and SingularityCE's own
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
		--dmtcp-launch --dmtcp-restart`) {
		m[f] = true
	}
	return m
}()

// envValued are env's options that take a value.
var envValued = map[string]bool{"-u": true, "--unset": true, "-C": true, "--chdir": true}

// envSwitches are env's options that take none.
var envSwitches = map[string]bool{"-i": true, "--ignore-environment": true, "-": true, "-0": true, "--null": true,
	"-v": true, "--debug": true}

// wrapperEnd returns where the command inside argv's wrappers starts (0
// for a line without one), and whether a wrapper is a container.
func wrapperEnd(argv []string) (end int, container bool) {
	i := 0
	for i < len(argv) {
		next, image := 0, false
		switch filepath.Base(argv[i]) {
		case "env":
			next = envEnd(argv, i+1)
		case "apptainer", "singularity":
			if i+1 < len(argv) && argv[i+1] == "exec" {
				next, image = containerEnd(argv, i+2), true
			}
		}
		if next <= 0 || next >= len(argv) {
			// Not a wrapper, or one that runs nothing this package can
			// read: the line's program.
			return i, container
		}
		i, container = next, container || image
	}
	return i, container
}

// envEnd returns where the command env runs starts, argv[j:] being env's
// arguments; -1 for options it does not know.
func envEnd(argv []string, j int) int {
	for ; j < len(argv); j++ {
		tok := argv[j]
		switch {
		case tok == "--":
			return j + 1
		case envSwitches[tok]:
		case envValued[tok]:
			j++
		case strings.HasPrefix(tok, "--unset=") || strings.HasPrefix(tok, "--chdir="):
		case len(tok) > 2 && (strings.HasPrefix(tok, "-u") || strings.HasPrefix(tok, "-C")):
			// The short option's value attached ("-uNAME").
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
// there is none.
func containerEnd(argv []string, j int) int {
	for ; j < len(argv); j++ {
		tok := argv[j]
		switch {
		case !strings.HasPrefix(tok, "-") || tok == "-":
			return j + 1 // the image
		case strings.Contains(tok, "="):
		case containerValued[tok]:
			j++
		case !strings.HasPrefix(tok, "--") && len(tok) > 2:
			// Short flags run together ("-ec", "-B/data"): a short flag
			// that takes a value takes the rest, or the next argument.
			for k := 1; k < len(tok); k++ {
				if containerValued["-"+tok[k:k+1]] {
					if k == len(tok)-1 {
						j++
					}
					break
				}
			}
		}
	}
	return -1
}

// Unwrapped is the command argv runs inside its wrappers (env, a
// container's exec): argv itself for a line without one.
func Unwrapped(argv []string) []string { return argv[parseLayout(argv).wrap:] }

// InContainer reports whether argv runs its command in a container, whose
// programs are not the host's.
func InContainer(argv []string) bool { return parseLayout(argv).container }
