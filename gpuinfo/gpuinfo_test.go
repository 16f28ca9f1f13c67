package gpuinfo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/rubick-sched/rubick/model"
)

// approx compares computed bandwidths to the 1e-9 relative.
var approx = cmpopts.EquateApprox(1e-9, 0)

// gen4x16 is the peak one-direction bandwidth of PCIe Gen 4 x16.
const gen4x16 = 16 * 16 * 128.0 / 130 / 8

func TestProbeDGXA100(t *testing.T) {
	s := newDGXA100()
	// The mock's own figures, which the wanted facts rest on.
	for i, h := range s.Devices {
		d := h.(*dgxa100.Device)
		if d.MemoryInfo.Total != 40<<30 || d.Name != "Mock NVIDIA A100-SXM4-40GB" {
			t.Fatalf("mock GPU %d: %q with %d bytes, want the A100 40 GB of 40 GiB", i, d.Name, d.MemoryInfo.Total)
		}
	}

	got, err := Probe(t.Context(), s)
	if err != nil {
		t.Fatalf("Probe: %v", err)
	}
	want := Facts{
		GPUs:        8,
		MemGB:       40,
		Name:        "Mock NVIDIA A100-SXM4-40GB",
		NVLinkPeers: 7,
		NVLinkGBps:  300, // 12 links x 25 GB/s
		PCIeGen:     4,
		PCIeWidth:   16,
		PCIeGBps:    gen4x16,
		Source:      SourceNVML,
	}
	if diff := cmp.Diff(want, got, approx); diff != "" {
		t.Errorf("facts (-want +got):\n%s", diff)
	}
	if n, m := len(s.InitCalls()), len(s.ShutdownCalls()); n != 1 || m != 1 {
		t.Errorf("Init called %d times, Shutdown %d; want 1 and 1", n, m)
	}
}

