package slurm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Cluster is what rubick reads from (and, in tests, submits to) Slurm,
// whatever the slurmrestd API version.
type Cluster interface {
	// Ping checks that slurmrestd and slurmctld answer.
	Ping(ctx context.Context) error
	// Jobs lists all jobs. With a non-zero since it asks only for changes
	// after that time; changed is false (and jobs nil) when slurmrestd
	// answered 304 Not Modified.
	Jobs(ctx context.Context, since time.Time) (jobs []Job, changed bool, err error)
	// Job reads one job; a job Slurm does not know gives ErrNotFound.
	Job(ctx context.Context, id int) (Job, error)
	// Nodes lists all nodes.
	Nodes(ctx context.Context) ([]Node, error)
	// Partitions lists all partitions.
	Partitions(ctx context.Context) ([]Partition, error)
	// Submit submits a batch job and returns its id. A held submission
	// (Slurm error 2042 with a job id) is a success.
	Submit(ctx context.Context, req SubmitRequest) (int, error)
}

// Config configures NewCluster.
type Config struct {
	// URL is slurmrestd's base URL, e.g. "http://127.0.0.1:6820".
	URL string
	// Version pins the API version (Version38, Version41 or Version42); empty means
	// detect it from what the server serves.
	Version string
	// TokenFile holds the JWT, raw or as "SLURM_JWT=..." (what
	// `scontrol token` prints); it is re-read when it changes.
	TokenFile string
	// Token is a fixed JWT, used when TokenFile is empty.
	Token string
	// User is sent as X-SLURM-USER-NAME.
	User string
	// Cluster is the cluster whose associations the limits listing reads
	// (slurm.conf's ClusterName): a slurmdbd serving several clusters
	// lists every cluster's. Empty reads them all.
	Cluster string
	// RateLimit is the most requests per second (0: unlimited); Burst the
	// most at once (default 1).
	RateLimit float64
	Burst     int
	// HTTPClient defaults to a client without a global timeout (Timeout
	// bounds each call instead).
	HTTPClient *http.Client
	// Timeout bounds each request; default 10 s.
	Timeout time.Duration
	// Clock defaults to SystemClock.
	Clock Clock
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// maxBody bounds a response body; a full job list of a large cluster is a
// few MB.
const maxBody = 256 << 20

// RESTCluster is the Cluster backed by slurmrestd.
type RESTCluster struct {
	token   tokenSource
	version string
	timeout time.Duration
	log     *slog.Logger
	api     backend
	cluster string // Config.Cluster

	// warned is the error last logged per job and kind (a malformed tag,
	// a malformed node list): it is logged when it appears or changes, not
	// at every poll.
	warnMu sync.Mutex
	warned map[jobWarning]string
	// typeWarned holds the fields whose type differed from the spec, each
	// logged once: a version that differs does so at every poll.
	typeWarned sync.Map
}

var _ Cluster = (*RESTCluster)(nil)

// backend is one API version's client.
type backend interface {
	ping(ctx context.Context) error
	jobs(ctx context.Context, since time.Time) ([]Job, bool, error)
	job(ctx context.Context, id int) (Job, error)
	nodes(ctx context.Context) ([]Node, error)
	partitions(ctx context.Context) ([]Partition, error)
	submit(ctx context.Context, req SubmitRequest) (int, error)
	qos(ctx context.Context) ([]QOS, error)
	associations(ctx context.Context, cluster string) ([]Association, error)
	reservations(ctx context.Context) ([]Reservation, error)
	licenses(ctx context.Context) ([]License, error)
}

// NewCluster connects to slurmrestd. Unless cfg.Version pins it, it probes
// the versions it knows, newest first, and keeps the first one served.
func NewCluster(ctx context.Context, cfg Config) (*RESTCluster, error) {
	if cfg.URL == "" {
		return nil, errors.New("slurm: Config.URL is empty")
	}
	if cfg.Clock == nil {
		cfg.Clock = SystemClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{}
	}
	var tok tokenSource = staticToken(cfg.Token)
	if cfg.TokenFile != "" {
		tok = &tokenFile{path: cfg.TokenFile}
	}
	d := &doer{
		http:    hc,
		user:    cfg.User,
		token:   tok,
		limiter: newRateLimiter(cfg.Clock, cfg.RateLimit, cfg.Burst),
	}
	base := strings.TrimRight(cfg.URL, "/")
	c := &RESTCluster{timeout: cfg.Timeout, log: cfg.Logger, token: tok, cluster: cfg.Cluster}
	build := func(v string) (backend, error) {
		switch v {
		case Version38:
			return newV38(base, d, c)
		case Version41, Version42:
			return newV41(v, base, d, c)
		}
		return nil, fmt.Errorf("slurm: %w: %q", ErrUnsupportedVersion, v)
	}
	if cfg.Version != "" {
		b, err := build(cfg.Version)
		if err != nil {
			return nil, err
		}
		c.version, c.api = cfg.Version, b
		return c, nil
	}
	for _, v := range []string{Version42, Version41, Version38} {
		b, err := build(v)
		if err != nil {
			return nil, err
		}
		err = b.ping(ctx)
		var ae *APIError
		if errors.As(err, &ae) && ae.Status == http.StatusNotFound {
			continue // this version is not served
		}
		if err != nil {
			return nil, fmt.Errorf("slurm: detecting the API version: %w", err)
		}
		c.version, c.api = v, b
		cfg.Logger.Info("slurmrestd API version detected", "version", v, "url", base)
		return c, nil
	}
	return nil, fmt.Errorf("slurm: %s serves none of %s, %s and %s: %w", base, Version42, Version41, Version38, ErrUnsupportedVersion)
}

// TokenClaims reads the claims of the JWT in use (the token file's
// current content, when there is one).
func (c *RESTCluster) TokenClaims() (TokenClaims, error) {
	tok, err := c.token.get()
	if err != nil {
		return TokenClaims{}, err
	}
	return ParseTokenClaims(tok)
}

// Version returns the API version in use, e.g. "v0.0.38".
func (c *RESTCluster) Version() string { return c.version }

// Ping implements Cluster.
func (c *RESTCluster) Ping(ctx context.Context) error { return c.api.ping(ctx) }

// Jobs implements Cluster.
func (c *RESTCluster) Jobs(ctx context.Context, since time.Time) ([]Job, bool, error) {
	jobs, changed, err := c.api.jobs(ctx, since)
	if err == nil && changed {
		c.forgetWarnings(jobs)
	}
	return jobs, changed, err
}

// Job implements Cluster.
func (c *RESTCluster) Job(ctx context.Context, id int) (Job, error) { return c.api.job(ctx, id) }

// Nodes implements Cluster.
func (c *RESTCluster) Nodes(ctx context.Context) ([]Node, error) { return c.api.nodes(ctx) }

// Partitions implements Cluster.
func (c *RESTCluster) Partitions(ctx context.Context) ([]Partition, error) {
	return c.api.partitions(ctx)
}

// Limits lists the partitions' node limits, and the QOS and associations
// slurmdbd knows with their per-job limits, through slurmrestd's database
// plugin. Where the API version has no database endpoints this package can
// read (v0.0.41: the specification rubick generates from was served
// without the plugin), it gives the partitions' limits alone.
func (c *RESTCluster) Limits(ctx context.Context) (Limits, error) {
	// The three reads go at once: slurmdbd's two take 0.2-0.3 s each on
	// the lab, and rubickd's cycle waits for them every minute.
	var (
		wg                    sync.WaitGroup
		parts                 []Partition
		qos                   []QOS
		assoc                 []Association
		partErr, qosErr, aErr error
	)
	wg.Go(func() { parts, partErr = c.api.partitions(ctx) })
	wg.Go(func() { qos, qosErr = c.api.qos(ctx) })
	wg.Go(func() { assoc, aErr = c.api.associations(ctx, c.cluster) })
	wg.Wait()
	if partErr != nil {
		return Limits{}, partErr
	}
	l := Limits{Partitions: PartitionsByName(parts)}
	if errors.Is(qosErr, ErrUnsupported) {
		return l, nil
	}
	if qosErr != nil {
		return Limits{}, qosErr
	}
	if aErr != nil {
		return Limits{}, aErr
	}
	l.Associations = assoc
	l.QOS = make(map[string]QOS, len(qos))
	for _, q := range qos {
		l.QOS[q.Name] = q
	}
	return l.Indexed(), nil
}

// Reservations lists the advance reservations slurmctld knows.
func (c *RESTCluster) Reservations(ctx context.Context) ([]Reservation, error) {
	return c.api.reservations(ctx)
}

// Licenses lists the cluster's licenses (slurm.conf Licenses=) and how
// many of each are free.
func (c *RESTCluster) Licenses(ctx context.Context) ([]License, error) {
	return c.api.licenses(ctx)
}

// Submit implements Cluster.
func (c *RESTCluster) Submit(ctx context.Context, req SubmitRequest) (int, error) {
	return c.api.submit(ctx, req)
}

// doer is the HTTP client handed to the generated clients: it rate-limits,
// adds the JWT headers and keeps the network errors recognisable.
type doer struct {
	http    *http.Client
	user    string
	token   tokenSource
	limiter *rateLimiter
}

// Do implements the generated clients' HttpRequestDoer.
func (d *doer) Do(req *http.Request) (*http.Response, error) {
	if err := d.limiter.wait(req.Context()); err != nil {
		return nil, err
	}
	tok, err := d.token.get()
	if err != nil {
		return nil, err
	}
	req.Header.Set("X-SLURM-USER-NAME", d.user)
	req.Header.Set("X-SLURM-USER-TOKEN", tok)
	req.Header.Set("Accept", "application/json")
	return d.http.Do(req)
}

// call runs one request with the per-call timeout, reads the body and turns
// failures into ErrUnavailable or *APIError. It returns the status and body;
// a 304 comes back as (304, nil, nil).
func (c *RESTCluster) call(ctx context.Context, endpoint string, f func(context.Context) (*http.Response, error)) (int, []byte, error) {
	cctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	resp, err := f(cctx)
	if err != nil {
		return 0, nil, classify(ctx, endpoint, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return 0, nil, classify(ctx, endpoint, err)
	}
	if resp.StatusCode == http.StatusNotModified {
		return resp.StatusCode, nil, nil
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, body, &APIError{Endpoint: endpoint, Status: resp.StatusCode, Errors: parseErrors(body)}
	}
	return resp.StatusCode, body, nil
}

// classify maps transport failures to ErrUnavailable, except when the
// caller's own context ended, which is the caller's business.
func classify(ctx context.Context, endpoint string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("slurmrestd %s: %w", endpoint, ctx.Err())
	}
	var ne net.Error
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || (errors.As(err, &ne) && ne.Timeout()) {
		return fmt.Errorf("slurmrestd %s: %w: %w", endpoint, ErrUnavailable, err)
	}
	var oe *net.OpError
	if errors.As(err, &oe) {
		return fmt.Errorf("slurmrestd %s: %w: %w", endpoint, ErrUnavailable, err)
	}
	return fmt.Errorf("slurmrestd %s: %w", endpoint, err)
}

// wireError is the union of the error shapes of both versions: v0.0.38
// sends error_code (its spec says error_number), v0.0.41 error_number,
// description and source.
type wireError struct {
	ErrorCode   *int   `json:"error_code"`
	ErrorNumber *int   `json:"error_number"`
	Error       string `json:"error"`
	Description string `json:"description"`
	Source      string `json:"source"`
}

func (w wireError) domain() SlurmError {
	se := SlurmError{Message: w.Error, Description: w.Description, Source: w.Source}
	if w.ErrorCode != nil {
		se.Code = *w.ErrorCode
	} else if w.ErrorNumber != nil {
		se.Code = *w.ErrorNumber
	}
	return se
}

// envelope is the part every response shares.
type envelope struct {
	Errors   []wireError `json:"errors"`
	Warnings []wireError `json:"warnings"`
}

func parseErrors(body []byte) []SlurmError {
	var env envelope
	if json.Unmarshal(body, &env) != nil {
		if s := strings.TrimSpace(string(body)); s != "" {
			return []SlurmError{{Message: clip(s)}}
		}
		return nil
	}
	out := make([]SlurmError, 0, len(env.Errors))
	for _, w := range env.Errors {
		out = append(out, w.domain())
	}
	return out
}

// decode unmarshals a response body. A field whose type differs from the
// spec (slurmrestd does not always follow its own documents) is logged,
// once, and skipped rather than failing the whole poll: encoding/json
// fills in the rest and reports only the first such field.
func (c *RESTCluster) decode(endpoint string, body []byte, v any) error {
	err := json.Unmarshal(body, v)
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		// Not by endpoint: a job's own has its ID in it.
		key := te.Field + "\x00" + te.Value + "\x00" + te.Type.String()
		if _, seen := c.typeWarned.LoadOrStore(key, true); !seen {
			c.log.Warn("slurmrestd field type differs from the spec; field skipped",
				"endpoint", endpoint, "field", te.Field, "json_type", te.Value, "go_type", te.Type.String())
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("slurmrestd %s: decoding the response: %w", endpoint, err)
	}
	return nil
}

// get calls a GET endpoint and decodes its answer (answer) into a T.
func get[T any](ctx context.Context, c *RESTCluster, ep string, call func(context.Context) (*http.Response, error)) (T, error) {
	var r T
	status, body, err := c.call(ctx, ep, call)
	if err != nil {
		return r, err
	}
	return r, c.answer(ep, status, body, &r)
}

// answer decodes a response body into v once it carries no Slurm errors
// (an *APIError otherwise).
func (c *RESTCluster) answer(ep string, status int, body []byte, v any) error {
	if err := responseErrors(ep, status, body); err != nil {
		return err
	}
	return c.decode(ep, body, v)
}

// responseErrors returns an *APIError when a 2xx answer still carries
// Slurm errors.
func responseErrors(endpoint string, status int, body []byte) error {
	errs := parseErrors(body)
	if len(errs) == 0 {
		return nil
	}
	return &APIError{Endpoint: endpoint, Status: status, Errors: errs}
}

// flexInt decodes a JSON number, a numeric string, null, or a v0.0.41
// {set, infinite, number} object. Unset and infinite give 0 and Set false.
type flexInt struct {
	Value    int64
	Set      bool
	Infinite bool
}

func (f *flexInt) UnmarshalJSON(b []byte) error {
	*f = flexInt{}
	s := strings.TrimSpace(string(b))
	switch {
	case s == "null" || s == `""`:
		return nil
	case strings.HasPrefix(s, "{"):
		var o struct {
			Set      bool    `json:"set"`
			Infinite bool    `json:"infinite"`
			Number   float64 `json:"number"`
		}
		if err := json.Unmarshal(b, &o); err != nil {
			return err
		}
		f.Infinite = o.Infinite
		if o.Set && !o.Infinite {
			f.Set, f.Value = true, int64(o.Number)
		}
		return nil
	}
	s = strings.Trim(s, `"`)
	var n float64
	if err := json.Unmarshal([]byte(s), &n); err != nil {
		return fmt.Errorf("flexInt %s: %w", s, err)
	}
	f.Set, f.Value = true, int64(n)
	return nil
}

// controllersUp checks a ping answer's controllers (host, state): slurmctld
// answers while one of them is UP, so a backup controller that is down
// (SlurmctldHost listed twice) is no outage. None up is ErrUnavailable,
// naming each.
func controllersUp(ep string, hosts, states []string) error {
	if len(hosts) == 0 || slices.Contains(states, "UP") {
		return nil
	}
	var down []string
	for i, h := range hosts {
		down = append(down, fmt.Sprintf("%s is %q", h, states[i]))
	}
	return fmt.Errorf("slurmrestd %s: slurmctld %s: %w", ep, strings.Join(down, ", "), ErrUnavailable)
}

func unixTime(sec int64) time.Time {
	if sec <= 0 {
		return time.Time{}
	}
	return time.Unix(sec, 0).UTC()
}

// minutes converts Slurm's time limit in minutes; 0 and negative values
// (unset) give 0.
func minutes[T int32 | int64](m T) time.Duration {
	if m <= 0 {
		return 0
	}
	return time.Duration(m) * time.Minute
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
