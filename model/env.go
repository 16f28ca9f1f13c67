package model

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
)

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
	return Params{KBwd: 2, KSync: 1, KOpt: 0.075, KOptOff: 4, KOff: 1, KSwap: 2, KConst: 0.01, K3D: 1}
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
	{0.1, 10},  // K3D
}

// nParams is the number of fitted parameters.
const nParams = 8

// paramNames names the fitted parameters in Params field order, as in JSON.
var paramNames = [nParams]string{"k_bwd", "k_sync", "k_opt", "k_opt_off", "k_off", "k_swap", "k_const", "k_3d"}

func (p Params) vec() [nParams]float64 {
	return [nParams]float64{p.KBwd, p.KSync, p.KOpt, p.KOptOff, p.KOff, p.KSwap, p.KConst, p.k3d()}
}

func paramsFromVec(v [nParams]float64) Params {
	return Params{KBwd: v[0], KSync: v[1], KOpt: v[2], KOptOff: v[3], KOff: v[4], KSwap: v[5], KConst: v[6], K3D: v[7]}
}

// EnvKeys lists the names Env.Set accepts: Env's JSON field names.
func EnvKeys() []string {
	var out []string
	t := reflect.TypeOf(Env{})
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		out = append(out, name)
	}
	return out
}

// values is e as JSON values by name.
func (e Env) values() map[string]json.RawMessage {
	b, _ := json.Marshal(e) // numbers and bools always marshal
	var vals map[string]json.RawMessage
	_ = json.Unmarshal(b, &vals)
	return vals
}

// KeyValues lists every field of e as "name=value", in EnvKeys order: what
// Set accepts to rebuild e.
func (e Env) KeyValues() []string {
	vals := e.values()
	var out []string
	for _, k := range EnvKeys() {
		out = append(out, k+"="+string(vals[k]))
	}
	return out
}

// Set parses "name=value" (a JSON field name of Env, see EnvKeys) into e:
// a number, a whole number or true/false, as the field is. It lets
// `rubick model` price another cluster, or check what one deviation of
// docs/model.md is worth, without a rebuild. Bandwidths must be > 0,
// memory and counts >= 0.
func (e *Env) Set(kv string) error {
	name, v, ok := strings.Cut(kv, "=")
	if !ok {
		return fmt.Errorf("%w: env %q: want name=value", ErrBadInput, kv)
	}
	next := *e
	f, ok := next.field(name)
	if !ok {
		return fmt.Errorf("%w: env %q: unknown name (known: %s)", ErrBadInput, name, strings.Join(EnvKeys(), ", "))
	}
	switch f.Kind() {
	case reflect.Float64:
		x, err := strconv.ParseFloat(v, 64)
		if err != nil || math.IsNaN(x) || math.IsInf(x, 0) || x < 0 {
			return fmt.Errorf("%w: env %s=%s must be a finite number >= 0", ErrBadInput, name, v)
		}
		f.SetFloat(x)
	case reflect.Int:
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return fmt.Errorf("%w: env %s=%s must be a whole number >= 0", ErrBadInput, name, v)
		}
		f.SetInt(int64(n))
	case reflect.Bool:
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("%w: env %s=%s must be true or false", ErrBadInput, name, v)
		}
		f.SetBool(b)
	default:
		return fmt.Errorf("%w: env %s: a field of kind %s cannot be set", ErrBadInput, name, f.Kind())
	}
	// Refused here rather than by the fit it would fail.
	if err := next.checkBandwidths(); err != nil {
		return err
	}
	*e = next
	return nil
}

// field is the settable field of e whose JSON name is name.
func (e *Env) field(name string) (reflect.Value, bool) {
	v := reflect.ValueOf(e).Elem()
	for i, key := range EnvKeys() {
		if key == name {
			return v.Field(i), true
		}
	}
	return reflect.Value{}, false
}

// k3d is K3D with its unset zero read as 1: tuples stored or written before
// K3D existed price 3D plans as they did.
func (p Params) k3d() float64 {
	if p.K3D == 0 {
		return 1
	}
	return p.K3D
}

// Normalized is p with an unset K3D written as the 1 it means.
func (p Params) Normalized() Params {
	p.K3D = p.k3d()
	return p
}
