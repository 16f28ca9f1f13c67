// Package gpuinfo reads the GPU facts of one node from NVML (through
// github.com/NVIDIA/go-nvml): how many GPUs it has, the memory of the
// smallest, how richly they are connected by NVLink, and their PCIe link.
// A GPU in MIG mode counts as its MIG devices, which jobs run on.
// The performance model prices plans with these facts (model.Env); where no
// NVIDIA driver is present, as on a Slurm controller, the configured values
// stand instead.
//
// NVML is reached through Library and Device, the few calls used, so the
// real nvml.New() and go-nvml's fake servers (pkg/nvml/mock/dgxa100) both
// fit. A missing driver is "no GPU info" (ErrNoDriver), never a crash.
// docs/gpuinfo.md describes what is probed and how rubickd uses it.
package gpuinfo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/rubick-sched/rubick/model"
)

// Sentinel errors callers branch on.
var (
	// ErrNoDriver reports that NVML could not be initialised: libnvidia-ml
	// is absent or the driver is not loaded.
	ErrNoDriver = errors.New("no NVIDIA driver")
	// ErrNoGPU reports that NVML initialised but sees no GPU.
	ErrNoGPU = errors.New("no GPU")
)

// Where Facts come from.
const (
	// SourceNVML marks facts measured by Probe on a node.
	SourceNVML = "nvml"
	// SourceConfig marks facts taken from configuration.
	SourceConfig = "config"
)

// Facts are the GPU facts of one node. Where the GPUs differ, each field
// describes the weakest GPU, because a job's collective runs at the pace of
// its slowest member. A zero numeric field means "unknown".
type Facts struct {
	// GPUs is the number of GPUs NVML sees on the node (all of them, whatever
	// CUDA_VISIBLE_DEVICES or the Slurm allocation of the caller says). A
	// GPU in MIG mode counts as its MIG devices, as Slurm schedules them.
	GPUs int `json:"gpus"`
	// MemGB is the total memory of the smallest GPU in GiB (2^30 bytes), the
	// unit of the vendors' "40 GB"/"80 GB" names and so of the configured
	// model.Env.GPUMemGB: an A100 80 GB reports exactly 80.
	MemGB float64 `json:"mem_gb"`
	// Name is the GPU product name; distinct names are joined by ", ".
	Name string `json:"name"`
	// NVLinkPeers is the fewest GPUs that any one GPU reaches over NVLink
	// peer-to-peer (directly or through NVSwitch). GPUs-1 means every pair
	// is NVLink-connected; 0 means at least one GPU has no NVLink peer, as
	// a MIG device never has.
	NVLinkPeers int `json:"nvlink_peers"`
	// NVLinkGBps is the peak one-direction NVLink bandwidth of the GPU with
	// the least: the sum over its active links of the per-link rate of the
	// link's NVLink version (25 GB/s for NVLink 2-4, 50 for NVLink 5), e.g.
	// 300 for an A100 (12 links), 200 for an A800 (8 links).
	NVLinkGBps float64 `json:"nvlink_gbps"`
	// PCIeGen and PCIeWidth are the PCIe generation and lane count of the
	// GPU with the slowest host link, as the GPU and its slot allow.
	PCIeGen   int `json:"pcie_gen"`
	PCIeWidth int `json:"pcie_width"`
	// PCIeGBps is the peak one-direction bandwidth of that link, computed
	// by PCIeGBps(PCIeGen, PCIeWidth).
	PCIeGBps float64 `json:"pcie_gbps"`
	// Source is SourceNVML or SourceConfig.
	Source string `json:"source"`
	// MIG says that the GPUs counted include MIG devices: slices of a GPU
	// in MIG mode, each with its own memory and no NVLink peer.
	MIG bool `json:"mig,omitempty"`
}

// Library is the part of nvml.Interface that Probe calls; nvml.New() and
// go-nvml's mock servers satisfy it.
type Library interface {
	Init() nvml.Return
	Shutdown() nvml.Return
	DeviceGetCount() (int, nvml.Return)
	// DeviceGetHandleByIndex returns the full nvml.Device because that is
	// the signature nvml.Interface has; Probe uses only its Device part.
	DeviceGetHandleByIndex(index int) (nvml.Device, nvml.Return)
}

