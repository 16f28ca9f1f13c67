// Command rubick is the admin and user CLI: simulate policies on traces
// (sim), fit, validate and query the performance model (model), report on
// finished jobs (report), explain a job's plan (explain), show rubickd's
// health (status), inspect or prune the store (store), probe a node's
// GPUs (gpuinfo) and show what rubickd reads off a batch script (script).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"syscall"
)

// command is one subcommand: run parses args and writes to stdout.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// errUsage marks a usage error already explained on stderr.
var errUsage = errors.New("usage error")

func commands() map[string]command {
	return map[string]command{
		"model": {"fit, validate and query the performance model", runModel},
		"sim":   {"replay a workload trace against scheduling policies", runSim},

		"report":  {"summarise jobs from Slurm accounting (JCT, GPU-hours, reconfigurations, plans)", runReport},
		"explain": {"explain a job's model, plan, alternatives and recent decisions", runExplain},
		"queue":   {"show the order rubickd hands out GPUs in: the jobs of its newest cycle, head first", runQueue},
		"status":  {"show rubickd's health, managed jobs and model fits", runStatus},
		"store":   {"show what rubick's store holds, or prune it now", runStore},
		"gpuinfo": {"probe this node's GPUs with NVML and print the facts as JSON", runGPUInfo},
		"script":  {"show what rubickd reads off a batch script's rubick-srun line before the job starts", runScript},
	}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: rubick <command> [flags]\n\ncommands:")
	for _, name := range sortedKeys(commands()) {
		fmt.Fprintf(w, "  %-8s %s\n", name, commands()[name].summary)
	}
	fmt.Fprintln(w, "\nRun 'rubick <command> -h' or 'rubick help <command>' for the flags of a command.")
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 1 && args[0] == "help" {
		// rubick help sim, rubick help model fit: that command's own help.
		return run(ctx, append(slices.Clone(args[1:]), "-h"), stdout, stderr)
	}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stdout)
		return nil
	}
	c, ok := commands()[args[0]]
	if !ok {
		usage(stderr)
		return fmt.Errorf("%w: unknown command %q", errUsage, args[0])
	}
	return c.run(ctx, args[1:], stdout, stderr)
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "rubick:", err)
		if errors.Is(err, errUsage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}
