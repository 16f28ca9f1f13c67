package slurm

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// gpusFromGres returns the GPU count of a GRES or TRES-per-node string in any
// of the forms Slurm writes: "gres:gpu:4" (22.05 tres_per_node),
// "gres/gpu:4" (24.11), "gpu:4", "gpu:a100:4", "gpu:4(IDX:0-3)"
// (gres_detail, gres_used), "gpu:(null):4(IDX:0-3)", several comma-separated
// entries ("gres/gpu:2,gres/shard:1"). Entries that are not GPUs count 0; a
// GPU entry without a count ("gres/gpu") counts 1, as in Slurm.
func gpusFromGres(s string) int {
	total := 0
	for _, e := range splitGres(s) {
		f, ok := gpuEntry(e)
		if !ok {
			continue
		}
		if len(f) == 0 {
			total++
			continue
		}
		if n, err := strconv.Atoi(f[len(f)-1]); err == nil {
			total += clampCount(n)
		} else if len(f) == 1 {
			total++ // "gpu:a100": a typed GPU without a count
		}
	}
	return total
}

// gresEntry is one entry of a GRES or TRES string without its blanks, its
// "gres:" or "gres/" prefix and its suffix: "gres:gpu:h100:2(IDX:0-1)"
// gives "gpu:h100:2".
func gresEntry(e string) string {
	return strings.TrimPrefix(strings.TrimPrefix(stripGresSuffix(strings.TrimSpace(e)), "gres:"), "gres/")
}

// gpuEntry reads one entry of a GRES or TRES string: the fields after
// "gpu" ("gres:gpu:h100:2(IDX:0-1)" gives [h100 2]), its "gres:" or
// "gres/" prefix and its suffix dropped; false for an entry that is not a
// GPU.
func gpuEntry(e string) ([]string, bool) {
	parts := strings.Split(gresEntry(e), ":")
	return parts[1:], parts[0] == "gpu"
}

// otherGres lists the entries of a TRES-per-node string that are GRES
// other than GPUs ("gres:gpu:2,gres:lscratch:100" gives lscratch:100), in
// the form scontrol's Gres= takes them; nil for none.
func otherGres(s string) []string {
	var out []string
	for _, e := range splitGres(s) {
		e = strings.TrimSpace(e)
		if !strings.HasPrefix(e, "gres:") && !strings.HasPrefix(e, "gres/") {
			continue
		}
		if _, gpu := gpuEntry(e); gpu {
			continue
		}
		out = append(out, gresEntry(e))
	}
	return out
}

// GresCounts reads the GRES other than GPUs in a list such as a node's gres
// ("gpu:a100:8,lscratch:1000,nvme:fast:2(S:0)") or a job's OtherGres: the
// count of each, by its name and type ("lscratch", "nvme:fast"). An entry
// without a count counts one.
func GresCounts(entries ...string) map[string]int {
	var out map[string]int
	for _, list := range entries {
		for _, e := range splitGres(list) {
			e = gresEntry(e)
			if e == "" {
				continue
			}
			if _, gpu := gpuEntry(e); gpu {
				continue
			}
			f := strings.Split(e, ":")
			n, err := strconv.Atoi(f[len(f)-1])
			if err != nil || len(f) == 1 {
				n, f = 1, append(f, "")
			}
			if out == nil {
				out = map[string]int{}
			}
			out[strings.Join(f[:len(f)-1], ":")] += clampCount(n)
		}
	}
	return out
}

// gresFree is what of a node's GRES other than GPUs its jobs leave.
func gresFree(total, used string) map[string]int {
	free := GresCounts(total)
	for k, n := range GresCounts(used) {
		if _, ok := free[k]; ok {
			free[k] -= n
		}
	}
	return free
}

// gpuTypes lists the GPU types named in a GRES or TRES-per-node string of
// any form gpusFromGres reads ("gres:gpu:h100:2" gives h100, "gpu:a100:8(S:0-1)"
// a100), in order and without repeats; untyped entries ("gpu:4",
// "gpu:(null):4") name none.
func gpuTypes(s string) []string {
	var out []string
	for _, e := range splitGres(s) {
		f, ok := gpuEntry(e)
		if !ok || len(f) < 1 || len(f) > 2 {
			continue
		}
		t := f[0]
		if _, err := strconv.Atoi(t); err == nil || t == "(null)" || t == "" || slices.Contains(out, t) {
			continue
		}
		out = append(out, t)
	}
	return out
}