// Device is the part of nvml.Device that Probe and ProbeMem call.
//
// NVLink peers come from GetP2PStatus rather than GetNvLinkRemotePciInfo
// because on NVSwitch systems (DGX/HGX) a link's remote end is the switch,
// not a GPU. PCIe figures come from the Max calls rather than the Curr ones
// because an idle GPU lowers its current link generation to save power;
// "max" is what both the GPU and its slot support.
type Device interface {
	GetName() (string, nvml.Return)
	GetMemoryInfo() (nvml.Memory, nvml.Return)
	GetNvLinkState(link int) (nvml.EnableState, nvml.Return)
	GetNvLinkVersion(link int) (uint32, nvml.Return)
	GetP2PStatus(peer nvml.Device, index nvml.GpuP2PCapsIndex) (nvml.GpuP2PStatus, nvml.Return)
	GetMaxPcieLinkGeneration() (int, nvml.Return)
	GetMaxPcieLinkWidth() (int, nvml.Return)
	// GetMigMode, GetMaxMigDeviceCount and GetMigDeviceHandleByIndex
	// find the MIG devices of a GPU in MIG mode.
	GetMigMode() (int, int, nvml.Return)
	GetMaxMigDeviceCount() (int, nvml.Return)
	GetMigDeviceHandleByIndex(index int) (nvml.Device, nvml.Return)
}

// The real NVML must keep satisfying the subsets above.
var (
	_ Library = nvml.Interface(nil)
	_ Device  = nvml.Device(nil)
)

// nvlinkLinkGBps is the one-direction bandwidth of one NVLink, GB/s, by the
// nvml.NvlinkVersion that GetNvLinkVersion reports (an enum, not the
// generation: 4 is NVLink 3.0). NVLink 1.0: P100, 4 links = 80 GB/s;
// 2.x: V100, 6 links = 150; 3.x: A100, 12 links = 300; 4.0: H100, 18 links
// = 450; 5.0: B200, 18 links = 900 (NVIDIA's bidirectional figures halved).
var nvlinkLinkGBps = [...]float64{
	nvml.NVLINK_VERSION_1_0: 20,
	nvml.NVLINK_VERSION_2_0: 25,
	nvml.NVLINK_VERSION_2_2: 25,
	nvml.NVLINK_VERSION_3_0: 25,
	nvml.NVLINK_VERSION_3_1: 25,
	nvml.NVLINK_VERSION_4_0: 25,
	nvml.NVLINK_VERSION_5_0: 50,
}

// pcieLaneGBps is the one-direction bandwidth of one PCIe lane, GB/s, by
// generation: transfer rate (GT/s) times line-code efficiency, over 8 bits.
// 8b/10b for Gen 1-2, 128b/130b for Gen 3-5, 242/256 FLITs for Gen 6.
var pcieLaneGBps = [...]float64{
	1: 2.5 * 8.0 / 10 / 8,
	2: 5 * 8.0 / 10 / 8,
	3: 8 * 128.0 / 130 / 8,
	4: 16 * 128.0 / 130 / 8,
	5: 32 * 128.0 / 130 / 8,
	6: 64 * 242.0 / 256 / 8,
}

// PCIeGBps returns the peak one-direction bandwidth of a PCIe link of
// generation gen (1-6) and width lanes, in GB/s: 31.5 for Gen 4 x16. It
// returns 0, meaning unknown, for a generation outside the table or a
// non-positive width.
func PCIeGBps(gen, width int) float64 {
	if gen < 1 || gen >= len(pcieLaneGBps) || width < 1 {
		return 0
	}
	return pcieLaneGBps[gen] * float64(width)
}

// gpu is what Probe reads from one device: a whole GPU or a MIG device.
type gpu struct {
	name       string
	memBytes   uint64
	nvlinkGBps float64 // 0 when any active link has an unknown version
	peers      int
	pcieGen    int
	pcieWidth  int
	mig        bool
}

