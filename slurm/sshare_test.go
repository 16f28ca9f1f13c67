package slurm

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The 24.11 lab's sshare (Fair Tree): an account's own line has no
// factor, users' lines are indented under it.
func TestParseSShare(t *testing.T) {
	out := "rubicklab2411|root|||\nrubicklab2411| root|root||1.000000\nrubicklab2411| pacct|||\nrubicklab2411|  pacct|root|gpu|0.333333\n"
	got, err := ParseSShare([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	want := FairShares{
		{Cluster: "rubicklab2411", Account: "root", User: "root"}:                    1,
		{Cluster: "rubicklab2411", Account: "pacct", User: "root", Partition: "gpu"}: 0.333333,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	for in, msg := range map[string]string{
		"c|a|u||nan\n": `FairShare: factor "nan": want a number in 0..1`,
		"c|a|u|1.0\n":  "want 5 |-separated fields",
		"c|a|u||1.5\n": `factor "1.5"`,
	} {
		if _, err := ParseSShare([]byte(in)); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("%q: err = %v, want one containing %q", in, err, msg)
		}
	}
}

// sshare is asked for the scope's accounts, or for all.
func TestShowFairShareArgv(t *testing.T) {
	for _, tc := range []struct {
		scope BudgetScope
		want  []string
	}{
		{BudgetScope{Accounts: []string{"a", "b"}}, []string{"sshare", "-P", "-n", "-a", "-o", sshareFields, "-A", "a,b"}},
		{BudgetScope{All: true}, []string{"sshare", "-P", "-n", "-a", "-o", sshareFields}},
	} {
		r := &fakeRunner{out: []byte("c|a|u||0.5\n")}
		f, err := ShowFairShare(context.Background(), r, "sshare", tc.scope)
		if err != nil || f[AssocKey{Cluster: "c", Account: "a", User: "u"}] != 0.5 {
			t.Fatalf("%+v: %v, %v", tc.scope, f, err)
		}
		if diff := cmp.Diff([][]string{tc.want}, r.calls); diff != "" {
			t.Errorf("%+v: argv (-want +got):\n%s", tc.scope, diff)
		}
	}
}

// FuzzParseSShare checks that every factor ParseSShare reads is in 0..1
// and belongs to an association with an account.
func FuzzParseSShare(f *testing.F) {
	for _, s := range []string{
		"rubicklab2411|root|||\nrubicklab2411| root|root||1.000000\nrubicklab2411| pacct|||\nrubicklab2411|  pacct|root|gpu|0.333333\n",
		"c|a|u||nan\n", "c|a|u|1.0\n", "c|a|u||1.5\n", "c|a|u||-0\n", "\n\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, out []byte) {
		fs, err := ParseSShare(out)
		if err != nil {
			return
		}
		for k, v := range fs {
			if !(v >= 0 && v <= 1) {
				t.Fatalf("%+v: factor %v", k, v)
			}
			if k.Account != strings.TrimSpace(k.Account) {
				t.Fatalf("%+v: account not trimmed", k)
			}
		}
	})
}
