package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rubick-sched/rubick/daemon"
	"github.com/rubick-sched/rubick/report"
)

// writeConfig writes a rubickd configuration holding lines and returns
// its path.
func writeConfig(t *testing.T, lines ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rubickd.yaml")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// offlineTransport reaches only the test's own servers: a command that
// would query rubickd's built-in address fails here rather than ask
// whatever this host runs there.
type offlineTransport struct{ allow string }

func (o offlineTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Host != o.allow {
		return nil, fmt.Errorf("test: no network to %s", r.URL.Host)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// TestStatusFromConfig: status takes the store and rubickd's endpoint
// from rubickd's configuration where --store and --url do not give them,
// as rubickd reads it (file and RUBICK_* variables); the flags and
// $RUBICK_STORE come first.
func TestStatusFromConfig(t *testing.T) {
	path, _ := seedExplainStore(t)
	srv := fakeDaemon(t, daemon.CycleReport{})
	addr := strings.TrimPrefix(srv.URL, "http://")
	_, port, _ := strings.Cut(addr, ":")
	other := filepath.Join(t.TempDir(), "other.db")
	file := writeConfig(t, "store: "+path, "listen: "+addr)
	missing := filepath.Join(t.TempDir(), "missing.yaml")
	builtIn := daemon.Defaults()
	// A file that cannot be read, whoever runs the test (root reads 0600).
	unreadable := filepath.Join(t.TempDir(), "rubickd.yaml")
	if err := os.Mkdir(unreadable, 0o700); err != nil {
		t.Fatal(err)
	}

	type got struct {
		URL       string
		Store     string
		Reachable bool
		// Stderr and DaemonError are the part of each the case wants,
		// when they hold it, else the whole.
		Stderr, DaemonError string
	}
	reached := got{URL: srv.URL, Store: path, Reachable: true}
	tests := map[string]struct {
		defaultFile string   // the default configuration: a path, or "" for none
		args        []string // beside --json
		getenv      map[string]string
		environ     []string
		want        got
	}{
		"default file":           {defaultFile: file, want: reached},
		"--config":               {args: []string{"--config", file}, want: reached},
		"$RUBICK_CONFIG":         {getenv: map[string]string{configEnv: file}, want: reached},
		"--config beside env":    {args: []string{"--config", file}, getenv: map[string]string{configEnv: missing}, want: reached},
		"--store beats the file": {defaultFile: file, args: []string{"--store", other}, want: got{URL: srv.URL, Store: other, Reachable: true}},
		"$RUBICK_STORE beats the file": {defaultFile: file, getenv: map[string]string{storeEnv: other},
			want: got{URL: srv.URL, Store: other, Reachable: true}},
		"--url beats listen": {defaultFile: writeConfig(t, "store: "+path, "listen: 127.0.0.1:1"), args: []string{"--url", srv.URL}, want: reached},
		"listen from the environment": {environ: []string{"RUBICK_LISTEN=" + addr, "RUBICK_STORE=" + path}, getenv: map[string]string{storeEnv: path},
			want: reached},
		"wildcard listen":      {defaultFile: writeConfig(t, "store: "+path, "listen: 0.0.0.0:"+port), want: got{URL: "http://127.0.0.1:" + port, Store: path, Reachable: true}},
		"listen without host":  {defaultFile: writeConfig(t, "store: "+path, "listen: ':"+port+"'"), want: got{URL: "http://127.0.0.1:" + port, Store: path, Reachable: true}},
		"ipv6 wildcard listen": {defaultFile: writeConfig(t, "store: "+path, "listen: '[::]:"+port+"'"), want: got{URL: "http://[::1]:" + port, Store: path, DaemonError: "no network"}},
		"empty listen": {defaultFile: writeConfig(t, "store: "+path, `listen: ""`),
			want: got{Store: path, DaemonError: "has no HTTP endpoint configured (listen is empty in "}},
		"--config '' reads none": {defaultFile: file, args: []string{"--config", ""},
			want: got{URL: "http://" + builtIn.Listen, Store: builtIn.Store, DaemonError: "no network"}},
		// Login nodes have no rubickd configuration.
		"no default file": {want: got{URL: "http://" + builtIn.Listen, Store: builtIn.Store, DaemonError: "no network"}},
		// rubickd's host, where users cannot read the file.
		"unreadable default file": {defaultFile: unreadable,
			want: got{URL: "http://" + builtIn.Listen, Store: builtIn.Store, DaemonError: "no network", Stderr: "rubick: warning: rubickd's configuration "}},
		"invalid default file": {defaultFile: writeConfig(t, "store: "+path, "listen: "+addr, "intervall: 30s"),
			want: got{URL: "http://" + builtIn.Listen, Store: builtIn.Store, DaemonError: "no network", Stderr: `unknown key "intervall"`}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			env := testEnv(t)
			if tc.defaultFile != "" {
				env.configPath = tc.defaultFile
			}
			env.getenv = func(k string) string { return tc.getenv[k] }
			env.environ = func() []string { return tc.environ }
			env.http = &http.Client{Transport: offlineTransport{allow: addr}}
			var out, errb bytes.Buffer
			// Without a store or a rubickd status fails, having written
			// the status.
			_ = statusCmd(context.Background(), append([]string{"--json"}, tc.args...), &out, &errb, env)
			var v statusView
			if err := json.Unmarshal(out.Bytes(), &v); err != nil {
				t.Fatalf("%v\nstdout: %s\nstderr: %s", err, out.String(), errb.String())
			}
			g := got{URL: v.URL, Store: v.Store, Reachable: v.Daemon.Reachable}
			if tc.want.DaemonError != "" && strings.Contains(v.Daemon.Error, tc.want.DaemonError) {
				g.DaemonError = tc.want.DaemonError
			} else {
				g.DaemonError = v.Daemon.Error
			}
			if tc.want.Stderr != "" && strings.Contains(errb.String(), tc.want.Stderr) && strings.Count(errb.String(), "\n") == 1 {
				g.Stderr = tc.want.Stderr
			} else {
				g.Stderr = errb.String()
			}
			if d := cmp.Diff(tc.want, g); d != "" {
				t.Errorf("status (-want +got):\n%s", d)
			}
		})
	}
}

// TestStatusNoEndpoint: an empty listen (HTTP disabled) is said as such,
// naming where it was set, and fails --check.
func TestStatusNoEndpoint(t *testing.T) {
	path, _ := seedExplainStore(t)
	file := writeConfig(t, `listen: ""`)
	tests := map[string]struct {
		environ []string
		line    string
	}{
		"in the file":        {line: "rubickd has no HTTP endpoint configured (listen is empty in " + file + ")\n"},
		"in the environment": {environ: []string{"RUBICK_LISTEN="}, line: "rubickd has no HTTP endpoint configured (listen is empty in $RUBICK_LISTEN)\n"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			env := testEnv(t)
			env.configPath = file
			env.environ = func() []string { return tc.environ }
			var out, errb bytes.Buffer
			if err := statusCmd(context.Background(), []string{"--store", path}, &out, &errb, env); err != nil {
				t.Fatal(err)
			}
			if first, _, _ := strings.Cut(out.String(), "\n"); first+"\n" != tc.line {
				t.Errorf("rubickd's line:\n%s\nwant:\n%s", first, tc.line)
			}
			err := statusCmd(context.Background(), []string{"--store", path, "--check"}, &out, &errb, env)
			if err == nil || !strings.Contains(err.Error(), "no HTTP endpoint configured") {
				t.Errorf("--check: %v, want it to fail saying rubickd has no HTTP endpoint", err)
			}
		})
	}
}

// TestConfigErrors: a configuration named by --config or $RUBICK_CONFIG
// that does not load is a usage error naming it, in every command that
// reads it.
func TestConfigErrors(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing.yaml")
	invalid := writeConfig(t, "listen: nowhere")
	cmds := map[string]func(context.Context, []string, *bytes.Buffer, *bytes.Buffer, cliEnv) error{
		"status": func(ctx context.Context, a []string, o, e *bytes.Buffer, env cliEnv) error {
			return statusCmd(ctx, a, o, e, env)
		},
		"explain": func(ctx context.Context, a []string, o, e *bytes.Buffer, env cliEnv) error {
			return explainCmd(ctx, append(a, "42"), o, e, env)
		},
		"queue": func(ctx context.Context, a []string, o, e *bytes.Buffer, env cliEnv) error {
			return queueCmd(ctx, a, o, e, env)
		},
		"store stats": func(ctx context.Context, a []string, o, e *bytes.Buffer, env cliEnv) error {
			return storeCmd(ctx, append([]string{"stats"}, a...), o, e, env)
		},
		"report": func(ctx context.Context, a []string, o, e *bytes.Buffer, env cliEnv) error {
			return reportCmd(ctx, append([]string{"--input", synthetic}, a...), o, e, env)
		},
	}
	tests := map[string]struct {
		args   []string
		getenv map[string]string
		say    []string
	}{
		"--config missing":       {args: []string{"--config", missing}, say: []string{"--config=" + missing, "no such file"}},
		"$RUBICK_CONFIG missing": {getenv: map[string]string{configEnv: missing}, say: []string{"$RUBICK_CONFIG=" + missing, "no such file"}},
		"--config invalid":       {args: []string{"--config", invalid}, say: []string{"--config=" + invalid, `listen="nowhere"`}},
	}
	for cmdName, cmd := range cmds {
		for name, tc := range tests {
			t.Run(cmdName+"/"+name, func(t *testing.T) {
				env := testEnv(t)
				env.getenv = func(k string) string { return tc.getenv[k] }
				var out, errb bytes.Buffer
				err := cmd(context.Background(), tc.args, &out, &errb, env)
				if !errors.Is(err, errUsage) || !errors.Is(err, daemon.ErrConfig) {
					t.Fatalf("error %v, want a usage error wrapping %v", err, daemon.ErrConfig)
				}
				for _, s := range tc.say {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not say %q", err, s)
					}
				}
			})
		}
	}
}

