package slurm

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseElapsed(t *testing.T) {
	tests := map[string]struct {
		in      string
		want    time.Duration
		wantErr bool
	}{
		"hms":          {in: "01:02:03", want: time.Hour + 2*time.Minute + 3*time.Second},
		"days":         {in: "364-23:59:00", want: 364*24*time.Hour + 23*time.Hour + 59*time.Minute},
		"mm:ss":        {in: "05:07", want: 5*time.Minute + 7*time.Second},
		"millis":       {in: "00:01.500", want: 1500 * time.Millisecond},
		"zero":         {in: "00:00:00"},
		"empty":        {in: "", wantErr: true},
		"minutes 60":   {in: "00:60:00", wantErr: true},
		"seconds 60":   {in: "00:00:60", wantErr: true},
		"words":        {in: "INVALID", wantErr: true},
		"negative day": {in: "-1-00:00:00", wantErr: true},
		"four parts":   {in: "1:2:3:4", wantErr: true},
		"exponent":     {in: "00:1e1", wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParseElapsed(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("ParseElapsed(%q) error = %v, want error %v", tc.in, err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ParseElapsed(%q) (-want +got):\n%s", tc.in, diff)
			}
		})
	}
}
