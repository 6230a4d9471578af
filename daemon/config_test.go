package daemon_test

import (
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/daemon"
)

func TestParse_NoFlagsIsTheSpecDefault(t *testing.T) {
	t.Setenv("FENCEPOST_LOG", "")
	c, err := daemon.Parse(nil, io.Discard)
	require.NoError(t, err)
	require.Equal(t, "", c.NATS, "embedded")
	require.Equal(t, "127.0.0.1", c.Host)
	require.Equal(t, 4222, c.Port)
	require.Equal(t, "127.0.0.1:8222", c.HTTP)
	require.Equal(t, "./data", c.DataDir)
	require.Equal(t, "default", c.World)
	require.Equal(t, daemon.SyncInterval, c.Sync)
	require.Equal(t, daemon.Duration(time.Second), c.SyncInterval)
}

func TestParse_FlagsOverrideTheFile(t *testing.T) {
	path := writeFile(t, `{"port": 5222, "data_dir": "/var/lib/fp", "sync": "always", "routes": ["nats-route://127.0.0.1:6223"],
		"cluster": "127.0.0.1:6222", "server_name": "fp-1", "scrape_interval": "30s"}`)
	c, err := daemon.Parse([]string{"--config", path, "--port", "6000", "--data", "/tmp/x"}, io.Discard)
	require.NoError(t, err)
	require.Equal(t, 6000, c.Port)
	require.Equal(t, "/tmp/x", c.DataDir)
	require.Equal(t, daemon.SyncAlways, c.Sync)
	require.Equal(t, daemon.Duration(0), c.SyncInterval)
	require.Equal(t, []string{"nats-route://127.0.0.1:6223"}, c.Routes)
	require.Equal(t, "fencepost", c.ClusterName)
	require.Equal(t, daemon.Duration(30*time.Second), c.ScrapeInterval)

	c, err = daemon.Parse([]string{"--http-port", "0", "--routes", "nats-route://a:1, nats-route://b:2", "--cluster", ":6222", "--server-name", "x"}, io.Discard)
	require.NoError(t, err)
	require.Equal(t, "off", c.HTTP)
	require.Equal(t, []string{"nats-route://a:1", "nats-route://b:2"}, c.Routes)

	_, err = daemon.Parse([]string{"-h"}, io.Discard)
	require.ErrorIs(t, err, flag.ErrHelp)
}

// TestParse_BadConfigNamesTheField: every wrong flag or file value is
// refused with an error that names the field and says what is wrong.
func TestParse_BadConfigNamesTheField(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		file string
		want []string
	}{
		{"unknown flag", []string{"--bogus"}, "", []string{"bogus", "not defined"}},
		{"flag type", []string{"--port", "many"}, "", []string{"-port", "invalid value"}},
		{"port range", []string{"--port", "70000"}, "", []string{"port:", "outside 1..65535"}},
		{"host", []string{"--host", "my host"}, "", []string{"host:", "not an IP"}},
		{"sync", []string{"--sync", "sometimes"}, "", []string{"sync:", `"sometimes" is neither`}},
		{"sync interval with always", []string{"--sync", "always", "--sync-interval", "5s"}, "", []string{"sync_interval:", "only with sync=interval"}},
		{"http", []string{"--http", "8222"}, "", []string{"http:", "host:port"}},
		{"http-port", []string{"--http-port", "x"}, "", []string{"http-port:", "not a port"}},
		{"pprof not loopback", []string{"--pprof", "0.0.0.0:6060"}, "", []string{"pprof:", "reachable from other machines"}},
		{"pprof every interface", []string{"--pprof", ":6060"}, "", []string{"pprof:", "loopback"}},
		{"pprof", []string{"--pprof", "6060"}, "", []string{"pprof:", "host:port"}},
		{"routes without cluster", []string{"--routes", "nats-route://127.0.0.1:6222"}, "", []string{"routes:", "without cluster"}},
		{"cluster without name", []string{"--cluster", "127.0.0.1:6222"}, "", []string{"server_name:", "required in a cluster"}},
		{"bad route", []string{"--cluster", "127.0.0.1:6222", "--server-name", "a", "--routes", "http://x:1"}, "", []string{"routes:", "not a route URL"}},
		{"nats and cluster", []string{"--nats", "nats://h:4222", "--cluster", "127.0.0.1:6222"}, "", []string{"cluster:", "embeds none"}},
		{"nats and sync", []string{"--nats", "nats://h:4222", "--sync", "always"}, "", []string{"sync:", "NATS deployment"}},
		{"world", []string{"--world", "a.b"}, "", []string{"world:", "invalid world name"}},
		{"replicas", []string{"--replicas", "2"}, "", []string{"replicas:", "not 1, 3 or 5"}},
		{"log level", []string{"--log-level", "loud"}, "", []string{"log_level:", "debug, info"}},
		{"nats config missing", []string{"--nats-config", "/no/such/file.conf"}, "", []string{"nats_config:", "no such file"}},
		{"argument", []string{"serve"}, "", []string{`unexpected argument "serve"`}},
		{"file missing", []string{"--config", "/no/such/fencepostd.json"}, "", []string{"config file", "no such file"}},
		{"file syntax", nil, "{\n  \"port\": 4222,\n  \"host\" \"x\"\n}", []string{"line 3", "invalid character"}},
		{"file unknown key", nil, `{"prot": 4222}`, []string{"prot: unknown field", "port"}},
		{"file wrong type", nil, `{"port": "4222"}`, []string{"port: want a number, got a JSON string"}},
		{"file bad duration", nil, `{"sync_interval": "soon"}`, []string{"sync_interval:", `"soon" is not a duration`}},
		{"file list", nil, `{"routes": "nats-route://a:1"}`, []string{"routes: want a list of strings"}},
		{"file value", nil, `{"sync": "never"}`, []string{"sync:", `"never" is neither`}},
		{"file not an object", nil, `[1]`, []string{"want one JSON object"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if tc.file != "" {
				args = append([]string{"--config", writeFile(t, tc.file)}, args...)
			}
			_, err := daemon.Parse(args, io.Discard)
			require.Error(t, err)
			require.True(t, errors.Is(err, daemon.ErrConfig), "%v wraps ErrConfig", err)
			for _, w := range tc.want {
				require.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestParse_BadNATSConfigFileNamesTheLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nats.conf")
	require.NoError(t, os.WriteFile(path, []byte("port: 4222\njetstream {\n  max_mem: lots\n}\n"), 0o600))
	c, err := daemon.Parse([]string{"--nats-config", path, "--port", "-1", "--data", t.TempDir(), "--http", "off"}, io.Discard)
	require.NoError(t, err, "the nats-server file is read at start")
	_, err = daemon.Start(c)
	require.Error(t, err)
	require.Contains(t, err.Error(), "nats.conf:3")
	require.Contains(t, err.Error(), "max_mem")
}

func writeFile(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fencepostd.json")
	require.NoError(t, os.WriteFile(path, []byte(body), 0o600))
	return path
}