// TestStoreFromConfig: explain, queue, store and report read the store
// rubickd's configuration names.
func TestStoreFromConfig(t *testing.T) {
	path, _ := seedExplainStore(t)
	file := writeConfig(t, "store: "+path)
	tests := map[string]struct {
		run  func(context.Context, *bytes.Buffer, *bytes.Buffer, cliEnv) error
		want string
	}{
		"explain": {
			run: func(ctx context.Context, o, e *bytes.Buffer, env cliEnv) error {
				return explainCmd(ctx, []string{"--json", "42"}, o, e, env)
			},
			want: `"job_id":42`,
		},
		"queue": {
			run: func(ctx context.Context, o, e *bytes.Buffer, env cliEnv) error {
				return queueCmd(ctx, []string{"--json"}, o, e, env)
			},
			want: `"store":"` + path + `"`,
		},
		"store stats": {
			run: func(ctx context.Context, o, e *bytes.Buffer, env cliEnv) error {
				return storeCmd(ctx, []string{"stats", "--json"}, o, e, env)
			},
			want: `"store":"` + path + `"`,
		},
		"report": {
			run: func(ctx context.Context, o, e *bytes.Buffer, env cliEnv) error {
				err := reportCmd(ctx, []string{"--input", synthetic, "--json"}, o, e, env)
				if errors.Is(err, report.ErrJob) {
					return nil // the input's one malformed tag
				}
				return err
			},
			want: `"store":"` + path + `"`,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			env := testEnv(t)
			env.configPath = file
			var out, errb bytes.Buffer
			if err := tc.run(context.Background(), &out, &errb, env); err != nil {
				t.Fatalf("%v\n%s", err, errb.String())
			}
			var compact bytes.Buffer
			if err := json.Compact(&compact, out.Bytes()); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(compact.String(), tc.want) {
				t.Errorf("output does not hold %s:\n%s", tc.want, compact.String())
			}
		})
	}
}

func TestListenURL(t *testing.T) {
	for listen, want := range map[string]string{
		"127.0.0.1:9717":  "http://127.0.0.1:9717",
		"0.0.0.0:9800":    "http://127.0.0.1:9800",
		":9800":           "http://127.0.0.1:9800",
		"[::]:9800":       "http://[::1]:9800",
		"[fe80::1]:9800":  "http://[fe80::1]:9800",
		"head1.lan:9800":  "http://head1.lan:9800",
		"10.0.0.5:9800":   "http://10.0.0.5:9800",
		"[::1]:9800":      "http://[::1]:9800",
		"localhost:12345": "http://localhost:12345",
	} {
		got, err := listenURL(listen)
		if err != nil {
			t.Errorf("listenURL(%q): %v", listen, err)
			continue
		}
		if got != want {
			t.Errorf("listenURL(%q) = %q, want %q", listen, got, want)
		}
		if _, err := url.Parse(got); err != nil {
			t.Errorf("listenURL(%q) = %q: %v", listen, got, err)
		}
	}
}
