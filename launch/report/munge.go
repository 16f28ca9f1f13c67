package report

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
)

// Munge runs the munge and unmunge programs (argv only, never a shell).
// The zero value uses the programs on $PATH and munged's default socket.
type Munge struct {
	// MungePath and UnmungePath default to "munge" and "unmunge".
	MungePath, UnmungePath string
	// Socket is munged's socket; empty means its default.
	Socket string
	// RestrictUID, when set, lets only that UID decode the credentials
	// Encode makes (munge --restrict-uid), e.g. the UID rubickd runs as.
	RestrictUID string
}

// Credential is what a verified MUNGE credential says.
type Credential struct {
	// UID and GID of the process that encoded the credential, as
	// authenticated by munged.
	UID, GID uint32
	Payload  []byte
}

func (m Munge) path(p, def string) string {
	if p == "" {
		return def
	}
	return p
}

func (m Munge) socketArgs() []string {
	if m.Socket == "" {
		return nil
	}
	return []string{"--socket=" + m.Socket}
}

// Encode returns a credential carrying payload. The payload goes through
// stdin, so it never shows in the process list. It wraps ErrUnavailable
// when munge is missing or munged does not answer.
func (m Munge) Encode(ctx context.Context, payload []byte) (string, error) {
	args := m.socketArgs()
	if m.RestrictUID != "" {
		args = append(args, "--restrict-uid="+m.RestrictUID)
	}
	cmd := exec.CommandContext(ctx, m.path(m.MungePath, "munge"), args...)
	cmd.Stdin = bytes.NewReader(payload)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		// munge fails the same way whether the program or munged is missing;
		// either way nothing can be reported from this node.
		return "", fmt.Errorf("%w: %s: %w: %s", ErrUnavailable, cmd.Path, err, clip(strings.TrimSpace(stderr.String())))
	}
	cred := strings.TrimSpace(stdout.String())
	if !strings.HasPrefix(cred, "MUNGE:") {
		return "", fmt.Errorf("%w: %s printed %q, not a credential", ErrUnavailable, cmd.Path, clip(cred))
	}
	return cred, nil
}

// maxCredential bounds the credentials Decode accepts; samples are small.
const maxCredential = 64 << 10

// Decode verifies cred with unmunge and returns what it authenticates. It
// wraps ErrCredential when unmunge rejects the credential and ErrUnavailable
// when unmunge cannot run at all.
func (m Munge) Decode(ctx context.Context, cred string) (Credential, error) {
	cred = strings.TrimSpace(cred)
	if !strings.HasPrefix(cred, "MUNGE:") || len(cred) > maxCredential || strings.ContainsAny(cred, " \n\r\t") {
		return Credential{}, fmt.Errorf("%w: not a MUNGE credential (%d bytes)", ErrCredential, len(cred))
	}
	args := append(m.socketArgs(), "--numeric", "--keys=STATUS,UID,GID,LENGTH")
	cmd := exec.CommandContext(ctx, m.path(m.UnmungePath, "unmunge"), args...)
	cmd.Stdin = strings.NewReader(cred)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return Credential{}, fmt.Errorf("unmunge: %w", ctx.Err()) // the request's end, not munged's
		}
		var exit *exec.ExitError
		if errors.As(err, &exit) && !mungeUnavailable(exit.ExitCode()) {
			return Credential{}, fmt.Errorf("%w: %s", ErrCredential, clip(strings.TrimSpace(stderr.String())))
		}
		return Credential{}, fmt.Errorf("%w: %s: %w: %s", ErrUnavailable, cmd.Path, err, clip(strings.TrimSpace(stderr.String())))
	}
	return parseUnmunge(stdout.Bytes())
}

// mungeUnavailable tells unmunge's exit statuses (munge's error codes)
// that say munged could not check the credential from those that say the
// credential is bad: EMUNGE_SNAFU 1, EMUNGE_BAD_ARG 2, EMUNGE_NO_MEMORY 5,
// EMUNGE_SOCKET 6 (munged not running, or its socket elsewhere) and
// EMUNGE_TIMEOUT 7.
func mungeUnavailable(status int) bool {
	switch status {
	case 1, 2, 5, 6, 7:
		return true
	}
	return false
}

// parseUnmunge reads unmunge's output: "KEY: value" metadata lines, a blank
// line, then the payload.
func parseUnmunge(out []byte) (Credential, error) {
	meta, payload, ok := bytes.Cut(out, []byte("\n\n"))
	if !ok {
		return Credential{}, fmt.Errorf("%w: unmunge output has no payload separator", ErrCredential)
	}
	var c Credential
	fields := map[string]string{}
	for _, line := range strings.Split(string(meta), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok {
			fields[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	// --numeric prints "0" for a success status, or "Success (0)" in some
	// versions.
	if st := fields["STATUS"]; st != "0" && !strings.HasSuffix(st, "(0)") {
		return Credential{}, fmt.Errorf("%w: status %q", ErrCredential, clip(st))
	}
	for _, f := range []struct {
		key string
		dst *uint32
	}{{"UID", &c.UID}, {"GID", &c.GID}} {
		n, err := strconv.ParseUint(fields[f.key], 10, 32)
		if err != nil {
			return Credential{}, fmt.Errorf("%w: %s=%q is not numeric", ErrCredential, f.key, clip(fields[f.key]))
		}
		*f.dst = uint32(n)
	}
	if l, err := strconv.Atoi(fields["LENGTH"]); err == nil && l >= 0 && l <= len(payload) {
		payload = payload[:l]
	}
	c.Payload = payload
	return c, nil
}

// VerifyMunge verifies cred with the unmunge on $PATH and returns the UID
// that encoded it and its payload. rubickd must still check that the UID
// owns the job the payload names.
func VerifyMunge(ctx context.Context, cred string) (uint32, []byte, error) {
	c, err := Munge{}.Decode(ctx, cred)
	if err != nil {
		return 0, nil, err
	}
	return c.UID, c.Payload, nil
}
