package slurm

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseLicenses(t *testing.T) {
	for in, want := range map[string]map[string]int{
		"":                     nil,
		"matlab:1":             {"matlab": 1},
		"matlab":               {"matlab": 1},
		"matlab:2,fluent@db:3": {"matlab": 2, "fluent@db": 3},
		"matlab*2":             {"matlab": 2},
		"matlab:1, matlab:2":   {"matlab": 3},
	} {
		got, err := ParseLicenses(in)
		if err != nil {
			t.Errorf("%q: %v", in, err)
			continue
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%q (-want +got):\n%s", in, diff)
		}
	}
	for in, says := range map[string]string{
		"matlab:1|fluent:1": "alternatives",
		"matlab:x":          `count "x" of "matlab"`,
		"matlab:-1":         `count "-1"`,
		":2":                "without a name",
	} {
		if _, err := ParseLicenses(in); err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("%q: %v, want an error saying %s", in, err, says)
		}
	}
}

// The licenses as both labs list them (Licenses=matlab:1, one in use), and
// a job's -L matlab:1.
func TestLicenses(t *testing.T) {
	for _, v := range []string{Version38, Version41} {
		_, srv := newFakeRestd(t, v)
		c := newTestCluster(t, srv.URL, nil)
		got, err := c.Licenses(t.Context())
		if err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		if diff := cmp.Diff([]License{{Name: "matlab", Total: 1, Used: 1, Free: 0}}, got); diff != "" {
			t.Errorf("%s: licenses (-want +got):\n%s", v, diff)
		}
	}
}
