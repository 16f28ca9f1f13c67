package model

// DefaultEnv returns the environment of the Rubick artifact's cluster:
// nodes of 8 NVIDIA A800 80 GB GPUs, 96 CPU cores and 1,600 GB of memory.
//
// The three bandwidths are effective (achieved) figures, one per link type
// for the whole cluster and every model; docs/model.md justifies each:
//   - IntraGBps 150: NVLink all-reduce bus bandwidth on an A800 node (400 GB/s
//     NVLink, of which NCCL achieves about 150 GB/s of algorithm bandwidth
//     on 8 GPUs).
//   - InterGBps 12.5: one 100 Gb/s RDMA NIC.
//   - PCIeGBps 12: PCIe 4.0 x16 host-device copies from pinned memory.
//
// RidgeFlopPerByte is the A800's roofline ridge point (about 153 FLOP/byte),
// which prices the efficiency TP shards lose as they shrink.
//
// GPUsPerNIC 2 models the usual HGX A800 layout where two GPUs share one
// PCIe switch and its NIC, so a node reaches the network through
// ceil(GPUs used / 2) NICs.
func DefaultEnv() Env {
	return Env{
		IntraGBps:        150,
		InterGBps:        12.5,
		PCIeGBps:         12,
		GPUMemGB:         80,
		NodeMemGB:        1600,
		NodeCPUs:         96,
		NodeGPUs:         8,
		GPUsPerNIC:       2,
		HostMemGBps:      defaultHostMemGBps,
		RidgeFlopPerByte: a800RidgeFlopPerByte,
	}
}

// a800RidgeFlopPerByte is the A800's roofline ridge point from its data
// sheet: 312 TFLOP/s dense bf16 tensor-core peak over 2.039 TB/s of HBM2e
// bandwidth.
const a800RidgeFlopPerByte = 312e12 / 2.039e12

// defaultHostMemGBps is the effective memory bandwidth of a two-socket A800
// host for CPU Adam's streaming access (16 DDR4-3200 channels peak at about
// 400 GB/s; Adam's mixed read/write stream over state that does not fit any
// cache reaches about a fifth).
const defaultHostMemGBps = 80

// Priors are the parameter values a fit starts from and the values it pins
// parameters at when the samples cannot identify them. They describe a
// typical transformer trained with mixed precision on an A800: backward
// about twice the forward, moderate overlap, a GPU Adam step of about 75 ms
// per billion parameters, a CPU Adam step of about 4 core-seconds per
// billion parameters, and 10 ms of fixed per-iteration overhead.
func Priors() Params {
	return Params{KBwd: 2, KSync: 1, KOpt: 0.075, KOptOff: 4, KOff: 1, KSwap: 2, KConst: 0.01}
}

// paramBounds are the box constraints of a fit, in Params field order.
// Overlap exponents are >= 1 by definition of f_k (k = 1 is no overlap).
var paramBounds = [nParams][2]float64{
	{0.5, 6},   // KBwd
	{1, 64},    // KSync
	{0, 2},     // KOpt, s per 1e9 parameters
	{0.01, 64}, // KOptOff, core-s per 1e9 parameters
	{1, 64},    // KOff
	{1, 64},    // KSwap
	{0, 2},     // KConst, s
}

// nParams is the number of fitted parameters.
const nParams = 7

// paramNames names the fitted parameters in Params field order, as in JSON.
var paramNames = [nParams]string{"k_bwd", "k_sync", "k_opt", "k_opt_off", "k_off", "k_swap", "k_const"}

func (p Params) vec() [nParams]float64 {
	return [nParams]float64{p.KBwd, p.KSync, p.KOpt, p.KOptOff, p.KOff, p.KSwap, p.KConst}
}

func paramsFromVec(v [nParams]float64) Params {
	return Params{KBwd: v[0], KSync: v[1], KOpt: v[2], KOptOff: v[3], KOff: v[4], KSwap: v[5], KConst: v[6]}
}
