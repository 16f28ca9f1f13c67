package store

import (
	"testing"
	"time"
)

func TestPredates(t *testing.T) {
	sub := time.Date(2026, 11, 2, 14, 0, 0, 0, time.UTC)
	for name, tc := range map[string]struct {
		at, submitted time.Time
		want          bool
	}{
		"an hour before":        {sub.Add(-time.Hour), sub, true},
		"a second before":       {sub.Add(-time.Second), sub, false},
		"just over a second":    {sub.Add(-time.Second - time.Millisecond), sub, true},
		"after":                 {sub.Add(time.Minute), sub, false},
		"submission unknown":    {sub.Add(-time.Hour), time.Time{}, false},
		"record without a time": {time.Time{}, sub, false},
	} {
		if got := Predates(tc.at, tc.submitted); got != tc.want {
			t.Errorf("%s: Predates(%v, %v) = %v, want %v", name, tc.at, tc.submitted, got, tc.want)
		}
	}
}