// MemPerGPU reads the GPU entry of a job's memory per TRES
// (memory_per_tres, scontrol's MemPerTres: "gres:gpu:16384" in 22.05,
// "gres/gpu:16384" in 24.11, both read off the labs; entries are separated
// by ';' or ',', and a GPU type may come before the MiB): MiB per GPU, 0
// when there is none. The error says a GPU entry's MiB are not a whole
// number, when no other GPU entry gives them.
func MemPerGPU(s string) (int64, error) {
	var bad error
	for _, e := range strings.FieldsFunc(s, func(r rune) bool { return r == ';' || r == ',' }) {
		f, ok := gpuEntry(e)
		if !ok || len(f) == 0 {
			continue
		}
		n, err := strconv.ParseInt(f[len(f)-1], 10, 64)
		if err == nil && n > 0 {
			return n, nil
		}
		if err != nil || n < 0 {
			bad = fmt.Errorf("memory per TRES %q: MiB per GPU %q are not a whole number", s, f[len(f)-1])
		}
	}
	return 0, bad
}

// memPerGPU is MemPerGPU without its error: a malformed value from
// slurmrestd reads as none.
func memPerGPU(s string) int64 {
	n, _ := MemPerGPU(s)
	return n
}

// splitGres splits a GRES or TRES-per-node string into its entries at the
// commas outside parentheses: a suffix lists sockets or indices with commas
// of its own ("gpu:a100:4(S:0,2)", "gpu:3(IDX:0,2-3)").
func splitGres(s string) []string {
	var out []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '(':
			depth++
		case ')':
			depth = max(depth-1, 0)
		case ',':
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}

// stripGresSuffix drops a parenthesised suffix such as "(IDX:0-3)" or
// "(S:0-1)" but keeps the "(null)" that Slurm writes for an untyped GRES.
func stripGresSuffix(e string) string {
	for i := 0; i < len(e); i++ {
		if e[i] != '(' {
			continue
		}
		if strings.HasPrefix(e[i:], "(null)") {
			i += len("(null)") - 1
			continue
		}
		return e[:i]
	}
	return e
}

// listValue returns the value of key in a comma-separated key=value list:
// a TRES string such as "cpu=8,mem=64G,node=1,billing=8,gres/gpu=4", or
// SchedulerParameters. Keys match case-insensitively, as Slurm reads
// its parameters (TRES names are lower case); a bare key has the value "".
func listValue(list, key string) (string, bool) {
	for _, kv := range strings.Split(list, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(kv), "=")
		if strings.EqualFold(k, key) {
			return v, true
		}
	}
	return "", false
}

// tresMemMB reads the mem entry of a TRES string ("mem=32G", "mem=4000M",
// "mem=1.50T"; Slurm scales it to the largest whole unit) in MiB; 0 when
// there is none or it does not parse.
func tresMemMB(tres string) int64 {
	v, ok := listValue(tres, "mem")
	if !ok || v == "" {
		return 0
	}
	scale := 1.0 // a bare number is MiB
	if i := strings.IndexByte("KMGTP", v[len(v)-1]); i >= 0 {
		scale, v = math.Pow(1024, float64(i-1)), v[:len(v)-1]
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || !(f > 0) || f*scale > maxMemMB {
		return 0
	}
	return int64(math.Ceil(f * scale))
}

// tresGPUs returns the total gres/gpu count of a TRES string, summing typed
// entries ("gres/gpu:a100=4") only when there is no untyped total.
func tresGPUs(tres string) int {
	if v, ok := listValue(tres, "gres/gpu"); ok {
		n, _ := strconv.Atoi(v)
		return clampCount(n)
	}
	total := 0
	for _, kv := range strings.Split(tres, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if ok && strings.HasPrefix(k, "gres/gpu:") {
			n, _ := strconv.Atoi(v)
			total += clampCount(n)
		}
	}
	return total
}

// maxCount bounds a count read from a GRES or TRES string, far above any
// node's or job's: a sum of the string's counts cannot overflow, which
// made a negative count of a huge one.
const maxCount = 1 << 40

// maxMemMB bounds a memory size read from a TRES string (a zebibyte, in
// MiB): int64 cannot hold much more, and a larger one converts to a
// negative size.
const maxMemMB = 1 << 50

// clampCount is n within 0..maxCount: Slurm writes no negative count.
func clampCount(n int) int { return min(max(n, 0), maxCount) }