// Probe initialises lib, reads the facts of every GPU it sees and shuts it
// down again. A GPU in MIG mode counts as its MIG devices, one without
// any as nothing. Errors wrap ErrNoDriver when lib cannot be initialised,
// ErrNoGPU when it sees no GPU (or only GPUs in MIG mode without MIG
// devices), ctx.Err() when ctx ends between devices,
// and otherwise the failing nvml.Return (which is an error), so callers can
// also test errors.Is(err, nvml.ERROR_GPU_IS_LOST).
func Probe(ctx context.Context, lib Library) (Facts, error) {
	if err := ctx.Err(); err != nil {
		return Facts{}, fmt.Errorf("gpuinfo: %w", err)
	}
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return Facts{}, fmt.Errorf("gpuinfo: %w: nvml init: %w", ErrNoDriver, ret)
	}
	// A failed Shutdown after a successful Init leaves only NVML's
	// reference count raised; the facts read are still right.
	defer func() { _ = lib.Shutdown() }()

	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return Facts{}, fmt.Errorf("gpuinfo: device count: %w", ret)
	}
	if n == 0 {
		return Facts{}, fmt.Errorf("gpuinfo: %w: nvml sees 0 devices", ErrNoGPU)
	}
	handles := make([]nvml.Device, n)
	for i := range handles {
		h, ret := lib.DeviceGetHandleByIndex(i)
		if ret == nvml.ERROR_NO_PERMISSION {
			// NVML counts every GPU of the node, but a Slurm step whose
			// device cgroup (ConstrainDevices) holds some of them may not
			// open the others: their facts cannot be read, and the facts
			// of a part would misstate the node.
			return Facts{}, fmt.Errorf("gpuinfo: GPU %d of %d: handle: %w: this process may not open it "+
				"(a Slurm step's device cgroup holds its own GPUs only); probe with all of the node's GPUs, srun --gres=gpu:%d", i, n, ret, n)
		}
		if ret != nvml.SUCCESS {
			return Facts{}, fmt.Errorf("gpuinfo: GPU %d: handle: %w", i, ret)
		}
		handles[i] = h
	}
	// whole: the GPUs not in MIG mode, nil for one in it. NVLink peers are
	// whole GPUs: a GPU in MIG mode offers none, since MIG devices have no
	// peer-to-peer.
	whole := make([]nvml.Device, n)
	for i, h := range handles {
		on, err := migEnabled(h)
		if err != nil {
			return Facts{}, fmt.Errorf("gpuinfo: GPU %d: %w", i, err)
		}
		if !on {
			whole[i] = h
		}
	}
	var gpus []gpu
	for i, h := range handles {
		if err := ctx.Err(); err != nil {
			return Facts{}, fmt.Errorf("gpuinfo: %w", err)
		}
		var gs []gpu
		var err error
		if whole[i] == nil {
			gs, err = probeMig(h)
		} else {
			var g gpu
			g, err = probeDevice(h, i, whole)
			gs = []gpu{g}
		}
		if err != nil {
			return Facts{}, fmt.Errorf("gpuinfo: GPU %d: %w", i, err)
		}
		gpus = append(gpus, gs...)
	}
	if len(gpus) == 0 {
		return Facts{}, fmt.Errorf("gpuinfo: %w: nvml sees %d GPUs, all in MIG mode with no MIG devices", ErrNoGPU, n)
	}
	return summarize(gpus), nil
}

// ProbeMem initialises lib and returns the total memory, in GiB as
// Facts.MemGB, of the smallest GPU this process may open, then shuts lib
// down. Unlike Probe it passes over the GPUs it may not open
// (ERROR_NO_PERMISSION): a Slurm step where Slurm constrains devices opens
// its own GPUs only, and those are what it runs on. A GPU in MIG mode
// counts as the smallest of its MIG devices the process may open, since
// a job there runs on MIG devices, not on the whole GPU; one with none
// counts as nothing. Errors wrap ErrNoDriver, ErrNoGPU (none it may
// open), ctx.Err() or the failing nvml.Return, as Probe's do.
func ProbeMem(ctx context.Context, lib Library) (float64, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("gpuinfo: %w", err)
	}
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return 0, fmt.Errorf("gpuinfo: %w: nvml init: %w", ErrNoDriver, ret)
	}
	defer func() { _ = lib.Shutdown() }()
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return 0, fmt.Errorf("gpuinfo: device count: %w", ret)
	}
	smallest := 0.0
	for i := range n {
		if err := ctx.Err(); err != nil {
			return 0, fmt.Errorf("gpuinfo: %w", err)
		}
		h, ret := lib.DeviceGetHandleByIndex(i)
		if ret == nvml.ERROR_NO_PERMISSION {
			continue
		}
		if ret != nvml.SUCCESS {
			return 0, fmt.Errorf("gpuinfo: GPU %d: handle: %w", i, ret)
		}
		gib, err := usableMemGiB(h)
		if err != nil {
			return 0, fmt.Errorf("gpuinfo: GPU %d: %w", i, err)
		}
		if gib > 0 && (smallest == 0 || gib < smallest) {
			smallest = gib
		}
	}
	if smallest == 0 {
		return 0, fmt.Errorf("gpuinfo: %w: nvml sees %d devices, none this process may open", ErrNoGPU, n)
	}
	return smallest, nil
}