func TestProbeTopologies(t *testing.T) {
	tests := map[string]struct {
		lib  func() *fakeLib
		want Facts
	}{
		"hgx a800": {
			lib: func() *fakeLib { return hgxA800(8) },
			want: Facts{GPUs: 8, MemGB: 80, Name: "NVIDIA A800-SXM4-80GB", NVLinkPeers: 7, NVLinkGBps: 200,
				PCIeGen: 4, PCIeWidth: 16, PCIeGBps: gen4x16, Source: SourceNVML},
		},
		"pcie only, no nvlink": {
			lib: func() *fakeLib {
				l := hgxA800(4)
				for _, d := range l.devs {
					d.links, d.peers = nil, nil
				}
				return l
			},
			want: Facts{GPUs: 4, MemGB: 80, Name: "NVIDIA A800-SXM4-80GB",
				PCIeGen: 4, PCIeWidth: 16, PCIeGBps: gen4x16, Source: SourceNVML},
		},
		"nvlink bridges join pairs": {
			lib: func() *fakeLib {
				l := hgxA800(4)
				for i, d := range l.devs {
					d.links = d.links[:4]
					d.peers = []int{i ^ 1}
				}
				return l
			},
			want: Facts{GPUs: 4, MemGB: 80, Name: "NVIDIA A800-SXM4-80GB", NVLinkPeers: 1, NVLinkGBps: 100,
				PCIeGen: 4, PCIeWidth: 16, PCIeGBps: gen4x16, Source: SourceNVML},
		},
		"one gpu without any peer": {
			lib: func() *fakeLib {
				l := hgxA800(4)
				l.devs[2].links[0] = nvml.FEATURE_DISABLED
				l.devs[3].links, l.devs[3].peers = nil, nil
				return l
			},
			want: Facts{GPUs: 4, MemGB: 80, Name: "NVIDIA A800-SXM4-80GB", NVLinkPeers: 0, NVLinkGBps: 0,
				PCIeGen: 4, PCIeWidth: 16, PCIeGBps: gen4x16, Source: SourceNVML},
		},
		"inactive link lowers bandwidth": {
			lib: func() *fakeLib {
				l := hgxA800(8)
				l.devs[5].links[7] = nvml.FEATURE_DISABLED
				return l
			},
			want: Facts{GPUs: 8, MemGB: 80, Name: "NVIDIA A800-SXM4-80GB", NVLinkPeers: 7, NVLinkGBps: 175,
				PCIeGen: 4, PCIeWidth: 16, PCIeGBps: gen4x16, Source: SourceNVML},
		},
		"nvlink 5 per-link rate": {
			lib: func() *fakeLib {
				l := hgxA800(2)
				for _, d := range l.devs {
					d.version = uint32(nvml.NVLINK_VERSION_5_0)
				}
				return l
			},
			want: Facts{GPUs: 2, MemGB: 80, Name: "NVIDIA A800-SXM4-80GB", NVLinkPeers: 1, NVLinkGBps: 400,
				PCIeGen: 4, PCIeWidth: 16, PCIeGBps: gen4x16, Source: SourceNVML},
		},
		"nvlink version beyond the table is unknown": {
			lib: func() *fakeLib {
				l := hgxA800(2)
				l.devs[1].version = 99
				return l
			},
			want: Facts{GPUs: 2, MemGB: 80, Name: "NVIDIA A800-SXM4-80GB", NVLinkPeers: 1, NVLinkGBps: 0,
				PCIeGen: 4, PCIeWidth: 16, PCIeGBps: gen4x16, Source: SourceNVML},
		},
		"nvlink version not supported is unknown": {
			lib: func() *fakeLib {
				l := hgxA800(2)
				l.devs[0].fail = map[string]nvml.Return{"GetNvLinkVersion": nvml.ERROR_NOT_SUPPORTED}
				return l
			},
			want: Facts{GPUs: 2, MemGB: 80, Name: "NVIDIA A800-SXM4-80GB", NVLinkPeers: 1, NVLinkGBps: 0,
				PCIeGen: 4, PCIeWidth: 16, PCIeGBps: gen4x16, Source: SourceNVML},
		},
		"mixed gpus: smallest memory, both names": {
			lib: func() *fakeLib {
				l := hgxA800(2)
				l.devs[1].name, l.devs[1].memBytes = "NVIDIA A100-SXM4-40GB", 40<<30
				return l
			},
			want: Facts{GPUs: 2, MemGB: 40, Name: "NVIDIA A800-SXM4-80GB, NVIDIA A100-SXM4-40GB", NVLinkPeers: 1,
				NVLinkGBps: 200, PCIeGen: 4, PCIeWidth: 16, PCIeGBps: gen4x16, Source: SourceNVML},
		},
		"slowest pcie link": {
			lib: func() *fakeLib {
				l := hgxA800(4)
				l.devs[1].gen = 3
				l.devs[2].width = 8
				return l
			},
			want: Facts{GPUs: 4, MemGB: 80, Name: "NVIDIA A800-SXM4-80GB", NVLinkPeers: 3, NVLinkGBps: 200,
				PCIeGen: 3, PCIeWidth: 16, PCIeGBps: 16 * 8 * 128.0 / 130 / 8, Source: SourceNVML},
		},
		"pcie not supported is unknown": {
			lib: func() *fakeLib {
				l := hgxA800(2)
				l.devs[0].fail = map[string]nvml.Return{"GetMaxPcieLinkGeneration": nvml.ERROR_NOT_SUPPORTED}
				return l
			},
			want: Facts{GPUs: 2, MemGB: 80, Name: "NVIDIA A800-SXM4-80GB", NVLinkPeers: 1, NVLinkGBps: 200,
				Source: SourceNVML},
		},
		"single gpu": {
			lib: func() *fakeLib {
				l := hgxA800(1)
				l.devs[0].links = nil
				return l
			},
			want: Facts{GPUs: 1, MemGB: 80, Name: "NVIDIA A800-SXM4-80GB",
				PCIeGen: 4, PCIeWidth: 16, PCIeGBps: gen4x16, Source: SourceNVML},
		},
		// MIG: Slurm schedules MIG devices as GPUs, so they are the node's
		// GPUs, with their own memory and no peer-to-peer.
		"MIG: gpus are the MIG devices": {
			lib: func() *fakeLib { return migNode() },
			want: Facts{GPUs: 5, MemGB: 9.5, Name: "NVIDIA A800-SXM4-80GB MIG 1g.10gb, NVIDIA A800-SXM4-80GB MIG 2g.20gb",
				PCIeGen: 4, PCIeWidth: 16, PCIeGBps: gen4x16, Source: SourceNVML, MIG: true},
		},
		"MIG beside a whole gpu: both count, weakest values": {
			lib: func() *fakeLib {
				l := hgxA800(2)
				migA800(l.devs[0], mig2g20, mig2g20)
				l.devs[0].gen = 3 // the MIG devices' link is their GPU's
				return l
			},
			want: Facts{GPUs: 3, MemGB: 19.5, Name: "NVIDIA A800-SXM4-80GB MIG 2g.20gb, NVIDIA A800-SXM4-80GB",
				PCIeGen: 3, PCIeWidth: 16, PCIeGBps: 16 * 8 * 128.0 / 130 / 8, Source: SourceNVML, MIG: true},
		},
		"MIG mode without MIG devices: no gpu, no nvlink peer": {
			lib: func() *fakeLib {
				l := hgxA800(3)
				migA800(l.devs[2])
				return l
			},
			want: Facts{GPUs: 2, MemGB: 80, Name: "NVIDIA A800-SXM4-80GB", NVLinkPeers: 1, NVLinkGBps: 200,
				PCIeGen: 4, PCIeWidth: 16, PCIeGBps: gen4x16, Source: SourceNVML},
		},
		"MIG not supported: whole gpus": {
			lib: func() *fakeLib {
				l := hgxA800(4)
				for i, d := range l.devs {
					d.fail = map[string]nvml.Return{"GetMigMode": nvml.ERROR_NOT_SUPPORTED}
					if i == 3 {
						d.fail["GetMigMode"] = nvml.ERROR_FUNCTION_NOT_FOUND
					}
				}
				return l
			},
			want: Facts{GPUs: 4, MemGB: 80, Name: "NVIDIA A800-SXM4-80GB", NVLinkPeers: 3, NVLinkGBps: 200,
				PCIeGen: 4, PCIeWidth: 16, PCIeGBps: gen4x16, Source: SourceNVML},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			l := tc.lib()
			got, err := Probe(t.Context(), l)
			if err != nil {
				t.Fatalf("Probe: %v", err)
			}
			if diff := cmp.Diff(tc.want, got, approx); diff != "" {
				t.Errorf("facts (-want +got):\n%s", diff)
			}
			if l.inits != 1 || l.shutdowns != 1 {
				t.Errorf("Init called %d times, Shutdown %d; want 1 and 1", l.inits, l.shutdowns)
			}
		})
	}
}

