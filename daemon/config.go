package daemon

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/url"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/world"
)

// Sync policies (docs/operations.md "Sync policy").
const (
	SyncInterval = "interval" // fsync every sync_interval (default 1s): the default
	SyncAlways   = "always"   // fsync every write before the ack
)

// Config is fencepostd's configuration: from a JSON file (LoadFile), flags
// (Parse) or code. The zero value of a field means its default; Defaults
// lists them. Field names in errors are the JSON keys, which are also the
// flag names with '_' for '-'.
type Config struct {
	// NATS, when set, is the URL of an existing NATS deployment to use
	// instead of embedding a server (comma-separated for a cluster). The
	// embedded server's fields below then do not apply.
	NATS string `json:"nats,omitempty"`

	Host    string `json:"host,omitempty"`     // client listen host: 127.0.0.1
	Port    int    `json:"port,omitempty"`     // client port: 4222 (-1: a free one)
	HTTP    string `json:"http,omitempty"`     // monitoring, /metrics, /healthz: 127.0.0.1:8222; "off" disables
	DataDir string `json:"data_dir,omitempty"` // JetStream store: ./data

	// NATSMonitoring serves nats-server's monitoring endpoints (/varz,
	// /connz, /subsz, /jsz, ...) on the HTTP endpoint, beside /metrics and
	// the health checks (default true). They answer without credentials.
	NATSMonitoring *bool `json:"nats_monitoring,omitempty"`
	// HTTPPublic accepts, with auth, nats-server's monitoring on an address
	// other machines reach: without it such a start is refused, because
	// the endpoints would show anyone connection details (user JWTs),
	// subscriptions and streams (docs/security.md, "Monitoring").
	HTTPPublic bool `json:"http_public,omitempty"`

	Sync         string   `json:"sync,omitempty"`          // interval (default) or always
	SyncInterval Duration `json:"sync_interval,omitempty"` // with sync=interval: 1s (nats-server's own default is 2 min)

	// NATSConfig is a nats-server config file for what has no field here:
	// TLS, authorization and accounts, leaf nodes, limits. Fields set here
	// or by flags override it.
	NATSConfig string `json:"nats_config,omitempty"`

	ServerName  string   `json:"server_name,omitempty"`  // required in a cluster
	ClusterName string   `json:"cluster_name,omitempty"` // default "fencepost" when Cluster is set
	Cluster     string   `json:"cluster,omitempty"`      // cluster listen host:port; empty: no cluster
	Routes      []string `json:"routes,omitempty"`       // nats-route://host:port of the other members

	// The world made ready at start, its replicas (0: 3 in a cluster,
	// otherwise 1) and its partitions (0: world.PartitionsFor its
	// replicas, 64 on one; -1: none; docs/design/partitions.md). An existing
	// world is opened as it is.
	World      string `json:"world,omitempty"`
	Replicas   int    `json:"replicas,omitempty"`
	Partitions int    `json:"partitions,omitempty"`
	// Shards, if not 0, makes that world sharded when it is created: its
	// ids divided into Shards shards (1..1024), the shard the unit of
	// ownership (world.Config.Shards; docs/contract.md, "Sharded
	// worlds"). 0, the default, makes a per-id world. A sharded world has
	// no partitions.
	Shards int `json:"shards,omitempty"`

	// Auth runs the embedded server with one NATS user per role
	// (producer, owner, operator; docs/security.md) and writes their
	// credentials to <data_dir>/<role>.creds.
	Auth bool `json:"auth,omitempty"`

	// With auth: the lifetime of the user JWTs written at start (default
	// 90 days; issue them again before they expire: docs/security.md,
	// "Limits and lifetimes"), and the accounts' limits: connections of
	// each account (default 1000), JetStream streams (256) and consumers
	// (10000, per stream), storage in bytes (file and memory each; default
	// 10 GiB, DefaultAuthMaxStore), and the largest message a producer or
	// owner may publish (1 MiB). -1: no limit.
	CredsTTL         Duration `json:"creds_ttl,omitempty"`
	AuthMaxConns     int      `json:"auth_max_conns,omitempty"`
	AuthMaxStreams   int      `json:"auth_max_streams,omitempty"`
	AuthMaxConsumers int      `json:"auth_max_consumers,omitempty"`
	// AuthMaxConsumersPerUser: the consumers one producer or owner user
	// may have on each of the world's streams (the consumer gate; the
	// role files are one user each). Default 256; -1: no limit.
	AuthMaxConsumersPerUser int `json:"auth_max_consumers_per_user,omitempty"`
	AuthMaxStore            int `json:"auth_max_store,omitempty"`
	AuthMaxPayload          int `json:"auth_max_payload,omitempty"`

	// How fencepostd's own client connects (to --nats, or to the embedded
	// server when its config requires authentication).
	Creds    string `json:"creds,omitempty"`
	User     string `json:"user,omitempty"`
	Password string `json:"password,omitempty"`
	TLSCert  string `json:"tlscert,omitempty"`
	TLSKey   string `json:"tlskey,omitempty"`
	TLSCA    string `json:"tlsca,omitempty"`

	// ScrapeInterval is how often the worlds' state is read for /metrics
	// (default 10s); ScrapeRecords also reads every ownership record for
	// the ids-owned figures (default true; off for worlds with millions of
	// ids).
	ScrapeInterval Duration `json:"scrape_interval,omitempty"`
	ScrapeRecords  *bool    `json:"scrape_records,omitempty"`

	LogLevel  string `json:"log_level,omitempty"`  // debug, info (default), warn, error
	LogFormat string `json:"log_format,omitempty"` // text (default) or json
	NATSLog   bool   `json:"nats_log,omitempty"`   // the embedded server's own log lines

	// ShutdownTimeout bounds the clean shutdown (default 30s).
	ShutdownTimeout Duration `json:"shutdown_timeout,omitempty"`

	// PProf serves Go's profiles (net/http/pprof: heap, goroutine, CPU,
	// ...) of the fencepostd process, its embedded server included, on
	// this loopback host:port; empty (the default): not served. It is for
	// finding what holds memory or CPU; a profile shows subjects and
	// stack contents, so only a loopback address is accepted.
	PProf string `json:"pprof,omitempty"`

	// ReleaseMemory returns the heap memory Go's runtime keeps idle after
	// a burst (a restart's catch-up, a run of posts or drains) to the
	// system once fencepostd is quiet again (default true; docs/design.md
	// 3.11). false leaves it to the runtime, which keeps up to about twice
	// the live heap.
	ReleaseMemory *bool `json:"release_memory,omitempty"`
}

