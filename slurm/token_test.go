package slurm

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseTokenClaims(t *testing.T) {
	jwt := func(payload string) string {
		return "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9." + base64.RawURLEncoding.EncodeToString([]byte(payload)) + ".sig"
	}
	tests := map[string]struct {
		tok     string
		want    TokenClaims
		wantErr string
	}{
		// What `scontrol token lifespan=604800` wrote on the 22.05 lab.
		"lab token": {tok: "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJleHAiOjE3OTYxODY4MjksImlhdCI6MTc5NTU4MjAyOSwic3VuIjoicm9vdCJ9.Kqc4tNLdhEgVStWzxoKaTR9xD9k_1O7vOw3cKcoz5FI",
			want: TokenClaims{User: "root", Expires: time.Unix(1796186829, 0)}},
		"no expiry":          {tok: jwt(`{"sun":"slurm"}`), want: TokenClaims{User: "slurm"}},
		"padded payload":     {tok: "h." + base64.URLEncoding.EncodeToString([]byte(`{"exp":10,"sun":"a"}`)) + ".s", want: TokenClaims{User: "a", Expires: time.Unix(10, 0)}},
		"not a JWT":          {tok: "abc", wantErr: "1 dot-separated parts"},
		"payload not base64": {tok: "a.%%%.c", wantErr: "payload"},
		"payload not JSON":   {tok: jwt("nope"), wantErr: "payload"},
		"exp not a time":     {tok: jwt(`{"exp":1.5}`), wantErr: "exp=1.5"},
	}
	for name, tc := range tests {
		got, err := ParseTokenClaims(tc.tok)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: %+v, %v; want an error saying %q", name, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if d := cmp.Diff(tc.want, got); d != "" {
			t.Errorf("%s (-want +got):\n%s", name, d)
		}
	}
}

// The cluster reads the claims of the token it sends, re-read after a
// rotation.
func TestClusterTokenClaims(t *testing.T) {
	jwt := func(exp int64) string {
		return "h." + base64.RawURLEncoding.EncodeToString([]byte(fmt.Sprintf(`{"exp":%d,"sun":"root"}`, exp))) + ".s"
	}
	f, srv := newFakeRestd(t, Version38)
	f.setToken(jwt(100))
	file := filepath.Join(t.TempDir(), "jwt")
	if err := os.WriteFile(file, []byte("SLURM_JWT="+jwt(100)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := newTestCluster(t, srv.URL, func(cfg *Config) { cfg.Token, cfg.TokenFile = "", file })
	if got, err := c.TokenClaims(); err != nil || got.Expires != time.Unix(100, 0) {
		t.Fatalf("TokenClaims = %+v, %v; want exp 100", got, err)
	}
	// A rotation writes a new file (another size here, as scontrol's
	// tokens of another lifespan may have).
	if err := os.WriteFile(file+".new", []byte("SLURM_JWT="+jwt(2000000000)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(file+".new", file); err != nil {
		t.Fatal(err)
	}
	if got, err := c.TokenClaims(); err != nil || got.Expires != time.Unix(2000000000, 0) {
		t.Fatalf("after rotation: %+v, %v; want exp 2000000000", got, err)
	}
}