func TestProbeErrors(t *testing.T) {
	// failOn injects ret into method of GPU 5 of an 8-GPU node.
	failOn := func(method string, ret nvml.Return) func() *fakeLib {
		return func() *fakeLib {
			l := hgxA800(8)
			l.devs[5].fail = map[string]nvml.Return{method: ret}
			return l
		}
	}
	// migFailOn puts GPU 5 of an 8-GPU node in MIG mode with two MIG
	// devices and lets change inject a failure.
	migFailOn := func(change func(d *fakeDevice)) func() *fakeLib {
		return func() *fakeLib {
			l := hgxA800(8)
			migA800(l.devs[5], mig3g40, mig3g40)
			change(l.devs[5])
			return l
		}
	}
	tests := map[string]struct {
		lib func() *fakeLib
		// want are errors the result must wrap.
		want []error
		// initOK says whether Init succeeded, so Shutdown must follow.
		initOK bool
		// gpu5 says whether the message must name GPU 5.
		gpu5 bool
		// hint is what the message must also say.
		hint string
	}{
		"library not found": {
			lib:  func() *fakeLib { l := hgxA800(8); l.initRet = nvml.ERROR_LIBRARY_NOT_FOUND; return l },
			want: []error{ErrNoDriver, nvml.ERROR_LIBRARY_NOT_FOUND},
		},
		"driver not loaded": {
			lib:  func() *fakeLib { l := hgxA800(8); l.initRet = nvml.ERROR_DRIVER_NOT_LOADED; return l },
			want: []error{ErrNoDriver, nvml.ERROR_DRIVER_NOT_LOADED},
		},
		"no devices": {
			lib:    func() *fakeLib { return hgxA800(0) },
			want:   []error{ErrNoGPU},
			initOK: true,
		},
		"device count fails": {
			lib:    func() *fakeLib { l := hgxA800(8); l.countRet = nvml.ERROR_UNKNOWN; return l },
			want:   []error{nvml.ERROR_UNKNOWN},
			initOK: true,
		},
		"handle fails": {
			lib: func() *fakeLib {
				l := hgxA800(8)
				l.handleRet = map[int]nvml.Return{5: nvml.ERROR_GPU_IS_LOST}
				return l
			},
			want: []error{nvml.ERROR_GPU_IS_LOST}, initOK: true, gpu5: true,
		},
		"handle denied by the device cgroup": {
			lib: func() *fakeLib {
				l := hgxA800(8)
				l.handleRet = map[int]nvml.Return{5: nvml.ERROR_NO_PERMISSION}
				return l
			},
			want: []error{nvml.ERROR_NO_PERMISSION}, initOK: true, gpu5: true,
			hint: "GPU 5 of 8: handle: ERROR_NO_PERMISSION: this process may not open it (a Slurm step's device cgroup holds its own GPUs only); probe with all of the node's GPUs, srun --gres=gpu:8",
		},
		"name fails": {
			lib: failOn("GetName", nvml.ERROR_UNKNOWN), want: []error{nvml.ERROR_UNKNOWN}, initOK: true, gpu5: true,
		},
		"memory info fails": {
			lib: failOn("GetMemoryInfo", nvml.ERROR_GPU_IS_LOST), want: []error{nvml.ERROR_GPU_IS_LOST}, initOK: true, gpu5: true,
		},
		"nvlink state fails": {
			lib: failOn("GetNvLinkState", nvml.ERROR_UNKNOWN), want: []error{nvml.ERROR_UNKNOWN}, initOK: true, gpu5: true,
		},
		"nvlink version fails": {
			lib: failOn("GetNvLinkVersion", nvml.ERROR_UNKNOWN), want: []error{nvml.ERROR_UNKNOWN}, initOK: true, gpu5: true,
		},
		"p2p status fails": {
			lib: failOn("GetP2PStatus", nvml.ERROR_NO_PERMISSION), want: []error{nvml.ERROR_NO_PERMISSION}, initOK: true, gpu5: true,
		},
		"pcie generation fails": {
			lib: failOn("GetMaxPcieLinkGeneration", nvml.ERROR_UNKNOWN), want: []error{nvml.ERROR_UNKNOWN}, initOK: true, gpu5: true,
		},
		"pcie width fails": {
			lib: failOn("GetMaxPcieLinkWidth", nvml.ERROR_UNKNOWN), want: []error{nvml.ERROR_UNKNOWN}, initOK: true, gpu5: true,
		},
		"MIG mode fails": {
			lib: failOn("GetMigMode", nvml.ERROR_GPU_IS_LOST), want: []error{nvml.ERROR_GPU_IS_LOST}, initOK: true, gpu5: true,
			hint: "GPU 5: MIG mode: ERROR_GPU_IS_LOST",
		},
		"MIG device count fails": {
			lib:  migFailOn(func(d *fakeDevice) { d.fail["GetMaxMigDeviceCount"] = nvml.ERROR_UNKNOWN }),
			want: []error{nvml.ERROR_UNKNOWN}, initOK: true, gpu5: true,
			hint: "GPU 5: MIG device count: ERROR_UNKNOWN",
		},
		"MIG handle fails": {
			lib:  migFailOn(func(d *fakeDevice) { d.migRet = map[int]nvml.Return{1: nvml.ERROR_GPU_IS_LOST} }),
			want: []error{nvml.ERROR_GPU_IS_LOST}, initOK: true, gpu5: true,
			hint: "GPU 5: MIG device 1: handle: ERROR_GPU_IS_LOST",
		},
		"MIG handle denied by the device cgroup": {
			lib:  migFailOn(func(d *fakeDevice) { d.migRet = map[int]nvml.Return{1: nvml.ERROR_NO_PERMISSION} }),
			want: []error{nvml.ERROR_NO_PERMISSION}, initOK: true, gpu5: true,
			hint: "GPU 5: MIG device 1: handle: ERROR_NO_PERMISSION: this process may not open it",
		},
		"MIG device memory fails": {
			lib: migFailOn(func(d *fakeDevice) {
				d.mig[1].fail = map[string]nvml.Return{"GetMemoryInfo": nvml.ERROR_GPU_IS_LOST}
			}),
			want: []error{nvml.ERROR_GPU_IS_LOST}, initOK: true, gpu5: true,
			hint: "GPU 5: MIG device 1: memory info: ERROR_GPU_IS_LOST",
		},
		"MIG device name fails": {
			lib:  migFailOn(func(d *fakeDevice) { d.mig[0].fail = map[string]nvml.Return{"GetName": nvml.ERROR_UNKNOWN} }),
			want: []error{nvml.ERROR_UNKNOWN}, initOK: true, gpu5: true,
			hint: "GPU 5: MIG device 0: name: ERROR_UNKNOWN",
		},
		"MIG gpu's pcie fails": {
			lib:  migFailOn(func(d *fakeDevice) { d.fail["GetMaxPcieLinkWidth"] = nvml.ERROR_UNKNOWN }),
			want: []error{nvml.ERROR_UNKNOWN}, initOK: true, gpu5: true,
			hint: "GPU 5: pcie width: ERROR_UNKNOWN",
		},
		"MIG mode without MIG devices on every gpu": {
			lib: func() *fakeLib {
				l := hgxA800(2)
				migA800(l.devs[0])
				migA800(l.devs[1])
				return l
			},
			want: []error{ErrNoGPU}, initOK: true,
			hint: "nvml sees 2 GPUs, all in MIG mode with no MIG devices",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			l := tc.lib()
			got, err := Probe(t.Context(), l)
			if err == nil {
				t.Fatalf("Probe = %+v, want an error", got)
			}
			for _, w := range tc.want {
				if !errors.Is(err, w) {
					t.Errorf("Probe error %q does not wrap %q", err, w)
				}
			}
			if tc.initOK && errors.Is(err, ErrNoDriver) {
				t.Errorf("Probe error %q wraps ErrNoDriver after a successful Init", err)
			}
			if tc.gpu5 && !strings.Contains(err.Error(), "GPU 5") {
				t.Errorf("Probe error %q does not name GPU 5", err)
			}
			if !strings.Contains(err.Error(), tc.hint) {
				t.Errorf("Probe error %q does not say %q", err, tc.hint)
			}
			if diff := cmp.Diff(Facts{}, got); diff != "" {
				t.Errorf("facts returned with the error (-want +got):\n%s", diff)
			}
			wantShutdowns := 0
			if tc.initOK {
				wantShutdowns = 1
			}
			if l.shutdowns != wantShutdowns {
				t.Errorf("Shutdown called %d times, want %d", l.shutdowns, wantShutdowns)
			}
		})
	}
}

