package slurm

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"strings"
)

// CtldConfig is slurmctld's running configuration as `scontrol show
// config` prints it: each "Key = value" line, by key. A key printed twice
// (a plugin's section repeating a name) keeps its first value.
type CtldConfig map[string]string

// ShowConfig runs `scontrol show config` (argv, through r) and parses it.
func ShowConfig(ctx context.Context, r Runner, scontrol string) (CtldConfig, error) {
	out, err := r.Run(ctx, []string{scontrol, "show", "config"})
	if err != nil {
		return nil, err
	}
	c := ParseCtldConfig(out)
	if len(c) == 0 {
		return nil, fmt.Errorf("%s show config: no \"Key = value\" lines in %d bytes", scontrol, len(out))
	}
	return c, nil
}

// ParseCtldConfig reads the "Key = value" lines of `scontrol show config`
// output; other lines (the header, section titles) are skipped.
func ParseCtldConfig(out []byte) CtldConfig {
	c := CtldConfig{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " = ")
		k = strings.TrimSpace(k)
		if !ok || k == "" || strings.ContainsAny(k, " \t") {
			continue
		}
		if _, seen := c[k]; !seen {
			c[k] = strings.TrimSpace(v)
		}
	}
	return c
}

// Has reports whether key's value, a comma-separated list, holds item
// (case-insensitive; "(null)" is an empty list).
func (c CtldConfig) Has(key, item string) bool {
	for _, v := range strings.Split(c[key], ",") {
		if strings.EqualFold(strings.TrimSpace(v), item) {
			return true
		}
	}
	return false
}

// Param returns the value of name=value in key's comma-separated list
// (SchedulerParameters, AuthInfo), and whether it is there.
func (c CtldConfig) Param(key, name string) (string, bool) {
	return listValue(c[key], name)
}
