package daemon

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// flags binds fencepostd's flags to a Config of their own, and remembers
// how to copy each one that was given onto the config from the file.
type flags struct {
	fs   *flag.FlagSet
	fc   Config
	copy map[string]func(dst *Config)

	// flags with no Config field of the same shape
	configFile, routes, httpPort                             string
	scrapeRecords, natsLog, auth, natsMonitoring, httpPublic bool
	releaseMemory                                            bool
}

func str(f *flags, name string, p func(*Config) *string, usage string) {
	f.fs.StringVar(p(&f.fc), name, *p(&Defaults), usage)
	f.copy[name] = func(dst *Config) { *p(dst) = *p(&f.fc) }
}

func num(f *flags, name string, p func(*Config) *int, usage string) {
	f.fs.IntVar(p(&f.fc), name, *p(&Defaults), usage)
	f.copy[name] = func(dst *Config) { *p(dst) = *p(&f.fc) }
}

func dur(f *flags, name string, p func(*Config) *Duration, usage string) {
	f.fs.DurationVar((*time.Duration)(p(&f.fc)), name, time.Duration(*p(&Defaults)), usage)
	f.copy[name] = func(dst *Config) { *p(dst) = *p(&f.fc) }
}

// Parse reads fencepostd's command line: flags, and --config FILE (JSON,
// docs/operations.md) under them; a flag given overrides the file. It
// returns the complete, validated config, flag.ErrHelp for -h (usage printed
// to out), or an error wrapping ErrConfig that names the field or flag.
func Parse(argv []string, out io.Writer) (Config, error) {
	f := newFlags(out)
	if err := f.fs.Parse(argv); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return Config{}, err
		}
		return Config{}, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if f.fs.NArg() > 0 {
		return Config{}, fmt.Errorf("%w: unexpected argument %q; fencepostd takes only flags", ErrConfig, f.fs.Arg(0))
	}
	var c Config
	if f.configFile != "" {
		var err error
		if c, err = LoadFile(f.configFile); err != nil {
			return Config{}, err
		}
	}
	if v := os.Getenv("FENCEPOST_LOG"); v != "" && c.LogLevel == "" {
		c.LogLevel = v
	}
	if err := f.apply(&c); err != nil {
		return Config{}, err
	}
	c = c.WithDefaults()
	return c, c.Validate()
}