// migNode is a node of two A800 80 GB in MIG mode: GPU 0 with three
// 1g.10gb MIG devices, GPU 1 with two 2g.20gb and an index between them
// without one.
func migNode() *fakeLib {
	l := hgxA800(2)
	migA800(l.devs[0], mig1g10, mig1g10, mig1g10)
	migA800(l.devs[1], mig2g20, 0, mig2g20)
	return l
}

// TestProbeMIGPricing: the model prices a MIG node's jobs on MIG devices,
// whose collectives cross the host, not NVLink.
func TestProbeMIGPricing(t *testing.T) {
	f, err := Probe(t.Context(), migNode())
	if err != nil {
		t.Fatalf("Probe: %v", err)
	}
	want := model.DefaultEnv()
	want.NodeGPUs, want.GPUMemGB, want.IntraGBps = 5, 9.5, want.PCIeGBps
	if diff := cmp.Diff(want, ApplyTo(model.DefaultEnv(), f), approx); diff != "" {
		t.Errorf("env (-want +got):\n%s", diff)
	}
}

func TestProbeCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	l := hgxA800(8)
	if _, err := Probe(ctx, l); !errors.Is(err, context.Canceled) {
		t.Fatalf("Probe error %v, want context.Canceled", err)
	}
	if l.inits != 0 {
		t.Errorf("Init called %d times after cancellation, want 0", l.inits)
	}
}

