package slurm

import (
	"errors"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"
)

func TestExpandHostlist(t *testing.T) {
	tests := map[string]struct {
		in   string
		want []string
	}{
		"empty":         {"", nil},
		"null":          {"(null)", nil},
		"single":        {"node1", []string{"node1"}},
		"range":         {"node[1-3]", []string{"node1", "node2", "node3"}},
		"range and one": {"node[1-3,5]", []string{"node1", "node2", "node3", "node5"}},
		"list":          {"node[2-3],gpu7", []string{"node2", "node3", "gpu7"}},
		"padding":       {"n[08-10]", []string{"n08", "n09", "n10"}},
		"suffix":        {"r[1-2]-ib", []string{"r1-ib", "r2-ib"}},
		"two groups":    {"r[1-2]n[1-2]", []string{"r1n1", "r1n2", "r2n1", "r2n2"}},
		"spaces":        {" node1 , node2 ", []string{"node1", "node2"}},
		"sample 22.05":  {"node[2-3]", []string{"node2", "node3"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ExpandHostlist(tc.in)
			if err != nil {
				t.Fatalf("ExpandHostlist(%q): %v", tc.in, err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestExpandHostlistErrors(t *testing.T) {
	for _, in := range []string{
		"node[1-3", "node1-3]", "node[3-1]", "node[a-b]", "node[]", "node[1-]",
		"node[[1]]", "a,,b", "n[0-99999]x[0-99999]", "n[1234567890]",
	} {
		if got, err := ExpandHostlist(in); !errors.Is(err, ErrHostlist) {
			t.Errorf("ExpandHostlist(%q) = %v, %v; want ErrHostlist", in, got, err)
		}
	}
}

func FuzzExpandHostlist(f *testing.F) {
	for _, s := range []string{"node[1-3,5]", "n[08-10]", "r[1-2]n[1-2]", "a,b", "x[", "]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ExpandHostlist(s)
		if err == nil && len(got) > maxHostlist {
			t.Fatalf("%d names, more than the bound", len(got))
		}
	})
}

func TestCompressHostlist(t *testing.T) {
	tests := map[string]struct {
		in   []string
		want string
	}{
		"none":        {nil, ""},
		"one":         {[]string{"node3"}, "node3"},
		"range":       {[]string{"node3", "node4"}, "node[3-4]"},
		"gap":         {[]string{"node5", "node1", "node2", "node3"}, "node[1-3,5]"},
		"duplicates":  {[]string{"node1", "node1"}, "node1"},
		"padding":     {[]string{"n08", "n09", "n10"}, "n[08-09],n10"},
		"prefixes":    {[]string{"gpu1", "node2", "gpu2"}, "gpu[1-2],node2"},
		"no number":   {[]string{"login", "r1-ib"}, "login,r1-ib"},
		"inner digit": {[]string{"r1n1", "r1n2", "r2n1"}, "r1n[1-2],r2n1"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := CompressHostlist(tc.in); got != tc.want {
				t.Errorf("CompressHostlist(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

// TestCompressHostlistRoundTrip: expanding the compressed form gives the
// same set of names.
func TestCompressHostlistRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		names := rapid.SliceOf(rapid.StringMatching(`[a-c]{1,2}(-ib)?[0-9]{0,3}`)).Draw(t, "names")
		got, err := ExpandHostlist(CompressHostlist(names))
		if err != nil {
			t.Fatalf("%q: %v", CompressHostlist(names), err)
		}
		want := slices.Clone(names)
		slices.Sort(want)
		want = slices.Compact(want)
		slices.Sort(got)
		if len(want) == 0 {
			want = nil
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%q via %q (-want +got):\n%s", names, CompressHostlist(names), diff)
		}
	})
}
