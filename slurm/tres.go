package slurm

import (
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
	for _, e := range strings.Split(s, ",") {
		e = strings.TrimSpace(e)
		e = stripGresSuffix(e)
		e = strings.TrimPrefix(e, "gres:")
		e = strings.TrimPrefix(e, "gres/")
		parts := strings.Split(e, ":")
		if parts[0] != "gpu" {
			continue
		}
		if len(parts) == 1 {
			total++
			continue
		}
		last := parts[len(parts)-1]
		if n, err := strconv.Atoi(last); err == nil {
			total += max(n, 0)
		} else if len(parts) == 2 {
			total++ // "gpu:a100": a typed GPU without a count
		}
	}
	return total
}

// gpuTypes lists the GPU types named in a GRES or TRES-per-node string of
// any form gpusFromGres reads ("gres:gpu:h100:2" gives h100, "gpu:a100:8(S:0-1)"
// a100), in order and without repeats; untyped entries ("gpu:4",
// "gpu:(null):4") name none.
func gpuTypes(s string) []string {
	var out []string
	for _, e := range strings.Split(s, ",") {
		e = strings.TrimPrefix(strings.TrimPrefix(stripGresSuffix(strings.TrimSpace(e)), "gres:"), "gres/")
		parts := strings.Split(e, ":")
		if parts[0] != "gpu" || len(parts) < 2 || len(parts) > 3 {
			continue
		}
		t := parts[1]
		if _, err := strconv.Atoi(t); err == nil || t == "(null)" || t == "" || slices.Contains(out, t) {
			continue
		}
		out = append(out, t)
	}
	return out
}

// memPerGPU reads the GPU entry of memory_per_tres ("gres:gpu:16384" in
// 22.05, "gres/gpu:16384" in 24.11, both read off the labs; entries are
// separated by ';' or ','): MiB per GPU, 0 when there is none.
func memPerGPU(s string) int64 {
	for _, e := range strings.FieldsFunc(s, func(r rune) bool { return r == ';' || r == ',' }) {
		e = strings.TrimPrefix(strings.TrimPrefix(strings.TrimSpace(e), "gres:"), "gres/")
		parts := strings.Split(e, ":")
		if parts[0] != "gpu" || len(parts) < 2 {
			continue
		}
		if n, err := strconv.ParseInt(parts[len(parts)-1], 10, 64); err == nil && n > 0 {
			return n
		}
	}
	return 0
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

// tresValue returns the value of key in a TRES string such as
// "cpu=8,mem=64G,node=1,billing=8,gres/gpu=4".
func tresValue(tres, key string) (string, bool) {
	for _, kv := range strings.Split(tres, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if ok && k == key {
			return v, true
		}
	}
	return "", false
}

// tresGPUs returns the total gres/gpu count of a TRES string, summing typed
// entries ("gres/gpu:a100=4") only when there is no untyped total.
func tresGPUs(tres string) int {
	if v, ok := tresValue(tres, "gres/gpu"); ok {
		n, _ := strconv.Atoi(v)
		return n
	}
	total := 0
	for _, kv := range strings.Split(tres, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if ok && strings.HasPrefix(k, "gres/gpu:") {
			n, _ := strconv.Atoi(v)
			total += n
		}
	}
	return total
}
