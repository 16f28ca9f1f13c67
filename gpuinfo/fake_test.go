package gpuinfo

import (
	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
)

// newDGXA100 returns go-nvml's fake DGX A100 with the NVLink and PCIe calls
// filled in: the mock leaves them unset, and calling an unset mock function
// panics. The values are those of a real DGX A100: each A100 has 12 NVLink
// 3.0 links, all to the NVSwitches, so every pair of GPUs is NVLink
// peer-to-peer capable; each GPU sits on a PCIe Gen 4 x16 link.
func newDGXA100() *dgxa100.Server {
	s := dgxa100.New()
	for _, h := range s.Devices {
		d := h.(*dgxa100.Device)
		d.GetNvLinkStateFunc = func(link int) (nvml.EnableState, nvml.Return) {
			if link >= 12 {
				return nvml.FEATURE_DISABLED, nvml.ERROR_INVALID_ARGUMENT
			}
			return nvml.FEATURE_ENABLED, nvml.SUCCESS
		}
		d.GetNvLinkVersionFunc = func(int) (uint32, nvml.Return) {
			return uint32(nvml.NVLINK_VERSION_3_0), nvml.SUCCESS
		}
		d.GetP2PStatusFunc = func(peer nvml.Device, idx nvml.GpuP2PCapsIndex) (nvml.GpuP2PStatus, nvml.Return) {
			if idx != nvml.P2P_CAPS_INDEX_NVLINK || peer == nvml.Device(d) {
				return nvml.P2P_STATUS_NOT_SUPPORTED, nvml.SUCCESS
			}
			return nvml.P2P_STATUS_OK, nvml.SUCCESS
		}
		d.GetMaxPcieLinkGenerationFunc = func() (int, nvml.Return) { return 4, nvml.SUCCESS }
		d.GetMaxPcieLinkWidthFunc = func() (int, nvml.Return) { return 16, nvml.SUCCESS }
	}
	return s
}

// fakeLib is a minimal Library over fakeDevices for topologies and failures
// the DGX A100 mock does not have.
type fakeLib struct {
	initRet  nvml.Return
	countRet nvml.Return
	devs     []*fakeDevice
	// handleRet injects a failure into DeviceGetHandleByIndex, by index.
	handleRet map[int]nvml.Return

	inits, shutdowns int
}

func (l *fakeLib) Init() nvml.Return { l.inits++; return l.initRet }

func (l *fakeLib) Shutdown() nvml.Return { l.shutdowns++; return nvml.SUCCESS }

func (l *fakeLib) DeviceGetCount() (int, nvml.Return) {
	if l.countRet != nvml.SUCCESS {
		return 0, l.countRet
	}
	return len(l.devs), nvml.SUCCESS
}

func (l *fakeLib) DeviceGetHandleByIndex(i int) (nvml.Device, nvml.Return) {
	if r, ok := l.handleRet[i]; ok {
		return nil, r
	}
	return l.devs[i], nvml.SUCCESS
}

// fakeDevice implements Device; the embedded nil nvml.Device completes
// nvml.Device so that any call outside Device panics, which flags a new
// NVML dependency in review.
type fakeDevice struct {
	nvml.Device
	idx      int
	name     string
	memBytes uint64
	// links holds the state of each NVLink the GPU has; nil means the GPU
	// does not support NVLink.
	links   []nvml.EnableState
	version uint32
	// peers holds the indices of the GPUs reachable by NVLink P2P.
	peers      []int
	gen, width int
	// migMode is the GPU's current MIG mode (nvml.DEVICE_MIG_ENABLE or
	// not). mig holds its MIG devices by index, as many as
	// GetMaxMigDeviceCount reports, nil where there is none; migRet
	// injects a failure into GetMigDeviceHandleByIndex, by index.
	migMode int
	mig     []*fakeDevice
	migRet  map[int]nvml.Return
	// fail injects a failure into the named method.
	fail map[string]nvml.Return
}

func (d *fakeDevice) failed(method string) (nvml.Return, bool) {
	r, ok := d.fail[method]
	return r, ok
}

