package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"strings"

	"github.com/rubick-sched/rubick/daemon"
)

// configEnv names rubickd's configuration file for the commands that read
// its store and listen settings, where --config is not given.
const configEnv = "RUBICK_CONFIG"

// listenEnv is the variable that sets rubickd's listen key.
const listenEnv = "RUBICK_LISTEN"

// rubickdConfig is rubickd's configuration as the CLI read it.
type rubickdConfig struct {
	daemon.Config
	// File is the file read; "" when none was (the built-in defaults, with
	// the RUBICK_* variables).
	File string
}

// configFlag adds --config to fs for the commands that take rubickd's store
// or listen setting, and returns what reads the configuration once fs is
// parsed; it reads it at most once, and only when called, so a command
// whose flags say everything never warns about a file it does not need.
func configFlag(fs *flag.FlagSet, env cliEnv, stderr io.Writer) func() (rubickdConfig, error) {
	path := fs.String("config", "", "rubickd's configuration `file`, read for the settings no flag gives (store, and listen for status); "+
		"'' reads none (default: $"+configEnv+", else "+daemon.DefaultConfigPath+" when it exists)")
	var (
		loaded bool
		cfg    rubickdConfig
		err    error
	)
	return func() (rubickdConfig, error) {
		if !loaded {
			loaded = true
			cfg, err = loadRubickdConfig(*path, flagGiven(fs, "config"), env, stderr)
		}
		return cfg, err
	}
}

// loadRubickdConfig reads rubickd's configuration as rubickd does
// (daemon.LoadConfig, with the process's RUBICK_* variables), so the two
// never disagree on the store or the endpoint. A file named by --config
// (set) or $RUBICK_CONFIG must load. The default file is optional: login
// nodes have none, and where it cannot be read (0600, rubickd's host) or
// is invalid, users' commands still work on the built-in defaults.
func loadRubickdConfig(path string, set bool, env cliEnv, stderr io.Writer) (rubickdConfig, error) {
	source := "--config"
	if !set {
		path, source = env.getenv(configEnv), "$"+configEnv
	}
	if !set && path == "" {
		path, source = env.configPath, ""
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			path = ""
		}
	}
	cfg, _, err := daemon.LoadConfig(path, env.environ())
	switch {
	case err == nil:
		return rubickdConfig{Config: cfg, File: path}, nil
	case source != "":
		return rubickdConfig{}, fmt.Errorf("%w: %s=%s: %w", errUsage, source, path, err)
	}
	// rubickd's own warnings (unknown RUBICK_* variables, retired keys)
	// are its to log; this one says why the settings are not the site's.
	name := path
	if name == "" {
		name = "(no file; RUBICK_* variables)"
	}
	fmt.Fprintf(stderr, "rubick: warning: rubickd's configuration %s not read, using built-in defaults: %v\n", name, err)
	return rubickdConfig{Config: daemon.Defaults()}, nil
}

// listenSource names where c's listen setting came from, for the note
// that it is empty.
func (c rubickdConfig) listenSource(env cliEnv) string {
	for _, kv := range env.environ() {
		if strings.HasPrefix(kv, listenEnv+"=") {
			return "$" + listenEnv
		}
	}
	return c.File
}

// listenURL is the URL rubickd's listen setting (HOST:PORT, validated by
// daemon.Config.Validate) is reached at from this host: a wildcard host
// (0.0.0.0, ::, none) is rubickd listening on every address, reached on
// the loopback one of its family.
func listenURL(listen string) (string, error) {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", fmt.Errorf("listen=%q: %w", listen, err)
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
		if ip != nil && ip.To4() == nil {
			host = "::1"
		}
	}
	return "http://" + net.JoinHostPort(host, port), nil
}
