package report

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// ErrNotOwner is returned by an Accept function when the credential's UID
// may not report for the sample's job; Handler answers 403.
var ErrNotOwner = errors.New("uid does not own the job")

// Encoder turns a payload into a credential; Munge is one.
type Encoder interface {
	Encode(ctx context.Context, payload []byte) (string, error)
}

// Verifier checks a credential; Munge is one.
type Verifier interface {
	Decode(ctx context.Context, cred string) (Credential, error)
}

// ContentType is the media type of a samples request body: one MUNGE
// credential whose payload is a JSON Sample.
const ContentType = "application/x-munge-credential"

// ReporterConfig configures a Reporter.
type ReporterConfig struct {
	// URL is rubickd's samples endpoint; empty disables reporting.
	URL string
	// Encoder makes the credentials; nil means Munge{}.
	Encoder Encoder
	// HTTP is the client; nil means one with a 10 s timeout.
	HTTP *http.Client
	// Queue bounds the samples waiting to be sent; extra samples are dropped
	// rather than slowing the trainer's output. 0 means 64.
	Queue  int
	Logger *slog.Logger
}

// Reporter sends samples in the background. It never blocks the caller and
// never fails: after the first failure is logged, later ones are logged at
// debug level, and once MUNGE is found missing nothing more is attempted.
type Reporter struct {
	cfg   ReporterConfig
	queue chan Sample
	done  chan struct{}
	once  sync.Once
	sent  atomic.Int64
}

// NewReporter starts a Reporter; Close stops it.
func NewReporter(ctx context.Context, cfg ReporterConfig) *Reporter {
	if cfg.Encoder == nil {
		cfg.Encoder = Munge{}
	}
	if cfg.HTTP == nil {
		cfg.HTTP = &http.Client{Timeout: 10 * time.Second}
	}
	if cfg.Queue <= 0 {
		cfg.Queue = 64
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	r := &Reporter{cfg: cfg, queue: make(chan Sample, cfg.Queue), done: make(chan struct{})}
	go r.run(ctx)
	return r
}

// Submit queues s; it returns false when s was dropped.
func (r *Reporter) Submit(s Sample) bool {
	if r.cfg.URL == "" {
		return false
	}
	select {
	case r.queue <- s:
		return true
	default:
		return false
	}
}

// Close stops accepting samples and waits, until ctx ends, for the queued
// ones to be sent. It returns how many were sent.
func (r *Reporter) Close(ctx context.Context) int64 {
	r.once.Do(func() { close(r.queue) })
	select {
	case <-r.done:
	case <-ctx.Done():
	}
	return r.sent.Load()
}

func (r *Reporter) run(ctx context.Context) {
	defer close(r.done)
	log := r.cfg.Logger
	if r.cfg.URL == "" {
		log.Info("no samples endpoint configured; iteration times are not reported")
	}
	warned, disabled := false, false
	for s := range r.queue {
		if disabled || ctx.Err() != nil {
			continue
		}
		err := Send(ctx, r.cfg.HTTP, r.cfg.URL, r.cfg.Encoder, s)
		switch {
		case err == nil:
			r.sent.Add(1)
			continue
		case errors.Is(err, ErrUnavailable):
			disabled = true
			log.Warn("munge unavailable; iteration times are not reported", "err", err)
		case !warned:
			warned = true
			log.Warn("reporting a sample failed; the job continues", "job", s.JobID, "err", err)
		default:
			log.Debug("reporting a sample failed", "job", s.JobID, "err", err)
		}
	}
}

// Send encodes s in a credential and POSTs it to url.
func Send(ctx context.Context, hc *http.Client, url string, enc Encoder, s Sample) error {
	payload, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("encode sample: %w", err)
	}
	cred, err := enc.Encode(ctx, payload)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(cred))
	if err != nil {
		return fmt.Errorf("samples endpoint %q: %w", url, err)
	}
	req.Header.Set("Content-Type", ContentType)
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("post sample: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("post sample: %s: %s", resp.Status, bytes.TrimSpace(msg))
	}
	return nil
}

// ReadSample reads one request body (a credential), verifies it and returns
// the authenticated UID with the sample it carries. The caller must still
// check that the UID owns Sample.JobID.
func ReadSample(ctx context.Context, body io.Reader, v Verifier) (uint32, Sample, error) {
	raw, err := io.ReadAll(io.LimitReader(body, maxCredential+1))
	if err != nil {
		return 0, Sample{}, fmt.Errorf("read credential: %w", err)
	}
	if len(raw) > maxCredential {
		return 0, Sample{}, fmt.Errorf("%w: credential longer than %d bytes", ErrCredential, maxCredential)
	}
	cred, err := v.Decode(ctx, string(raw))
	if err != nil {
		return 0, Sample{}, err
	}
	var s Sample
	if err := json.Unmarshal(cred.Payload, &s); err != nil {
		return cred.UID, Sample{}, fmt.Errorf("%w: payload: %w", ErrBadSample, err)
	}
	if err := s.Validate(); err != nil {
		return cred.UID, Sample{}, err
	}
	return cred.UID, s, nil
}

// Handler serves rubickd's samples endpoint: it verifies each POSTed
// credential and hands the UID and sample to accept, which checks that the
// UID owns the job (returning ErrNotOwner otherwise) and stores the sample.
func Handler(v Verifier, accept func(ctx context.Context, uid uint32, s Sample) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "POST a MUNGE credential", http.StatusMethodNotAllowed)
			return
		}
		uid, s, err := ReadSample(req.Context(), req.Body, v)
		if err == nil {
			err = accept(req.Context(), uid, s)
		}
		switch {
		case err == nil:
			w.WriteHeader(http.StatusNoContent)
		case errors.Is(err, ErrCredential):
			http.Error(w, err.Error(), http.StatusUnauthorized)
		case errors.Is(err, ErrNotOwner):
			http.Error(w, err.Error(), http.StatusForbidden)
		case errors.Is(err, ErrBadSample):
			http.Error(w, err.Error(), http.StatusBadRequest)
		default:
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		}
	})
}