func newFlags(out io.Writer) *flags {
	f := &flags{fs: flag.NewFlagSet("fencepostd", flag.ContinueOnError), copy: map[string]func(*Config){}}
	f.fs.SetOutput(out)
	f.fs.StringVar(&f.configFile, "config", "", "JSON config file; flags given override it")
	str(f, "nats", func(c *Config) *string { return &c.NATS }, "use this NATS deployment (URLs, comma-separated) instead of embedding a server")
	str(f, "host", func(c *Config) *string { return &c.Host }, "client listen host")
	num(f, "port", func(c *Config) *int { return &c.Port }, "client port (-1: a free one)")
	str(f, "http", func(c *Config) *string { return &c.HTTP }, "monitoring, /metrics and /healthz listen host:port, or off")
	f.fs.StringVar(&f.httpPort, "http-port", "", "monitoring port on the client host (0: off); shorthand for --http")
	f.fs.BoolVar(&f.natsMonitoring, "nats-monitoring", true, "serve nats-server's monitoring (/varz, /connz, /jsz, ...) on the HTTP endpoint; false: only /metrics and the health checks")
	f.fs.BoolVar(&f.httpPublic, "http-public", false, "with --auth, accept nats-server's monitoring on a non-loopback --http (it answers without credentials; docs/security.md)")
	str(f, "data-dir", func(c *Config) *string { return &c.DataDir }, "JetStream store directory")
	f.fs.Var(aliasOf(f, "data-dir"), "data", "same as --data-dir")
	str(f, "sync", func(c *Config) *string { return &c.Sync }, "sync policy: interval (fsync every --sync-interval) or always (fsync every write)")
	dur(f, "sync-interval", func(c *Config) *Duration { return &c.SyncInterval }, "fsync interval with --sync interval")
	str(f, "nats-config", func(c *Config) *string { return &c.NATSConfig }, "nats-server config file (TLS, authorization, accounts, limits)")
	str(f, "server-name", func(c *Config) *string { return &c.ServerName }, "server name (required in a cluster)")
	str(f, "cluster-name", func(c *Config) *string { return &c.ClusterName }, "cluster name (default fencepost with --cluster)")
	str(f, "cluster", func(c *Config) *string { return &c.Cluster }, "cluster listen host:port (empty: no cluster)")
	f.fs.StringVar(&f.routes, "routes", "", "routes to the other cluster members, comma-separated (nats-route://host:port)")
	str(f, "world", func(c *Config) *string { return &c.World }, "world made ready at start")
	num(f, "replicas", func(c *Config) *int { return &c.Replicas }, "replicas of that world when it is created (0: 3 in a cluster, else 1)")
	num(f, "partitions", func(c *Config) *int { return &c.Partitions }, "partitions of that world when it is created: each worker reads the posts of the partitions it serves (0: 64 with one replica, none with more; -1: none; up to 1024)")
	num(f, "shards", func(c *Config) *int { return &c.Shards }, "make that world sharded when it is created, of N shards (1..1024): the shard is the unit of ownership (0: a per-id world, the default; no partitions)")
	f.fs.BoolVar(&f.auth, "auth", false, "NATS users for the producer, owner and operator roles; credentials written to <data-dir>/<role>.creds (docs/security.md)")
	dur(f, "creds-ttl", func(c *Config) *Duration { return &c.CredsTTL }, "with --auth: lifetime of the user JWTs written at start (issue them again before: fencepostd creds add)")
	num(f, "auth-max-conns", func(c *Config) *int { return &c.AuthMaxConns }, "with --auth: connections of all users together (-1: no limit)")
	num(f, "auth-max-streams", func(c *Config) *int { return &c.AuthMaxStreams }, "with --auth: JetStream streams (two per world; -1: no limit)")
	num(f, "auth-max-consumers", func(c *Config) *int { return &c.AuthMaxConsumers }, "with --auth: JetStream consumers (-1: no limit)")
	num(f, "auth-max-consumers-per-user", func(c *Config) *int { return &c.AuthMaxConsumersPerUser }, "with --auth: consumers one producer or owner user may have on each of the world's streams (-1: no limit)")
	num(f, "auth-max-store", func(c *Config) *int { return &c.AuthMaxStore }, "with --auth: JetStream storage of the store account in bytes, file and memory each (default 10 GiB; the world fencepostd creates gets 7/8 for its mailboxes; -1: no limit)")
	num(f, "auth-max-payload", func(c *Config) *int { return &c.AuthMaxPayload }, "with --auth: largest message a producer or owner may publish, bytes (-1: the server's max_payload)")
	str(f, "creds", func(c *Config) *string { return &c.Creds }, "credentials file of fencepostd's own NATS connection")
	str(f, "user", func(c *Config) *string { return &c.User }, "user of fencepostd's own NATS connection")
	str(f, "password", func(c *Config) *string { return &c.Password }, "password of fencepostd's own NATS connection")
	str(f, "tlscert", func(c *Config) *string { return &c.TLSCert }, "client certificate of fencepostd's own NATS connection")
	str(f, "tlskey", func(c *Config) *string { return &c.TLSKey }, "client key of fencepostd's own NATS connection")
	str(f, "tlsca", func(c *Config) *string { return &c.TLSCA }, "CA to verify the NATS servers")
	dur(f, "scrape-interval", func(c *Config) *Duration { return &c.ScrapeInterval }, "how often the worlds are read for /metrics")
	f.fs.BoolVar(&f.scrapeRecords, "scrape-records", true, "read every ownership record for the ids-owned metrics")
	str(f, "log-level", func(c *Config) *string { return &c.LogLevel }, "log level: debug, info, warn, error (env FENCEPOST_LOG)")
	str(f, "log-format", func(c *Config) *string { return &c.LogFormat }, "log format: text or json")
	f.fs.BoolVar(&f.natsLog, "nats-log", false, "log the embedded server's own lines")
	f.fs.BoolVar(&f.releaseMemory, "release-memory", true, "return the heap memory left idle after a burst (a restart, posts, drains) to the system once quiet; false: leave it to Go's runtime (up to about twice the live heap)")
	str(f, "pprof", func(c *Config) *string { return &c.PProf }, "serve Go's profiles of this process (/debug/pprof/: heap, goroutine, profile, ...) on this loopback host:port (empty: off)")
	dur(f, "shutdown-timeout", func(c *Config) *Duration { return &c.ShutdownTimeout }, "time limit of a clean shutdown")
	f.fs.Usage = func() {
		fmt.Fprintf(out, "usage: fencepostd [--config FILE] [flags]\n\nWith no flags: embedded nats-server with JetStream on 127.0.0.1:4222, store in ./data,\nmonitoring, /metrics and /healthz on 127.0.0.1:8222, world \"default\" ready.\n\nflags:\n")
		f.fs.PrintDefaults()
		fmt.Fprintf(out, "\ncredentials of --auth (owners bound to a node, named producers, revocation): fencepostd creds add|ls|revoke (fencepostd creds --help)\n")
		fmt.Fprintf(out, "\nexit codes: 0 clean shutdown, 1 runtime error, 2 bad flag or config, 3 self-fence\n")
	}
	return f
}

// apply copies the flags that were given onto c.
func (f *flags) apply(c *Config) error {
	var err error
	f.fs.Visit(func(fl *flag.Flag) {
		if cp, ok := f.copy[fl.Name]; ok {
			cp(c)
		}
		switch fl.Name {
		case "routes":
			c.Routes = splitList(f.routes)
		case "scrape-records":
			c.ScrapeRecords = &f.scrapeRecords
		case "release-memory":
			c.ReleaseMemory = &f.releaseMemory
		case "nats-log":
			c.NATSLog = f.natsLog
		case "auth":
			c.Auth = f.auth
		case "nats-monitoring":
			c.NATSMonitoring = &f.natsMonitoring
		case "http-public":
			c.HTTPPublic = f.httpPublic
		case "http-port":
			p, perr := strconv.Atoi(f.httpPort)
			switch {
			case perr != nil || p < 0 || p > 65535:
				err = fmt.Errorf("%w: http-port: %q is not a port (0 turns the endpoint off)", ErrConfig, f.httpPort)
			case p == 0:
				c.HTTP = "off"
			default:
				c.HTTP = fmt.Sprintf("%s:%d", c.WithDefaults().Host, p)
			}
		}
	})
	return err
}

// aliasOf is a flag that sets another string flag.
func aliasOf(f *flags, name string) flag.Value {
	return &alias{f: f, name: name}
}

type alias struct {
	f    *flags
	name string
}

func (a *alias) String() string {
	if a == nil || a.f == nil {
		return ""
	}
	return a.f.fs.Lookup(a.name).Value.String()
}

func (a *alias) Set(v string) error {
	if err := a.f.fs.Set(a.name, v); err != nil {
		return err
	}
	return nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
