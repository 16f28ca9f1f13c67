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
		"nan seconds":  {in: "00:NaN", wantErr: true},
		"hex seconds":  {in: "00:0x1p2", wantErr: true},
		"inf seconds":  {in: "00:Inf", wantErr: true},
		"max days":     {in: "36500-23:59:59", want: 36500*24*time.Hour + 23*time.Hour + 59*time.Minute + 59*time.Second},
		"days wrap":    {in: "106751-23:47:17", wantErr: true},
		"huge days":    {in: "999999999999-00:00:00", wantErr: true},
		"huge hours":   {in: "9999999999999999:00:00", wantErr: true},
		"huge minutes": {in: "99999999999999999:00", wantErr: true},
		// Slurm's D-HH and D-HH:MM: hours and minutes, not minutes and
		// seconds.
		"days hours":         {in: "1-02", want: 26 * time.Hour},
		"days hours minutes": {in: "1-02:03", want: 26*time.Hour + 3*time.Minute},
		"days minutes 60":    {in: "1-02:60", wantErr: true},
		"days, no hours":     {in: "1-", wantErr: true},
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

// FuzzParseElapsed checks that an elapsed time ParseElapsed accepts is a
// duration that is not negative, whatever the size of its fields.
func FuzzParseElapsed(f *testing.F) {
	for _, s := range []string{
		"01:02:03", "364-23:59:00", "05:07", "00:01.500", "00:00:00", "", "00:60:00", "00:00:60",
		"INVALID", "-1-00:00:00", "1:2:3:4", "00:1e1", "00:NaN", "106751-23:47:17", "9999999999999999:00:00",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseElapsed(s)
		if err == nil && d < 0 {
			t.Fatalf("ParseElapsed(%q) = %v, negative", s, d)
		}
	})
}
