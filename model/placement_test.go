package model

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"
)

func TestPlacementStringRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		pl   Placement
		want string
	}{
		// The artifact's digit form stays as it was.
		{Placement{2, 2, 2, 2}, "2222"},
		{Placement{8}, "8"},
		{Placement{3, 5}, "35"},
		{Placement{8, 8}, "88"},
		{Placement{9, 1}, "91"},
		// A node of 10 or more GPUs must not read back as several nodes.
		{Placement{16}, "1x16"},
		{Placement{10}, "1x10"},
		{Placement{16, 16}, "2x16"},
		{Placement{12, 12, 12}, "3x12"},
		{Placement{16, 8}, "16-8"},
		{Placement{8, 16}, "8-16"},
		{Placement{10, 2, 10}, "10-2-10"},
	} {
		got := tc.pl.String()
		if got != tc.want {
			t.Errorf("%v.String() = %q, want %q", []int(tc.pl), got, tc.want)
		}
		back, err := ParsePlacement(got)
		if err != nil {
			t.Errorf("ParsePlacement(%q): %v", got, err)
			continue
		}
		if d := cmp.Diff(tc.pl, back); d != "" {
			t.Errorf("ParsePlacement(%q) (-want +got):\n%s", got, d)
		}
	}
}

func TestParsePlacement(t *testing.T) {
	tests := map[string]struct {
		in      string
		want    Placement
		errText string // set: the error must name it
	}{
		"digits":             {in: "2222", want: Placement{2, 2, 2, 2}},
		"one digit":          {in: "8", want: Placement{8}},
		"nxg":                {in: "2x16", want: Placement{16, 16}},
		"nxg small":          {in: "1x8", want: Placement{8}},
		"dash":               {in: "16-8", want: Placement{16, 8}},
		"dash equal":         {in: "16-16", want: Placement{16, 16}}, // older rubick's form
		"dash small":         {in: "10-2", want: Placement{10, 2}},
		"empty":              {in: "", errText: "empty"},
		"digit zero":         {in: "20", errText: `'0'`},
		"letter":             {in: "2a", errText: `'a'`},
		"zero nodes":         {in: "0x8", errText: `"0x8": node count 0 must be >= 1`},
		"zero gpus":          {in: "2x0", errText: `"2x0": GPU count 0 must be >= 1`},
		"no gpus":            {in: "2x", errText: `"2x": GPU count "" is not a number`},
		"no nodes":           {in: "x8", errText: `"x8": node count "" is not a number`},
		"two x":              {in: "2x8x8", errText: `GPU count "8x8" is not a number`},
		"signed nodes":       {in: "+2x8", errText: `node count "+2" is not a number`},
		"gpus over limit":    {in: "1x99999999", errText: `"1x99999999": GPU count 99999999 exceeds the limit of 1024`},
		"nodes over limit":   {in: "100001x8", errText: "node count 100001 exceeds the limit of 100000"},
		"overflow":           {in: "99999999999999999999999x8", errText: "node count 99999999999999999999999 exceeds"},
		"trailing dash":      {in: "16-", errText: `"16-": GPU count "" is not a number`},
		"leading dash":       {in: "-16", errText: `"-16": GPU count "" is not a number`},
		"dash zero":          {in: "16-0", errText: `"16-0": GPU count 0 must be >= 1`},
		"dash over limit":    {in: "16-2048", errText: "GPU count 2048 exceeds the limit of 1024"},
		"dash spaces":        {in: "16- 8", errText: `GPU count " 8" is not a number`},
		"dash many nodes":    {in: strings.Repeat("1-", maxPlacementNodes) + "1", errText: "100001 nodes exceeds the limit of 100000"},
		"long bad count":     {in: "1x" + strings.Repeat("a", maxPlacementNodes), errText: `GPU count "aaaa`},
		"dash many, one bad": {in: strings.Repeat("1-", maxPlacementNodes-1) + "a", errText: `"1-1-1-1-1-1-1-1-1-1-1-1-1-1-1-1-1-1-1-1-...": GPU count "a"`},
		"digit many nodes":   {in: strings.Repeat("1", maxPlacementNodes+1), errText: "100001 nodes exceeds the limit of 100000"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParsePlacement(tc.in)
			if tc.errText != "" {
				if !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), tc.errText) || len(err.Error()) > 200 {
					t.Fatalf("ParsePlacement(%.40q) error = %.300v, want ErrBadInput naming %s, at most 200 bytes", tc.in, err, tc.errText)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParsePlacement(%q): %v", tc.in, err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("ParsePlacement(%q) (-want +got):\n%s", tc.in, d)
			}
		})
	}
}

func TestParsePlacementAtLimits(t *testing.T) {
	got, err := ParsePlacement("100000x1024")
	if err != nil {
		t.Fatal(err)
	}
	if got.Nodes() != 100000 || got.MaxPerNode() != 1024 || got.GPUs() != 100000*1024 {
		t.Errorf(`ParsePlacement("100000x1024") = %d nodes, %d GPUs`, got.Nodes(), got.GPUs())
	}
}

func TestPlacementStringParses(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := make(Placement, rapid.IntRange(1, 16).Draw(t, "nodes"))
		// Draw equal nodes often: they take the NxG form once over 9.
		same := rapid.Bool().Draw(t, "same")
		for i := range p {
			if same && i > 0 {
				p[i] = p[0]
			} else {
				p[i] = rapid.IntRange(1, 64).Draw(t, "gpus")
			}
		}
		got, err := ParsePlacement(p.String())
		if err != nil {
			t.Fatalf("ParsePlacement(%q): %v", p.String(), err)
		}
		if d := cmp.Diff(p, got); d != "" {
			t.Fatalf("round trip of %q (-want +got):\n%s", p.String(), d)
		}
	})
}

// FuzzParsePlacement checks that a placement ParsePlacement accepts is
// within its bounds (1 to maxPlacementNodes nodes of 1 to maxGPUsPerNode
// GPUs) and that String writes it in a form that parses back to it.
func FuzzParsePlacement(f *testing.F) {
	for _, s := range []string{
		"2222", "8", "2x16", "1x8", "16-8", "16-16", "10-2", "", "20", "2a", "0x8", "2x0", "2x", "x8", "2x8x8", "+2x8",
		"1x99999999", "100001x8", "99999999999999999999999x8", "16-", "-16", "16-0", "16-2048", "16- 8", "100000x1024",
		"10-2-10", "91", "١",
	} {
		f.Add(s)
	}
	f.Add(strings.Repeat("1", maxPlacementNodes+1))
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePlacement(s)
		if err != nil {
			if !errors.Is(err, ErrBadInput) {
				t.Fatalf("ParsePlacement(%.40q) error %v does not wrap ErrBadInput", s, err)
			}
			return
		}
		if p.Nodes() < 1 || p.Nodes() > maxPlacementNodes || slices.Min(p) < 1 || p.MaxPerNode() > maxGPUsPerNode {
			t.Fatalf("ParsePlacement(%.40q) = %d nodes, %d to %d GPUs each", s, p.Nodes(), slices.Min(p), p.MaxPerNode())
		}
		back, err := ParsePlacement(p.String())
		if err != nil {
			t.Fatalf("ParsePlacement(%.40q): %v", p.String(), err)
		}
		if d := cmp.Diff(p, back); d != "" {
			t.Fatalf("round trip of %.40q (-first +second):\n%s", s, d)
		}
	})
}