// TestProbeRealNVMLWithoutDriver runs the real go-nvml, which dlopens
// libnvidia-ml: on a machine without the driver Probe must say ErrNoDriver,
// not panic. On a GPU node it reports what it found instead.
func TestProbeRealNVMLWithoutDriver(t *testing.T) {
	f, err := Probe(t.Context(), nvml.New())
	if err == nil {
		t.Skipf("NVML is present here; probed %+v", f)
	}
	if !errors.Is(err, ErrNoDriver) {
		t.Fatalf("Probe error %q, want ErrNoDriver", err)
	}
	t.Logf("Probe error: %v", err)
}

// MIG device sizes of an A100 or A800 80 GB, in bytes, as nvidia-smi mig
// -lgip lists them: 1g.10gb 9.5 GiB, 2g.20gb 19.5 GiB, 3g.40gb 39.25 GiB.
const (
	mig1g10 = 9728 << 20
	mig2g20 = 19968 << 20
	mig3g40 = 40192 << 20
)

// migProfiles names the MIG devices of the sizes above.
var migProfiles = map[uint64]string{mig1g10: "1g.10gb", mig2g20: "2g.20gb", mig3g40: "3g.40gb"}

// migA800 puts GPU d in MIG mode with MIG devices of the given sizes
// (bytes) by index, 0 where there is none, named as NVML names them. Its
// own memory can no longer be read, as for a process without privileges.
// The MIG devices report no PCIe link: a GPU's is its parent's.
func migA800(d *fakeDevice, sizes ...uint64) {
	d.migMode = nvml.DEVICE_MIG_ENABLE
	d.mig = make([]*fakeDevice, 7)
	for j, b := range sizes {
		if b > 0 {
			d.mig[j] = &fakeDevice{name: d.name + " MIG " + migProfiles[b], memBytes: b}
		}
	}
	d.fail = map[string]nvml.Return{"GetMemoryInfo": nvml.ERROR_NO_PERMISSION}
}

