package model

import (
	"fmt"
	"slices"
	"strings"
)

// Features is a set of plan features. A job's launch line may be unable to
// express some (a plain DeepSpeed script takes no tensor or pipeline
// parallelism from its config); the scheduler then chooses among the plans
// that use none of them.
type Features uint8

// Plan features a launch line may lack.
const (
	FeatureTP      Features = 1 << iota // tensor parallelism (TP > 1)
	FeaturePP                           // pipeline parallelism (PP > 1)
	FeatureOffload                      // ZeRO-Offload
)

// featureNames are the features' names, in bit order, as String writes them.
var featureNames = [...]string{"tp", "pp", "offload"}

// Of is the set of features p uses.
func Of(p Plan) Features {
	var f Features
	if p.TP > 1 {
		f |= FeatureTP
	}
	if p.PP > 1 {
		f |= FeaturePP
	}
	if p.Offload {
		f |= FeatureOffload
	}
	return f
}

// Allows reports whether p uses none of the features in f: f is what a
// job cannot run, p a plan for it.
func (f Features) Allows(p Plan) bool { return Of(p)&f == 0 }

// String lists the features, comma-separated ("tp,pp"); "" for none.
func (f Features) String() string {
	var names []string
	for i, n := range featureNames {
		if f&(1<<i) != 0 {
			names = append(names, n)
		}
	}
	return strings.Join(names, ",")
}

// MarshalText writes String's form, so JSON shows names, not bits.
func (f Features) MarshalText() ([]byte, error) { return []byte(f.String()), nil }

// UnmarshalText parses String's form.
func (f *Features) UnmarshalText(b []byte) error {
	v, err := ParseFeatures(string(b))
	if err != nil {
		return err
	}
	*f = v
	return nil
}

// ParseFeatures parses String's form; "" is the empty set.
func ParseFeatures(s string) (Features, error) {
	var f Features
	if s == "" {
		return 0, nil
	}
	for _, n := range strings.Split(s, ",") {
		i := slices.Index(featureNames[:], n)
		if i < 0 {
			return 0, fmt.Errorf("%w: plan feature %q: want %s", ErrBadInput, n, strings.Join(featureNames[:], ", "))
		}
		f |= 1 << i
	}
	return f, nil
}
