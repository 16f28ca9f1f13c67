package slurm

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"strings"
)

// sshareFields is what ShowFairShare asks sshare for, in this order.
const sshareFields = "Cluster,Account,User,Partition,FairShare"

// ShowFairShare runs sshare (argv, through r) for scope's associations and
// reads their fair-share factors to sshare's six decimals, where scontrol
// show assoc_mgr prints two: with PriorityWeightFairShare=10000 two
// decimals leave a job's priority up to 50 off.
func ShowFairShare(ctx context.Context, r Runner, sshare string, scope BudgetScope) (FairShares, error) {
	argv := []string{sshare, "-P", "-n", "-a", "-o", sshareFields}
	if !scope.All && len(scope.Accounts) > 0 {
		argv = append(argv, "-A", strings.Join(scope.Accounts, ","))
	}
	out, err := r.Run(ctx, argv)
	if err != nil {
		return nil, err
	}
	return ParseSShare(out)
}

// ParseSShare reads `sshare -P -n -a -o Cluster,Account,User,Partition,
// FairShare` output: "rubicklab2411| root|root||1.000000", the account
// indented by its depth. A line without a factor (an account's own under
// Fair Tree) is skipped; one whose factor does not read as a number in
// 0..1 is an error naming it.
func ParseSShare(out []byte) (FairShares, error) {
	f := FairShares{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			continue
		}
		cols := strings.Split(line, "|")
		if len(cols) != 5 {
			return nil, fmt.Errorf("sshare line %q: want %d |-separated fields (%s)", line, 5, sshareFields)
		}
		if strings.TrimSpace(cols[4]) == "" {
			continue
		}
		v, err := factorValue(strings.TrimSpace(cols[4]))
		if err != nil {
			return nil, fmt.Errorf("sshare line %q: FairShare: %w", line, err)
		}
		f[AssocKey{Cluster: cols[0], Account: strings.TrimSpace(cols[1]), User: cols[2], Partition: cols[3]}] = v
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read sshare: %w", err)
	}
	return f, nil
}
