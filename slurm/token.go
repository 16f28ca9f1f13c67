package slurm

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
)

// ErrNoToken means no JWT is configured or the token file holds none.
var ErrNoToken = errors.New("no slurm JWT")

// tokenFile serves the JWT from a file and re-reads it when it changes, so
// an operator (or a cron job running `scontrol token`) can rotate the token
// without restarting rubickd.
type tokenFile struct {
	path string

	mu    sync.Mutex
	info  os.FileInfo
	token string
}

// token returns the current token, re-reading the file when its size, mtime
// or identity (a rename over it) changed since the last read.
func (t *tokenFile) get() (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fi, err := os.Stat(t.path)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	if t.info != nil && t.token != "" && os.SameFile(fi, t.info) &&
		fi.Size() == t.info.Size() && fi.ModTime().Equal(t.info.ModTime()) {
		return t.token, nil
	}
	raw, err := os.ReadFile(t.path)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	tok := parseToken(raw)
	if tok == "" {
		return "", fmt.Errorf("token file %s: %w", t.path, ErrNoToken)
	}
	t.info, t.token = fi, tok
	return tok, nil
}

// parseToken accepts what `scontrol token` prints ("SLURM_JWT=eyJ...",
// possibly with "export "), or the bare token on its first non-empty line.
func parseToken(raw []byte) string {
	sc := bufio.NewScanner(bytes.NewReader(raw))
	first := ""
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		line = strings.TrimPrefix(line, "export ")
		if v, ok := strings.CutPrefix(line, "SLURM_JWT="); ok {
			return strings.Trim(strings.TrimSpace(v), `"'`)
		}
		if first == "" && line != "" && !strings.HasPrefix(line, "#") && !strings.Contains(line, "=") {
			first = line
		}
	}
	return first
}

// ReadTokenFile reads the JWT in a token file as the cluster does.
func ReadTokenFile(path string) (string, error) {
	return (&tokenFile{path: path}).get()
}

// TokenClaims are what a Slurm JWT says of itself: its user ("sun") and
// when it expires ("exp"; zero: never). They are read, not verified:
// slurmrestd verifies the token, rubick only wants to warn before it
// expires.
type TokenClaims struct {
	User    string
	Expires time.Time
}

// ParseTokenClaims reads the claims of a JWT (header.payload.signature).
func ParseTokenClaims(tok string) (TokenClaims, error) {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return TokenClaims{}, fmt.Errorf("slurm JWT: %d dot-separated parts, want 3", len(parts))
	}
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return TokenClaims{}, fmt.Errorf("slurm JWT payload: %w", err)
	}
	var p struct {
		Exp *json.Number `json:"exp"`
		Sun string       `json:"sun"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return TokenClaims{}, fmt.Errorf("slurm JWT payload: %w", err)
	}
	c := TokenClaims{User: p.Sun}
	if p.Exp != nil {
		n, err := p.Exp.Int64()
		if err != nil || n < 0 {
			return TokenClaims{}, fmt.Errorf("slurm JWT payload: exp=%s is not a Unix time", p.Exp)
		}
		c.Expires = time.Unix(n, 0)
	}
	return c, nil
}

// staticToken serves a fixed token.
type staticToken string

func (s staticToken) get() (string, error) {
	if s == "" {
		return "", ErrNoToken
	}
	return string(s), nil
}

type tokenSource interface{ get() (string, error) }
