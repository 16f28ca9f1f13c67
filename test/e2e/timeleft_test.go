//go:build e2e

package e2e

import (
	"testing"
	"time"
)

// TestShorterLimitFirst: one GPU free and two bert jobs held for it, alike
// but for their --time. By slope alone they tie and the first submitted,
// with 2 hours, would get it; weighed by time left (policy.time_weight,
// 0.5 by default) the one submitted after it, with 10 minutes, starts
// first, with reason slope.
func TestShorterLimitFirst(t *testing.T) {
	lt := newLabTest(t, "timeleft", 2*time.Minute, "")
	l, ctx, dir, bin, cluster := lt.lab, lt.ctx, lt.dir, lt.bin, lt.cluster
	lt.ids = append(lt.ids, holdGPUs(ctx, t, l, cluster, filler{"3", "8"}, filler{"1", "7"})...)
	submit := func(limit string) int {
		return l.submitScript(t, dir, shortTraining(bin, dir, "bert", 32), &lt.ids, "--model-type=bert", "-p", "gpu",
			"-J", "e2e-timeleft", "-N", "1", "--ntasks-per-node=1", "--gres=gpu:2", "--cpus-per-task=4", "--mem=16G",
			"--time="+limit, "--requeue")
	}
	long := submit("120")
	short := submit("10")
	d := runDaemon(t, l, bin, dir, lt.cfgPath)

	lt.startsFirst(t, d, job{short, "10-minute job"}, job{long, "2-hour job"})
	lt.wantStartReason(t, short, "slope")
}