// Defaults are the values of fencepostd with no flags (docs/contract.md
// section 6).
var Defaults = Config{
	Host:            "127.0.0.1",
	Port:            4222,
	HTTP:            "127.0.0.1:8222",
	DataDir:         "./data",
	Sync:            SyncInterval,
	SyncInterval:    Duration(time.Second),
	World:           "default",
	ScrapeInterval:  Duration(10 * time.Second),
	LogLevel:        "info",
	LogFormat:       "text",
	ShutdownTimeout: Duration(30 * time.Second),

	CredsTTL:         Duration(DefaultCredsTTL),
	AuthMaxConns:     1000,
	AuthMaxStreams:   256,
	AuthMaxConsumers: 10_000,

	AuthMaxConsumersPerUser: DefaultMaxConsumersPerUser,
	AuthMaxStore:            DefaultAuthMaxStore,
	AuthMaxPayload:          defaultPayload,
}

// DefaultAuthMaxStore is auth_max_store's default: 10 GiB of JetStream
// storage for the store account (file and memory each), of which the
// world fencepostd creates takes seven eighths for its mailboxes.
const DefaultAuthMaxStore = 10 << 30

// ErrConfig wraps every configuration problem; main maps it to exit code 2.
var ErrConfig = errors.New("fencepostd: invalid config")

func bad(field, format string, a ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrConfig, field, fmt.Sprintf(format, a...))
}