// usableMemGiB is the total memory, in GiB, of what GPU d gives a process
// to run on: the GPU's own, or in MIG mode the smallest of its MIG devices
// the process may open, 0 when it may open none. The smallest is the
// conservative reading where the process holds several.
func usableMemGiB(d Device) (float64, error) {
	on, err := migEnabled(d)
	if err != nil {
		return 0, err
	}
	if on {
		// The GPU's own memory is the whole GPU's, which no process in
		// MIG mode gets; unprivileged, NVML does not even report it.
		return migMemGiB(d)
	}
	mem, ret := d.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return 0, fmt.Errorf("memory info: %w", ret)
	}
	return float64(mem.Total) / (1 << 30), nil
}

// migEnabled says whether GPU d is in MIG mode now. A GPU without MIG
// (before Ampere) or a driver without it is not.
func migEnabled(d Device) (bool, error) {
	mode, _, ret := d.GetMigMode()
	switch {
	case ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_FUNCTION_NOT_FOUND:
		return false, nil
	case ret != nvml.SUCCESS:
		return false, fmt.Errorf("MIG mode: %w", ret)
	}
	return mode == nvml.DEVICE_MIG_ENABLE, nil
}

// migDevice is one MIG device of a GPU in MIG mode.
type migDevice struct {
	index    int         // the MIG device's index under its GPU
	dev      nvml.Device // nil where the process may not open it
	memBytes uint64
}

// migDevices reads the MIG devices of GPU d, which is in MIG mode, by
// index. An index without a MIG device (ERROR_NOT_FOUND) is passed over;
// one the process may not open, another job's where Slurm constrains
// devices (ERROR_NO_PERMISSION), comes back without handle or memory,
// for the caller to pass over or refuse.
func migDevices(d Device) ([]migDevice, error) {
	n, ret := d.GetMaxMigDeviceCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("MIG device count: %w", ret)
	}
	var out []migDevice
	for j := range n {
		m, ret := d.GetMigDeviceHandleByIndex(j)
		switch {
		case ret == nvml.ERROR_NOT_FOUND:
			continue
		case ret == nvml.ERROR_NO_PERMISSION:
			out = append(out, migDevice{index: j})
			continue
		case ret != nvml.SUCCESS:
			return nil, fmt.Errorf("MIG device %d: handle: %w", j, ret)
		}
		mem, ret := m.GetMemoryInfo()
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("MIG device %d: memory info: %w", j, ret)
		}
		out = append(out, migDevice{index: j, dev: m, memBytes: mem.Total})
	}
	return out, nil
}

// migMemGiB is the total memory, in GiB, of the smallest MIG device of d
// the process may open, 0 when it may open none.
func migMemGiB(d Device) (float64, error) {
	devs, err := migDevices(d)
	if err != nil {
		return 0, err
	}
	smallest := 0.0
	for _, m := range devs {
		if m.dev == nil {
			continue
		}
		if gib := float64(m.memBytes) / (1 << 30); smallest == 0 || gib < smallest {
			smallest = gib
		}
	}
	return smallest, nil
}

// probeMig reads the MIG devices of GPU d, which is in MIG mode, as the
// GPUs jobs run on: each has its own memory and name ("NVIDIA
// A100-SXM4-80GB MIG 1g.10gb"), no NVLink peer (MIG devices have no
// peer-to-peer, so traffic between them crosses the host), and the PCIe
// link of d. A GPU in MIG mode without MIG devices gives none.
func probeMig(d Device) ([]gpu, error) {
	gen, width, err := pcieLink(d)
	if err != nil {
		return nil, err
	}
	devs, err := migDevices(d)
	if err != nil {
		return nil, err
	}
	gpus := make([]gpu, 0, len(devs))
	for _, m := range devs {
		if m.dev == nil {
			// As for a whole GPU (Probe): the facts of some MIG devices
			// would misstate the node.
			return nil, fmt.Errorf("MIG device %d: handle: %w: this process may not open it "+
				"(a Slurm step's device cgroup holds its own MIG devices only); probe with all of the node's GPUs, "+
				"counting each MIG device as one as Slurm does", m.index, nvml.ERROR_NO_PERMISSION)
		}
		name, ret := m.dev.GetName()
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("MIG device %d: name: %w", m.index, ret)
		}
		gpus = append(gpus, gpu{name: name, memBytes: m.memBytes, pcieGen: gen, pcieWidth: width, mig: true})
	}
	return gpus, nil
}