func (d *fakeDevice) GetName() (string, nvml.Return) {
	if r, ok := d.failed("GetName"); ok {
		return "", r
	}
	return d.name, nvml.SUCCESS
}

func (d *fakeDevice) GetMemoryInfo() (nvml.Memory, nvml.Return) {
	if r, ok := d.failed("GetMemoryInfo"); ok {
		return nvml.Memory{}, r
	}
	return nvml.Memory{Total: d.memBytes}, nvml.SUCCESS
}

func (d *fakeDevice) GetNvLinkState(link int) (nvml.EnableState, nvml.Return) {
	if r, ok := d.failed("GetNvLinkState"); ok {
		return 0, r
	}
	switch {
	case d.links == nil:
		return 0, nvml.ERROR_NOT_SUPPORTED
	case link >= len(d.links):
		return 0, nvml.ERROR_INVALID_ARGUMENT
	}
	return d.links[link], nvml.SUCCESS
}

func (d *fakeDevice) GetNvLinkVersion(int) (uint32, nvml.Return) {
	if r, ok := d.failed("GetNvLinkVersion"); ok {
		return 0, r
	}
	return d.version, nvml.SUCCESS
}

func (d *fakeDevice) GetP2PStatus(peer nvml.Device, idx nvml.GpuP2PCapsIndex) (nvml.GpuP2PStatus, nvml.Return) {
	if r, ok := d.failed("GetP2PStatus"); ok {
		return 0, r
	}
	p := peer.(*fakeDevice)
	for _, j := range d.peers {
		if j == p.idx && idx == nvml.P2P_CAPS_INDEX_NVLINK {
			return nvml.P2P_STATUS_OK, nvml.SUCCESS
		}
	}
	return nvml.P2P_STATUS_NOT_SUPPORTED, nvml.SUCCESS
}

func (d *fakeDevice) GetMaxPcieLinkGeneration() (int, nvml.Return) {
	if r, ok := d.failed("GetMaxPcieLinkGeneration"); ok {
		return 0, r
	}
	return d.gen, nvml.SUCCESS
}

func (d *fakeDevice) GetMaxPcieLinkWidth() (int, nvml.Return) {
	if r, ok := d.failed("GetMaxPcieLinkWidth"); ok {
		return 0, r
	}
	return d.width, nvml.SUCCESS
}

func (d *fakeDevice) GetMigMode() (int, int, nvml.Return) {
	if r, ok := d.failed("GetMigMode"); ok {
		return 0, 0, r
	}
	return d.migMode, d.migMode, nvml.SUCCESS
}

func (d *fakeDevice) GetMaxMigDeviceCount() (int, nvml.Return) {
	if r, ok := d.failed("GetMaxMigDeviceCount"); ok {
		return 0, r
	}
	return len(d.mig), nvml.SUCCESS
}

func (d *fakeDevice) GetMigDeviceHandleByIndex(i int) (nvml.Device, nvml.Return) {
	if r, ok := d.migRet[i]; ok {
		return nil, r
	}
	if i >= len(d.mig) {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	if d.mig[i] == nil {
		return nil, nvml.ERROR_NOT_FOUND
	}
	return d.mig[i], nvml.SUCCESS
}

// hgxA800 returns a fake HGX A800 node of n GPUs, the artifact's hardware:
// 80 GB each, 8 active NVLink 3.0 links through NVSwitch (every pair P2P),
// PCIe Gen 4 x16. Tests change it to the topology they need.
func hgxA800(n int) *fakeLib {
	l := &fakeLib{}
	for i := range n {
		d := &fakeDevice{
			idx:      i,
			name:     "NVIDIA A800-SXM4-80GB",
			memBytes: 80 << 30,
			links:    make([]nvml.EnableState, 8),
			version:  uint32(nvml.NVLINK_VERSION_3_0),
			gen:      4,
			width:    16,
		}
		for k := range d.links {
			d.links[k] = nvml.FEATURE_ENABLED
		}
		for j := range n {
			if j != i {
				d.peers = append(d.peers, j)
			}
		}
		l.devs = append(l.devs, d)
	}
	return l
}
