package slurm

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors callers branch on.
var (
	// ErrUnavailable means slurmrestd could not be reached or did not answer
	// in time (connection refused, reset, timeout): "slurmrestd is down",
	// as opposed to an error reported by Slurm.
	ErrUnavailable = errors.New("slurmrestd unavailable")
	// ErrNotFound means the job (or node) does not exist (any more).
	ErrNotFound = errors.New("not found")
	// ErrUnsupportedVersion means the server speaks no API version that
	// this package knows, or Config.Version names an unknown one.
	ErrUnsupportedVersion = errors.New("unsupported slurmrestd API version")
	// ErrUnsupported means the API version in use has no endpoint for what
	// was asked.
	ErrUnsupported = errors.New("not supported by this slurmrestd API version")
)

// Slurm error numbers this package interprets (slurm_errno.h).
const (
	esInvalidJobID = 2017 // ESLURM_INVALID_JOB_ID
	esJobHeld      = 2042 // ESLURM_JOB_HELD: a held submit, which succeeded
)

// SlurmError is one entry of the "errors" (or "warnings") list of a
// slurmrestd response.
type SlurmError struct {
	// Code is Slurm's error number (error_code in v0.0.38, error_number in
	// v0.0.41); 0 when the server gave none.
	Code        int
	Message     string
	Description string
	Source      string
}

// String formats the entry as "code: message: description: source".
func (e SlurmError) String() string {
	var parts []string
	if e.Code != 0 {
		parts = append(parts, fmt.Sprintf("%d", e.Code))
	}
	for _, s := range []string{e.Message, e.Description, e.Source} {
		if s != "" {
			parts = append(parts, s)
		}
	}
	return strings.Join(parts, ": ")
}

// APIError is an error answer of slurmrestd: the endpoint, the HTTP status
// and Slurm's error list. Use errors.As to get it.
type APIError struct {
	// Endpoint is the method and path, e.g. "GET /slurm/v0.0.38/jobs".
	Endpoint string
	// Status is the HTTP status code.
	Status int
	Errors []SlurmError
}

// Error names the endpoint, the HTTP status and Slurm's errors.
func (e *APIError) Error() string {
	msgs := make([]string, len(e.Errors))
	for i, se := range e.Errors {
		msgs[i] = se.String()
	}
	s := fmt.Sprintf("slurmrestd %s: HTTP %d", e.Endpoint, e.Status)
	if len(msgs) > 0 {
		s += ": " + strings.Join(msgs, "; ")
	}
	return s
}

// Is makes errors.Is(err, ErrNotFound) true for Slurm's "invalid job id"
// answer and for HTTP 404.
func (e *APIError) Is(target error) bool {
	return target == ErrNotFound && (e.Status == 404 || e.HasCode(esInvalidJobID))
}

// HasCode reports whether Slurm returned the given error number.
func (e *APIError) HasCode(code int) bool {
	for _, se := range e.Errors {
		if se.Code == code {
			return true
		}
	}
	return false
}

// Unauthorized reports whether the answer looks like an authentication
// failure. Missing headers give HTTP 401, but slurmrestd 22.05 answers a bad
// or expired JWT with HTTP 500 and the lone error "Unspecified error", so
// that case counts too.
func (e *APIError) Unauthorized() bool {
	if e.Status == 401 || e.Status == 403 {
		return true
	}
	return e.Status == 500 && len(e.Errors) == 1 && e.Errors[0].Message == "Unspecified error"
}