// DetectMem is ProbeMem on the node's NVML.
func DetectMem(ctx context.Context) (float64, error) { return ProbeMem(ctx, nvml.New()) }

// probeDevice reads GPU self of handles, a whole GPU. Its NVLink peers are
// the other handles that are not nil.
func probeDevice(d Device, self int, handles []nvml.Device) (gpu, error) {
	var g gpu
	var ret nvml.Return
	if g.name, ret = d.GetName(); ret != nvml.SUCCESS {
		return gpu{}, fmt.Errorf("name: %w", ret)
	}
	mem, ret := d.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return gpu{}, fmt.Errorf("memory info: %w", ret)
	}
	g.memBytes = mem.Total

	links, unknown := 0, false
	for link := range nvml.NVLINK_MAX_LINKS {
		state, ret := d.GetNvLinkState(link)
		// NOT_SUPPORTED: the GPU has no NVLink; INVALID_ARGUMENT: it has
		// fewer links than the maximum.
		if ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_INVALID_ARGUMENT {
			continue
		}
		if ret != nvml.SUCCESS {
			return gpu{}, fmt.Errorf("nvlink %d state: %w", link, ret)
		}
		if state != nvml.FEATURE_ENABLED {
			continue
		}
		links++
		v, ret := d.GetNvLinkVersion(link)
		if ret == nvml.ERROR_NOT_SUPPORTED {
			unknown = true
			continue
		}
		if ret != nvml.SUCCESS {
			return gpu{}, fmt.Errorf("nvlink %d version: %w", link, ret)
		}
		if int(v) >= len(nvlinkLinkGBps) || nvlinkLinkGBps[v] == 0 {
			// A version newer than the table: better "unknown" than a guess.
			unknown = true
			continue
		}
		g.nvlinkGBps += nvlinkLinkGBps[v]
	}
	if unknown {
		g.nvlinkGBps = 0
	}
	if links > 0 {
		for j, peer := range handles {
			if j == self || peer == nil {
				continue
			}
			st, ret := d.GetP2PStatus(peer, nvml.P2P_CAPS_INDEX_NVLINK)
			if ret == nvml.ERROR_NOT_SUPPORTED {
				continue
			}
			if ret != nvml.SUCCESS {
				return gpu{}, fmt.Errorf("nvlink p2p status to GPU %d: %w", j, ret)
			}
			if st == nvml.P2P_STATUS_OK {
				g.peers++
			}
		}
	}

	var err error
	if g.pcieGen, g.pcieWidth, err = pcieLink(d); err != nil {
		return gpu{}, err
	}
	return g, nil
}

// pcieLink reads the PCIe generation and width of GPU d, 0 and 0 where
// NVML does not support them (e.g. SoC GPUs without PCIe): unknown.
func pcieLink(d Device) (gen, width int, err error) {
	gen, ret := d.GetMaxPcieLinkGeneration()
	if ret != nvml.SUCCESS && ret != nvml.ERROR_NOT_SUPPORTED {
		return 0, 0, fmt.Errorf("pcie generation: %w", ret)
	}
	width, wret := d.GetMaxPcieLinkWidth()
	if wret != nvml.SUCCESS && wret != nvml.ERROR_NOT_SUPPORTED {
		return 0, 0, fmt.Errorf("pcie width: %w", wret)
	}
	if ret != nvml.SUCCESS || wret != nvml.SUCCESS {
		return 0, 0, nil
	}
	return gen, width, nil
}

// summarize reduces per-GPU readings to the node's facts, keeping the
// weakest GPU's value of each.
func summarize(gpus []gpu) Facts {
	f := Facts{GPUs: len(gpus), Source: SourceNVML}
	var names []string
	slowest := -1.0
	for i, g := range gpus {
		mem := float64(g.memBytes) / (1 << 30)
		pcie := PCIeGBps(g.pcieGen, g.pcieWidth)
		if i == 0 {
			f.MemGB, f.NVLinkPeers, f.NVLinkGBps = mem, g.peers, g.nvlinkGBps
		}
		f.MemGB = min(f.MemGB, mem)
		f.NVLinkPeers = min(f.NVLinkPeers, g.peers)
		f.NVLinkGBps = min(f.NVLinkGBps, g.nvlinkGBps)
		if slowest < 0 || pcie < slowest {
			slowest = pcie
			f.PCIeGen, f.PCIeWidth, f.PCIeGBps = g.pcieGen, g.pcieWidth, pcie
			if pcie == 0 { // not reported, or a generation beyond the table
				f.PCIeGen, f.PCIeWidth = 0, 0
			}
		}
		f.MIG = f.MIG || g.mig
		if !slices.Contains(names, g.name) {
			names = append(names, g.name)
		}
	}
	f.Name = strings.Join(names, ", ")
	return f
}