// TestProbeMem: the memory of the smallest GPU the process may open. A
// Slurm step where Slurm constrains devices opens its own GPUs only; the
// others are passed over, not an error as they are to Probe. A GPU in MIG
// mode counts as its smallest MIG device the process may open.
func TestProbeMem(t *testing.T) {
	// own holds GPUs 4-7 of an 8-GPU node whose GPUs 0-3 are smaller.
	own := func() *fakeLib {
		l := hgxA800(8)
		l.handleRet = map[int]nvml.Return{}
		for i := range 4 {
			l.devs[i].memBytes = 40 << 30
			l.handleRet[i] = nvml.ERROR_NO_PERMISSION
		}
		return l
	}
	tests := map[string]struct {
		lib     Library
		want    float64
		wantErr []error
	}{
		"dgx a100":  {lib: newDGXA100(), want: 40},
		"hgx a800":  {lib: hgxA800(8), want: 80},
		"mixed":     {lib: func() Library { l := hgxA800(8); l.devs[6].memBytes = 40 << 30; return l }(), want: 40},
		"own GPUs":  {lib: own(), want: 80},
		"no driver": {lib: &fakeLib{initRet: nvml.ERROR_LIBRARY_NOT_FOUND}, wantErr: []error{ErrNoDriver, nvml.ERROR_LIBRARY_NOT_FOUND}},
		"no gpu":    {lib: hgxA800(0), wantErr: []error{ErrNoGPU}},
		"none it may open": {lib: func() Library {
			l := own()
			for i := 4; i < 8; i++ {
				l.handleRet[i] = nvml.ERROR_NO_PERMISSION
			}
			return l
		}(), wantErr: []error{ErrNoGPU}},
		"gpu lost": {lib: func() Library {
			l := hgxA800(8)
			l.devs[3].fail = map[string]nvml.Return{"GetMemoryInfo": nvml.ERROR_GPU_IS_LOST}
			return l
		}(), wantErr: []error{nvml.ERROR_GPU_IS_LOST}},
		// MIG: the job runs on MIG devices, whose memory is what counts,
		// not the whole GPU's (which NVML does not give an unprivileged
		// process in MIG mode).
		"MIG 1g.10gb": {lib: func() Library {
			l := hgxA800(8)
			migA800(l.devs[0], mig1g10, mig1g10, mig1g10, mig1g10, mig1g10, mig1g10, mig1g10)
			return l
		}(), want: 9.5},
		"MIG, privileged": {lib: func() Library {
			// Root reads the whole GPU's 80 GB, which no job gets.
			l := hgxA800(8)
			migA800(l.devs[0], mig3g40, mig3g40)
			l.devs[0].fail = nil
			return l
		}(), want: 39.25},
		"MIG, slices of two sizes": {lib: func() Library {
			l := hgxA800(8)
			migA800(l.devs[2], mig3g40, 0, 0, 0, mig1g10)
			return l
		}(), want: 9.5},
		"MIG, own slice": {lib: func() Library {
			// The job holds the 3g.40gb of GPU 4; its 1g.10gb are other
			// jobs', as are GPUs 5-7 and their slices.
			l := own()
			for i := 4; i < 8; i++ {
				migA800(l.devs[i], mig3g40, 0, 0, 0, mig1g10, mig1g10, mig1g10)
				if i > 4 {
					l.handleRet[i] = nvml.ERROR_NO_PERMISSION
				}
			}
			l.devs[4].migRet = map[int]nvml.Return{4: nvml.ERROR_NO_PERMISSION, 5: nvml.ERROR_NO_PERMISSION, 6: nvml.ERROR_NO_PERMISSION}
			return l
		}(), want: 39.25},
		"MIG, no slice it may open": {lib: func() Library {
			l := hgxA800(2)
			migA800(l.devs[0], mig3g40, mig3g40)
			l.devs[0].migRet = map[int]nvml.Return{0: nvml.ERROR_NO_PERMISSION, 1: nvml.ERROR_NO_PERMISSION}
			migA800(l.devs[1])
			return l
		}(), wantErr: []error{ErrNoGPU}},
		"MIG not supported": {lib: func() Library {
			l := hgxA800(8)
			for _, d := range l.devs {
				d.fail = map[string]nvml.Return{"GetMigMode": nvml.ERROR_NOT_SUPPORTED}
			}
			l.devs[1].memBytes = 32 << 30
			return l
		}(), want: 32},
		"MIG mode lost": {lib: func() Library {
			l := hgxA800(8)
			l.devs[5].fail = map[string]nvml.Return{"GetMigMode": nvml.ERROR_GPU_IS_LOST}
			return l
		}(), wantErr: []error{nvml.ERROR_GPU_IS_LOST}},
		"MIG device lost": {lib: func() Library {
			l := hgxA800(8)
			migA800(l.devs[0], mig1g10, mig1g10)
			l.devs[0].mig[1].fail = map[string]nvml.Return{"GetMemoryInfo": nvml.ERROR_GPU_IS_LOST}
			return l
		}(), wantErr: []error{nvml.ERROR_GPU_IS_LOST}},
		"MIG handle unknown error": {lib: func() Library {
			l := hgxA800(8)
			migA800(l.devs[0], mig1g10)
			l.devs[0].migRet = map[int]nvml.Return{0: nvml.ERROR_UNKNOWN}
			return l
		}(), wantErr: []error{nvml.ERROR_UNKNOWN}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ProbeMem(t.Context(), tc.lib)
			for _, w := range tc.wantErr {
				if !errors.Is(err, w) {
					t.Errorf("ProbeMem error %v, want it to wrap %v", err, w)
				}
			}
			if tc.wantErr == nil && (err != nil || got != tc.want) {
				t.Errorf("ProbeMem = %v, %v; want %v GiB", got, err, tc.want)
			}
			if l, ok := tc.lib.(*fakeLib); ok && l.initRet == nvml.SUCCESS && l.shutdowns != 1 {
				t.Errorf("Shutdown called %d times, want 1", l.shutdowns)
			}
		})
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	l := hgxA800(8)
	if _, err := ProbeMem(ctx, l); !errors.Is(err, context.Canceled) || l.inits != 0 {
		t.Errorf("ProbeMem after cancellation: %v, %d inits; want context.Canceled and none", err, l.inits)
	}
	// The real NVML: here, with no driver, nothing is known.
	if mem, err := DetectMem(t.Context()); err == nil {
		t.Logf("NVML is present here; smallest GPU %v GiB", mem)
	} else if !errors.Is(err, ErrNoDriver) {
		t.Errorf("DetectMem error %v, want ErrNoDriver without a driver", err)
	}
}