// WithDefaults returns c with every unset field at its default.
func (c Config) WithDefaults() Config {
	d := Defaults
	set := func(v *string, def string) {
		if *v == "" {
			*v = def
		}
	}
	set(&c.Host, d.Host)
	set(&c.HTTP, d.HTTP)
	set(&c.DataDir, d.DataDir)
	set(&c.Sync, d.Sync)
	set(&c.World, d.World)
	set(&c.LogLevel, d.LogLevel)
	set(&c.LogFormat, d.LogFormat)
	if c.Sync == SyncInterval && c.SyncInterval == 0 {
		c.SyncInterval = d.SyncInterval
	}
	if c.Port == 0 {
		c.Port = d.Port
	}
	if c.ScrapeInterval == 0 {
		c.ScrapeInterval = d.ScrapeInterval
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = d.ShutdownTimeout
	}
	if c.CredsTTL == 0 {
		c.CredsTTL = d.CredsTTL
	}
	for _, f := range []struct{ v, def *int }{{&c.AuthMaxConns, &d.AuthMaxConns}, {&c.AuthMaxStreams, &d.AuthMaxStreams}, {&c.AuthMaxConsumers, &d.AuthMaxConsumers}, {&c.AuthMaxConsumersPerUser, &d.AuthMaxConsumersPerUser}, {&c.AuthMaxStore, &d.AuthMaxStore}, {&c.AuthMaxPayload, &d.AuthMaxPayload}} {
		if *f.v == 0 {
			*f.v = *f.def
		}
	}
	if c.Cluster != "" && c.ClusterName == "" {
		c.ClusterName = "fencepost"
	}
	return c
}

