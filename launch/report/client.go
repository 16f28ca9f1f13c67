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
	queue chan queued
	done  chan struct{}
	once  sync.Once
	sent  atomic.Int64
}

// queued is a sample to send, or a Flush's mark: flushed closes once
// every sample queued before it has been handled.
type queued struct {
	s       Sample
	flushed chan struct{}
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
	r := &Reporter{cfg: cfg, queue: make(chan queued, cfg.Queue), done: make(chan struct{})}
	go r.run(ctx)
	return r
}

// Submit queues s; it returns false when s was dropped.
func (r *Reporter) Submit(s Sample) bool {
	if r.cfg.URL == "" {
		return false
	}
	select {
	case r.queue <- queued{s: s}:
		return true
	default:
		return false
	}
}

// Flush waits, until ctx ends, for the samples submitted before it to be
// sent or given up on, so that what the caller sends next reaches rubickd
// after them. Like Submit, it must not be called after Close.
func (r *Reporter) Flush(ctx context.Context) error {
	if r.cfg.URL == "" {
		return nil
	}
	mark := queued{flushed: make(chan struct{})}
	select {
	case r.queue <- mark:
	case <-ctx.Done():
		return fmt.Errorf("flush samples: %w", ctx.Err())
	}
	select {
	case <-mark.flushed:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("flush samples: %w", ctx.Err())
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
	for q := range r.queue {
		if q.flushed != nil {
			close(q.flushed)
			continue
		}
		s := q.s
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
	return send(ctx, hc, url, enc, "sample", s)
}

// SendLaunch encodes l in a credential and POSTs it to url, the samples
// endpoint.
func SendLaunch(ctx context.Context, hc *http.Client, url string, enc Encoder, l Launch) error {
	l.Kind, l.Version = KindLaunch, LaunchVersion
	return send(ctx, hc, url, enc, "launch notice", l)
}

func send(ctx context.Context, hc *http.Client, url string, enc Encoder, what string, v any) error {
	payload, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s: %w", what, err)
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
		return fmt.Errorf("post %s: %w", what, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("post %s: %s: %s", what, resp.Status, bytes.TrimSpace(msg))
	}
	return nil
}

// readCredential reads one request body (a credential) and verifies it.
func readCredential(ctx context.Context, body io.Reader, v Verifier) (uint32, []byte, error) {
	raw, err := io.ReadAll(io.LimitReader(body, maxCredential+1))
	if err != nil {
		return 0, nil, fmt.Errorf("read credential: %w", err)
	}
	if len(raw) > maxCredential {
		return 0, nil, fmt.Errorf("%w: credential longer than %d bytes", ErrCredential, maxCredential)
	}
	cred, err := v.Decode(ctx, string(raw))
	if err != nil {
		return 0, nil, err
	}
	return cred.UID, cred.Payload, nil
}

// decode parses and validates one payload, wrapping bad in JSON errors.
func decode[T interface{ Validate() error }](payload []byte, bad error) (T, error) {
	var v T
	if err := json.Unmarshal(payload, &v); err != nil {
		return v, fmt.Errorf("%w: payload: %w", bad, err)
	}
	return v, v.Validate()
}

// Acceptors take what rubick-srun sends: each checks that the UID owns
// the job (returning ErrNotOwner otherwise) and records the message.
type Acceptors struct {
	Sample func(ctx context.Context, uid uint32, s Sample) error
	// Launch may be nil: launch notices are then refused as bad requests.
	Launch func(ctx context.Context, uid uint32, l Launch) error
	// Refused, when set, is told of each request turned away before an
	// acceptor saw it: a credential unmunge refused (ErrCredential) or
	// could not check (ErrUnavailable: munged down), a payload that is not
	// one. The acceptors say what they turn away themselves.
	Refused func(err error)
}

// Handler serves rubickd's samples endpoint: it verifies each POSTed
// credential and hands the UID and the sample or launch notice it carries
// (a payload with "kind": "launch") to the matching acceptor.
func Handler(v Verifier, a Acceptors) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "POST a MUNGE credential", http.StatusMethodNotAllowed)
			return
		}
		reached, err := serve(req.Context(), req.Body, v, a)
		if err != nil && !reached && a.Refused != nil {
			a.Refused(err)
		}
		switch {
		case err == nil:
			w.WriteHeader(http.StatusNoContent)
		case errors.Is(err, ErrCredential):
			http.Error(w, err.Error(), http.StatusUnauthorized)
		case errors.Is(err, ErrNotOwner):
			http.Error(w, err.Error(), http.StatusForbidden)
		case errors.Is(err, ErrBadSample), errors.Is(err, ErrBadLaunch):
			http.Error(w, err.Error(), http.StatusBadRequest)
		default:
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		}
	})
}

// serve reads one credential and hands its payload to its acceptor;
// reached says whether one got it.
func serve(ctx context.Context, body io.Reader, v Verifier, a Acceptors) (reached bool, err error) {
	uid, payload, err := readCredential(ctx, body, v)
	if err != nil {
		return false, err
	}
	var probe struct {
		Kind string `json:"kind"`
	}
	if err := json.Unmarshal(payload, &probe); err != nil {
		return false, fmt.Errorf("%w: payload: %w", ErrBadSample, err)
	}
	switch probe.Kind {
	case "":
		s, err := decode[Sample](payload, ErrBadSample)
		if err != nil {
			return false, err
		}
		return true, a.Sample(ctx, uid, s)
	case KindLaunch:
		if a.Launch == nil {
			return false, fmt.Errorf("%w: this endpoint takes no launch notices", ErrBadLaunch)
		}
		l, err := decode[Launch](payload, ErrBadLaunch)
		if err != nil {
			return false, err
		}
		return true, a.Launch(ctx, uid, l)
	}
	return false, fmt.Errorf("%w: kind=%q is neither a sample nor %q", ErrBadSample, clip(probe.Kind), KindLaunch)
}

// Limit bounds the credentials v decodes at once to n: each decode is an
// unmunge process, and anyone who reaches the endpoint can send requests.
// A request waits its turn until its context ends, which fails it with the
// context's error.
func Limit(v Verifier, n int) Verifier {
	return limited{v: v, sem: make(chan struct{}, max(n, 1))}
}

type limited struct {
	v   Verifier
	sem chan struct{}
}

func (l limited) Decode(ctx context.Context, cred string) (Credential, error) {
	select {
	case l.sem <- struct{}{}:
	case <-ctx.Done():
		// The sender gave up (or went away): not munged's fault.
		return Credential{}, fmt.Errorf("waiting for a turn to decode: %w", ctx.Err())
	}
	defer func() { <-l.sem }()
	return l.v.Decode(ctx, cred)
}