// logRecords returns a logger that records into buf and a function
// decoding what it recorded.
func logRecords(t *testing.T) (*slog.Logger, func() []map[string]any) {
	t.Helper()
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	return log, func() []map[string]any {
		var recs []map[string]any
		dec := json.NewDecoder(&buf)
		for dec.More() {
			var r map[string]any
			if err := dec.Decode(&r); err != nil {
				t.Fatalf("decoding log: %v", err)
			}
			recs = append(recs, r)
		}
		return recs
	}
}

func TestDetect(t *testing.T) {
	fallback := Facts{GPUs: 8, MemGB: 80, NVLinkPeers: 7, NVLinkGBps: 200}
	wantFallback := fallback
	wantFallback.Source = SourceConfig

	tests := map[string]struct {
		lib       Library
		want      Facts
		wantLevel string
	}{
		"dgx a100": {
			lib: newDGXA100(),
			want: Facts{GPUs: 8, MemGB: 40, Name: "Mock NVIDIA A100-SXM4-40GB", NVLinkPeers: 7, NVLinkGBps: 300,
				PCIeGen: 4, PCIeWidth: 16, PCIeGBps: gen4x16, Source: SourceNVML},
			wantLevel: "INFO",
		},
		"no driver": {
			lib:       &fakeLib{initRet: nvml.ERROR_LIBRARY_NOT_FOUND},
			want:      wantFallback,
			wantLevel: "INFO",
		},
		"no gpu": {
			lib:       hgxA800(0),
			want:      wantFallback,
			wantLevel: "INFO",
		},
		"gpu lost": {
			lib: func() Library {
				l := hgxA800(8)
				l.devs[3].fail = map[string]nvml.Return{"GetMemoryInfo": nvml.ERROR_GPU_IS_LOST}
				return l
			}(),
			want:      wantFallback,
			wantLevel: "WARN",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			log, records := logRecords(t)
			got := detect(t.Context(), log, tc.lib, fallback)
			if diff := cmp.Diff(tc.want, got, approx); diff != "" {
				t.Errorf("facts (-want +got):\n%s", diff)
			}
			recs := records()
			if len(recs) != 1 {
				t.Fatalf("logged %d records, want 1: %v", len(recs), recs)
			}
			if recs[0]["level"] != tc.wantLevel {
				t.Errorf("logged at %v, want %s: %v", recs[0]["level"], tc.wantLevel, recs[0])
			}
		})
	}
}

// TestDetectWithoutDriver is Detect end to end on the real NVML: here, with
// no driver, the configured facts come back.
func TestDetectWithoutDriver(t *testing.T) {
	if _, err := Probe(t.Context(), nvml.New()); err == nil {
		t.Skip("NVML is present here")
	}
	fallback := Facts{GPUs: 8, MemGB: 80, Name: "NVIDIA A800-SXM4-80GB", NVLinkPeers: 7, NVLinkGBps: 200, Source: SourceNVML}
	log, records := logRecords(t)
	got := Detect(t.Context(), log, fallback)
	want := fallback
	want.Source = SourceConfig
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("facts (-want +got):\n%s", diff)
	}
	if recs := records(); len(recs) != 1 || recs[0]["level"] != "INFO" {
		t.Errorf("log records %v, want one at INFO", recs)
	}
	// A nil logger discards.
	if got := Detect(t.Context(), nil, fallback); got.Source != SourceConfig {
		t.Errorf("Detect with nil log: source %q, want %q", got.Source, SourceConfig)
	}
}