// Validate names the first field that is wrong and says why.
func (c Config) Validate() error {
	checks := []func() error{c.validateEmbedded, c.validateHTTP, c.validatePProf, c.validateCluster, c.validateWorld, c.validateLimits, c.validateLogs}
	for _, check := range checks {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

func (c Config) validateEmbedded() error {
	if c.NATS != "" {
		for _, u := range strings.Split(c.NATS, ",") {
			if _, err := url.Parse(strings.TrimSpace(u)); err != nil || strings.TrimSpace(u) == "" {
				return bad("nats", "%q is not a URL list like nats://host:4222,nats://host2:4222", c.NATS)
			}
		}
		switch {
		case c.Cluster != "" || len(c.Routes) > 0:
			return bad("cluster", "cluster and routes configure the embedded server; with nats set, fencepostd embeds none")
		case c.Auth:
			return bad("auth", "configures the embedded server's users; with nats set, fencepostd embeds none")
		case c.NATSConfig != "":
			return bad("nats_config", "configures the embedded server; with nats set, fencepostd embeds none")
		case c.Sync == SyncAlways:
			return bad("sync", "set the sync policy on the NATS deployment (sync_interval: always); with nats set, fencepostd embeds no server")
		}
	}
	if c.Port < -1 || c.Port > 65535 {
		return bad("port", "%d is outside 1..65535 (-1 picks a free port)", c.Port)
	}
	if net.ParseIP(c.Host) == nil && c.Host != "localhost" {
		return bad("host", "%q is not an IP address to listen on (e.g. 127.0.0.1 or 0.0.0.0)", c.Host)
	}
	if c.DataDir == "" {
		return bad("data_dir", "empty; give a directory for JetStream's files")
	}
	switch c.Sync {
	case SyncInterval, SyncAlways:
	default:
		return bad("sync", "%q is neither %q nor %q", c.Sync, SyncInterval, SyncAlways)
	}
	if c.SyncInterval < 0 || (c.Sync == SyncInterval && c.SyncInterval == 0) || (c.Sync == SyncAlways && c.SyncInterval != 0) {
		return bad("sync_interval", "%v: give a positive interval, and only with sync=interval", time.Duration(c.SyncInterval))
	}
	if c.NATSConfig != "" {
		if _, err := os.Stat(c.NATSConfig); err != nil {
			return bad("nats_config", "%v", err)
		}
	}
	return nil
}

func (c Config) validateHTTP() error {
	if c.HTTP == "off" {
		return nil
	}
	if err := checkHostPort(c.HTTP); err != nil {
		return bad("http", "%q: %v (or \"off\")", c.HTTP, err)
	}
	if c.Auth && c.natsMonitoring() && !c.HTTPPublic && !loopback(c.HTTP) {
		return bad("http", "%s is reachable from other machines, and with auth nats-server's monitoring there (/connz, /subsz, /jsz, ...) would show anyone, without credentials, every connection with its user JWT, every subscription and every stream; "+
			"listen on 127.0.0.1 (and put an authenticating proxy in front), or give --nats-monitoring=false to serve only /metrics and the health checks there, or --http-public to accept it (docs/security.md)", c.HTTP)
	}
	return nil
}

func (c Config) validatePProf() error {
	if c.PProf == "" {
		return nil
	}
	if err := checkHostPort(c.PProf); err != nil {
		return bad("pprof", "%q: %v", c.PProf, err)
	}
	if !loopback(c.PProf) {
		return bad("pprof", "%q is reachable from other machines; Go's profiles show subjects and memory contents: give a loopback address such as 127.0.0.1:6060", c.PProf)
	}
	return nil
}

// loopback says whether hostport listens on a loopback address only: not
// on every interface ("", 0.0.0.0, ::) nor on another address.
func loopback(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// natsMonitoring says whether the HTTP endpoint serves nats-server's
// monitoring (only an embedded server has it).
func (c Config) natsMonitoring() bool {
	return c.NATS == "" && (c.NATSMonitoring == nil || *c.NATSMonitoring)
}

func checkHostPort(hp string) error {
	host, port, err := net.SplitHostPort(hp)
	if err != nil {
		return fmt.Errorf("want host:port")
	}
	if host != "" && host != "localhost" && net.ParseIP(host) == nil {
		return fmt.Errorf("host %q is not an IP address", host)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		return fmt.Errorf("port %q is outside 0..65535", port)
	}
	return nil
}

func (c Config) validateCluster() error {
	if c.Cluster == "" {
		if len(c.Routes) > 0 {
			return bad("routes", "given without cluster (the cluster listen host:port)")
		}
		return nil
	}
	if err := checkHostPort(c.Cluster); err != nil {
		return bad("cluster", "%q: %v", c.Cluster, err)
	}
	if c.ServerName == "" {
		return bad("server_name", "required in a cluster: each member needs its own (e.g. fp-1)")
	}
	for _, r := range c.Routes {
		u, err := url.Parse(r)
		if err != nil || u.Host == "" || (u.Scheme != "nats" && u.Scheme != "nats-route" && u.Scheme != "tls") {
			return bad("routes", "%q is not a route URL like nats-route://127.0.0.1:6222", r)
		}
	}
	return nil
}

func (c Config) validateWorld() error {
	if err := wire.ValidateWorld(c.World); err != nil {
		return bad("world", "%v", err)
	}
	if c.Replicas != 0 && c.Replicas != 1 && c.Replicas != 3 && c.Replicas != 5 {
		return bad("replicas", "%d is not 1, 3 or 5", c.Replicas)
	}
	if c.Partitions < -1 || c.Partitions > wire.MaxPartitions {
		return bad("partitions", "%d is outside -1 (none), 0 (the default) and 1..%d", c.Partitions, wire.MaxPartitions)
	}
	switch {
	case c.Shards < 0 || c.Shards > wire.MaxShards:
		return bad("shards", "%d is outside 0 (a per-id world, the default) and 1..%d", c.Shards, wire.MaxShards)
	case c.Shards > 0 && c.Partitions > 0:
		return bad("shards", "a sharded world stores each post under its shard and has no partitions: give shards or partitions, not both")
	}
	if c.ScrapeInterval < Duration(100*time.Millisecond) {
		return bad("scrape_interval", "%v is below 100ms", time.Duration(c.ScrapeInterval))
	}
	if c.ShutdownTimeout <= 0 {
		return bad("shutdown_timeout", "%v must be positive", time.Duration(c.ShutdownTimeout))
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return bad("tlscert", "tlscert and tlskey go together")
	}
	return nil
}

func (c Config) validateLimits() error {
	if c.CredsTTL < Duration(time.Second) {
		return bad("creds_ttl", "%v is below 1s (JWT expiry is in seconds)", time.Duration(c.CredsTTL))
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"auth_max_conns", c.AuthMaxConns}, {"auth_max_streams", c.AuthMaxStreams}, {"auth_max_consumers", c.AuthMaxConsumers}, {"auth_max_consumers_per_user", c.AuthMaxConsumersPerUser}, {"auth_max_store", c.AuthMaxStore}, {"auth_max_payload", c.AuthMaxPayload}} {
		if f.v < -1 {
			return bad(f.name, "%d: give a positive limit, or -1 for none", f.v)
		}
	}
	return nil
}

// limits are the limits of the JWTs fencepostd --auth issues.
func (c Config) limits() Limits {
	return Limits{Conns: int64(c.AuthMaxConns), Streams: int64(c.AuthMaxStreams), Consumers: int64(c.AuthMaxConsumers),
		Store: int64(c.AuthMaxStore), Memory: int64(c.AuthMaxStore), Payload: int64(c.AuthMaxPayload), TTL: time.Duration(c.CredsTTL)}
}

func (c Config) validateLogs() error {
	var l slog.Level
	if err := l.UnmarshalText([]byte(c.LogLevel)); err != nil {
		return bad("log_level", "%q: use debug, info, warn or error", c.LogLevel)
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		return bad("log_format", "%q is neither text nor json", c.LogFormat)
	}
	return nil
}

// replicas is the default world's replica count.
func (c Config) replicas() int {
	switch {
	case c.Replicas != 0:
		return c.Replicas
	case c.NATS == "" && c.Cluster != "":
		return 3
	}
	return 1
}

// partitions is the default world's partitions when it is created.
func (c Config) partitions() int {
	if c.Shards > 0 {
		return 0 // a sharded world has none
	}
	switch c.Partitions {
	case 0:
		return world.PartitionsFor(c.replicas())
	case -1:
		return 0
	}
	return c.Partitions
}

// releaseMemory says whether idle heap memory is returned after a burst.
func (c Config) releaseMemory() bool { return c.ReleaseMemory == nil || *c.ReleaseMemory }

// scrapeRecords says whether the scrape reads every record.
func (c Config) scrapeRecords() bool { return c.ScrapeRecords == nil || *c.ScrapeRecords }

// LoadFile reads a JSON config file. Unknown keys and values of the wrong
// type are errors that name the key.
func LoadFile(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("%w: config file: %v", ErrConfig, err)
	}
	return decode(path, b)
}

func decode(path string, b []byte) (Config, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			line := 1 + bytes.Count(b[:min(int(se.Offset), len(b))], []byte("\n"))
			return Config{}, fmt.Errorf("%w: config file %s: line %d: %v", ErrConfig, path, line, se)
		}
		return Config{}, fmt.Errorf("%w: config file %s: want one JSON object of settings: %v", ErrConfig, path, err)
	}
	keys := slices.Sorted(maps.Keys(raw))
	known := configKeys()
	var c Config
	for _, k := range keys {
		if !known[k] {
			return Config{}, fmt.Errorf("%w: config file %s: %s: unknown field; the fields are %s", ErrConfig, path, k, strings.Join(slices.Sorted(maps.Keys(known)), ", "))
		}
		one, _ := json.Marshal(map[string]json.RawMessage{k: raw[k]})
		if err := json.Unmarshal(one, &c); err != nil {
			return Config{}, fmt.Errorf("%w: config file %s: %s: %s", ErrConfig, path, k, jsonProblem(err))
		}
	}
	return c, nil
}