// Detect probes the node's NVML and returns its facts. Where that fails it
// returns fallback with Source SourceConfig instead: at Info level when the
// node simply has no driver or no GPU (ErrNoDriver, ErrNoGPU; the normal
// case on a Slurm controller), at Warn level for any other failure, whose
// partial facts cannot be trusted. Each call logs one record to log; a nil
// log discards it.
func Detect(ctx context.Context, log *slog.Logger, fallback Facts) Facts {
	return detect(ctx, log, nvml.New(), fallback)
}

// detect is Detect on a given library.
func detect(ctx context.Context, log *slog.Logger, lib Library, fallback Facts) Facts {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	f, err := Probe(ctx, lib)
	if err == nil {
		log.InfoContext(ctx, "gpu facts from nvml",
			"gpus", f.GPUs, "name", f.Name, "mem_gb", f.MemGB,
			"nvlink_peers", f.NVLinkPeers, "nvlink_gbps", f.NVLinkGBps,
			"pcie_gen", f.PCIeGen, "pcie_width", f.PCIeWidth, "mig", f.MIG)
		return f
	}
	fallback.Source = SourceConfig
	level := slog.LevelWarn
	if errors.Is(err, ErrNoDriver) || errors.Is(err, ErrNoGPU) {
		level = slog.LevelInfo
	}
	log.Log(ctx, level, "no gpu facts from nvml, using configured values", "err", err)
	return fallback
}

// nvlinkEfficiency converts peak one-direction NVLink bandwidth into the
// effective all-reduce bandwidth model.Env.IntraGBps means. It is the
// calibration of model.DefaultEnv (docs/model.md): 150 GB/s achieved on an
// A800, whose 8 NVLink 3 links peak at 8 x 25 = 200 GB/s.
const nvlinkEfficiency = 150.0 / (8 * 25)

// ReadFacts reads a Facts file, as rubick gpuinfo writes it (rubickd's
// gpu_facts).
func ReadFacts(path string) (Facts, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return Facts{}, fmt.Errorf("gpu_facts: %w", err)
	}
	var f Facts
	if err := json.Unmarshal(raw, &f); err != nil {
		return Facts{}, fmt.Errorf("gpu_facts %s: %w", path, err)
	}
	return f, nil
}

// ApplyTo returns env with the fields NVML measures replaced by f's when f
// was measured (Source SourceNVML); configured facts leave env unchanged,
// and so does a zero (unknown) fact.
//
//   - NodeGPUs from GPUs and GPUMemGB from MemGB.
//   - IntraGBps from NVLinkGBps times the A800 calibration's efficiency
//     (0.75) when every pair of GPUs is NVLink-connected; when some pair is
//     not (as MIG devices never are), a collective over the whole node
//     crosses PCIe, so IntraGBps becomes env.PCIeGBps.
//
// InterGBps and GPUsPerNIC stay as configured because NVML does not see
// the network; PCIeGBps stays too because the effective host-device copy
// rate depends on the host (root complex, PCIe switch shared with the NIC,
// NUMA) more than on the link's peak, which f.PCIeGBps reports only for
// information. Host memory and CPUs are not GPU facts.
func ApplyTo(env model.Env, f Facts) model.Env {
	if f.Source != SourceNVML {
		return env
	}
	if f.GPUs > 0 {
		env.NodeGPUs = f.GPUs
	}
	if f.MemGB > 0 {
		env.GPUMemGB = f.MemGB
	}
	switch {
	case f.GPUs < 2:
		// One GPU: no intra-node collective to price.
	case f.NVLinkPeers < f.GPUs-1:
		env.IntraGBps = env.PCIeGBps
	case f.NVLinkGBps > 0:
		env.IntraGBps = f.NVLinkGBps * nvlinkEfficiency
	}
	return env
}