func TestApplyTo(t *testing.T) {
	def := model.DefaultEnv()
	with := func(change func(*model.Env)) model.Env {
		e := model.DefaultEnv()
		change(&e)
		return e
	}
	tests := map[string]struct {
		facts Facts
		want  model.Env
	}{
		"configured facts keep env": {
			facts: Facts{GPUs: 4, MemGB: 40, NVLinkPeers: 3, NVLinkGBps: 300, Source: SourceConfig},
			want:  def,
		},
		"unknown source keeps env": {
			facts: Facts{GPUs: 4, MemGB: 40, NVLinkPeers: 3, NVLinkGBps: 300},
			want:  def,
		},
		"the artifact's a800 node reproduces DefaultEnv": {
			facts: Facts{GPUs: 8, MemGB: 80, NVLinkPeers: 7, NVLinkGBps: 200, PCIeGen: 4, PCIeWidth: 16,
				PCIeGBps: gen4x16, Source: SourceNVML},
			want: def,
		},
		"dgx a100": {
			facts: Facts{GPUs: 8, MemGB: 40, NVLinkPeers: 7, NVLinkGBps: 300, PCIeGen: 4, PCIeWidth: 16,
				PCIeGBps: gen4x16, Source: SourceNVML},
			want: with(func(e *model.Env) { e.GPUMemGB, e.IntraGBps = 40, 225 }),
		},
		"pcie-only node prices collectives at pcie": {
			facts: Facts{GPUs: 4, MemGB: 48, PCIeGen: 4, PCIeWidth: 16, PCIeGBps: gen4x16, Source: SourceNVML},
			want:  with(func(e *model.Env) { e.NodeGPUs, e.GPUMemGB, e.IntraGBps = 4, 48, e.PCIeGBps }),
		},
		"nvlink pairs only prices collectives at pcie": {
			facts: Facts{GPUs: 8, MemGB: 80, NVLinkPeers: 1, NVLinkGBps: 300, Source: SourceNVML},
			want:  with(func(e *model.Env) { e.IntraGBps = e.PCIeGBps }),
		},
		"unknown nvlink bandwidth keeps intra": {
			facts: Facts{GPUs: 4, MemGB: 80, NVLinkPeers: 3, Source: SourceNVML},
			want:  with(func(e *model.Env) { e.NodeGPUs = 4 }),
		},
		"single gpu keeps intra": {
			facts: Facts{GPUs: 1, MemGB: 24, Source: SourceNVML},
			want:  with(func(e *model.Env) { e.NodeGPUs, e.GPUMemGB = 1, 24 }),
		},
		"unknown memory keeps gpu memory": {
			facts: Facts{GPUs: 8, NVLinkPeers: 7, NVLinkGBps: 200, Source: SourceNVML},
			want:  def,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := ApplyTo(model.DefaultEnv(), tc.facts)
			if diff := cmp.Diff(tc.want, got, approx); diff != "" {
				t.Errorf("env (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPCIeGBps(t *testing.T) {
	tests := []struct {
		gen, width int
		want       float64
	}{
		{1, 16, 4},
		{2, 16, 8},
		{3, 16, 15.754},
		{4, 16, 31.508},
		{4, 8, 15.754},
		{5, 16, 63.015},
		{6, 16, 121},
		{0, 16, 0},
		{7, 16, 0},
		{4, 0, 0},
		{-1, -1, 0},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("gen%d_x%d", tc.gen, tc.width), func(t *testing.T) {
			if diff := cmp.Diff(tc.want, PCIeGBps(tc.gen, tc.width), cmpopts.EquateApprox(1e-4, 0)); diff != "" {
				t.Errorf("PCIeGBps(%d, %d) (-want +got):\n%s", tc.gen, tc.width, diff)
			}
		})
	}
}

// TestFactsJSON pins the JSON a node-side probe writes and the
// configuration reads back.
func TestFactsJSON(t *testing.T) {
	f := Facts{GPUs: 8, MemGB: 40, Name: "NVIDIA A100-SXM4-40GB", NVLinkPeers: 7, NVLinkGBps: 300,
		PCIeGen: 4, PCIeWidth: 16, PCIeGBps: 31.5, Source: SourceNVML}
	b, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"gpus":8,"mem_gb":40,"name":"NVIDIA A100-SXM4-40GB","nvlink_peers":7,"nvlink_gbps":300,` +
		`"pcie_gen":4,"pcie_width":16,"pcie_gbps":31.5,"source":"nvml"}`
	if diff := cmp.Diff(want, string(b)); diff != "" {
		t.Errorf("JSON (-want +got):\n%s", diff)
	}
	var back Facts
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(f, back); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	// mig appears where MIG devices were counted.
	f.MIG = true
	if b, err = json.Marshal(f); err != nil {
		t.Fatal(err)
	}
	if want := strings.TrimSuffix(want, "}") + `,"mig":true}`; string(b) != want {
		t.Errorf("JSON with MIG %s, want %s", b, want)
	}
}

func ExampleApplyTo() {
	// Facts as Probe reads them on a DGX A100 40 GB.
	f := Facts{GPUs: 8, MemGB: 40, NVLinkPeers: 7, NVLinkGBps: 300, Source: SourceNVML}
	env := ApplyTo(model.DefaultEnv(), f)
	fmt.Println(env.NodeGPUs, env.GPUMemGB, env.IntraGBps, env.InterGBps)
	// Output: 8 40 225 12.5
}