// configKeys are the JSON keys of Config.
func configKeys() map[string]bool {
	keys := map[string]bool{}
	t := reflect.TypeFor[Config]()
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		keys[name] = true
	}
	return keys
}

// jsonProblem says what is wrong with one value.
func jsonProblem(err error) string {
	var te *json.UnmarshalTypeError
	var de *durationError
	switch {
	case errors.As(err, &de):
		return de.Error()
	case errors.As(err, &te):
		return fmt.Sprintf("want %s, got a JSON %s", jsonKind(te.Type.String()), te.Value)
	}
	return err.Error()
}

func jsonKind(goType string) string {
	switch goType {
	case "int", "int64", "uint64":
		return "a number"
	case "[]string":
		return "a list of strings"
	case "bool", "*bool":
		return "true or false"
	}
	return "a " + goType
}

// Duration is a time.Duration written as a string ("10s") in JSON.
type Duration time.Duration

type durationError struct {
	value string
	err   error
}

func (e *durationError) Error() string {
	return fmt.Sprintf("%s is %v; write a duration like \"10s\" or \"1m30s\"", e.value, e.err)
}

// UnmarshalJSON reads "10s" (or a number of nanoseconds).
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		var n int64
		if err := json.Unmarshal(b, &n); err != nil {
			return &durationError{string(b), errors.New("not a string")}
		}
		*d = Duration(n)
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return &durationError{string(b), errors.New("not a duration")}
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// NewLogger makes the daemon's logger from the config's level and format.
func NewLogger(c Config, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.LogLevel))
	opts := &slog.HandlerOptions{Level: level}
	if c.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
