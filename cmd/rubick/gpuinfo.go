package main

import (
	"context"
	"io"
	"log/slog"

	"github.com/rubick-sched/rubick/gpuinfo"
	"github.com/rubick-sched/rubick/model"
)

// runGPUInfo implements `rubick gpuinfo`: it probes this node's GPUs with
// NVML (run it on a compute node, e.g. through srun) and prints the facts
// as JSON; without a driver it prints the configured defaults, marked
// "config".
func runGPUInfo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("gpuinfo", "Probe this node's GPUs (memory, NVLink, PCIe) with NVML and print them as JSON.", stderr)
	if help, err := parseFlags(fs, args); help || err != nil {
		return err
	}
	env := model.DefaultEnv()
	fallback := gpuinfo.Facts{GPUs: env.NodeGPUs, MemGB: env.GPUMemGB, PCIeGBps: env.PCIeGBps, Source: gpuinfo.SourceConfig}
	facts := gpuinfo.Detect(ctx, slog.New(slog.NewTextHandler(stderr, nil)), fallback)
	return writeJSON(stdout, facts)
}
