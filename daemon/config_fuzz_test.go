package daemon

import (
	"encoding/json"
	"errors"
	"flag"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"
)

// namesKey reports whether err is "fencepostd: invalid config: <key>: ..."
// for a JSON key of Config, or one of the flags that have no key.
func namesKey(err error) bool {
	keys := configKeys()
	keys["http-port"] = true
	for k := range keys {
		if strings.HasPrefix(err.Error(), ErrConfig.Error()+": "+k+": ") {
			return true
		}
	}
	return false
}

// FuzzDecodeConfig: fencepostd's JSON config file. A refusal wraps
// ErrConfig and names the file; an accepted file names only known keys,
// and its config written back as JSON decodes to the same config; the
// config with defaults either validates (and WithDefaults is then
// idempotent) or is refused with an error naming the key.
func FuzzDecodeConfig(f *testing.F) {
	f.Add([]byte(`{"port": 5222, "data_dir": "/var/lib/fp", "sync": "always", "routes": ["nats-route://127.0.0.1:6223"], "cluster": "127.0.0.1:6222", "server_name": "fp-1", "scrape_interval": "30s"}`))
	f.Add([]byte(`{"nats": "nats://a:4222,nats://b:4222", "world": "w1", "replicas": 3, "scrape_records": false, "tlscert": "c.pem", "tlskey": "k.pem", "tlsca": "ca.pem"}`))
	f.Add([]byte(`{"sync_interval": 1000000, "shutdown_timeout": "-1s", "log_level": "DEBUG", "log_format": "json", "http": "off", "auth": true}`))
	f.Add([]byte(`{"port": "many"}`))
	f.Add([]byte(`{"bogus": 1}`))
	f.Add([]byte("{\n\"port\": 1,\n}"))
	f.Add([]byte(`[]`))
	f.Add([]byte(`{"sync_interval": "soon"}`))
	f.Add([]byte(`{"routes": "nats-route://a:1"}`))
	f.Add([]byte(`{"port": 1}{"port": 2}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := decode("fp.json", data)
		if err != nil {
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "config file fp.json") {
				t.Fatalf("decode(%q) = %v: want ErrConfig naming the file", data, err)
			}
			return
		}
		var raw map[string]json.RawMessage
		if json.Unmarshal(data, &raw) != nil {
			t.Fatalf("decode accepted %q, which is not one JSON object", data)
		}
		known := configKeys()
		for k := range raw {
			if !known[k] {
				t.Fatalf("decode accepted unknown key %q", k)
			}
		}
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatalf("marshal %+v: %v", c, err)
		}
		again, err := decode("fp.json", b)
		if err != nil {
			t.Fatalf("decode of its own output %s: %v", b, err)
		}
		if len(c.Routes) == 0 {
			c.Routes = nil // omitempty writes [] as nothing
		}
		if !reflect.DeepEqual(c, again) {
			t.Fatalf("round trip changed %+v into %+v (via %s)", c, again, b)
		}
		checkValidate(t, c)
	})
}

// checkValidate: Validate of c with defaults accepts or names the key.
func checkValidate(t *testing.T, c Config) {
	t.Helper()
	w := c.WithDefaults()
	if !reflect.DeepEqual(w.WithDefaults(), w) {
		t.Fatalf("WithDefaults is not idempotent on %+v", c)
	}
	if err := w.Validate(); err != nil {
		if !errors.Is(err, ErrConfig) || !namesKey(err) {
			t.Fatalf("Validate(%+v) = %q: want ErrConfig naming the key", w, err)
		}
		return
	}
	if w.Port < -1 || w.Port > 65535 || w.Port == 0 || w.DataDir == "" || w.ShutdownTimeout <= 0 || w.ScrapeInterval < Duration(100*time.Millisecond) {
		t.Fatalf("Validate accepted %+v", w)
	}
	if (w.TLSCert == "") != (w.TLSKey == "") || (w.Cluster != "" && w.ServerName == "") || (w.Cluster == "" && len(w.Routes) > 0) {
		t.Fatalf("Validate accepted %+v", w)
	}
}

// FuzzConfigDuration: a duration in the config file is a string like
// "10s" or a number of nanoseconds; what reads writes back as a string
// that reads as the same duration, and a refusal quotes the value.
func FuzzConfigDuration(f *testing.F) {
	for _, s := range []string{`"10s"`, `"1m30s"`, `1000`, `-5`, `"-1.5h"`, `"soon"`, `true`, `null`, `"9223372036854775807ns"`, `1e3`, `"1"`, `{}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var d Duration
		if err := d.UnmarshalJSON(data); err != nil {
			var de *durationError
			if !errors.As(err, &de) || !strings.Contains(err.Error(), string(data)) || !strings.Contains(err.Error(), "duration like") {
				t.Fatalf("UnmarshalJSON(%q) = %v: want a durationError quoting the value", data, err)
			}
			return
		}
		b, err := d.MarshalJSON()
		if err != nil {
			t.Fatalf("MarshalJSON(%v): %v", time.Duration(d), err)
		}
		var back Duration
		if err := back.UnmarshalJSON(b); err != nil || back != d {
			t.Fatalf("%q read as %v, written as %s, read back as %v (%v)", data, time.Duration(d), b, time.Duration(back), err)
		}
		var s string
		if json.Unmarshal(b, &s) != nil {
			t.Fatalf("MarshalJSON wrote %s, not a JSON string", b)
		}
	})
}

// FuzzParseFlags: fencepostd's command line. Parse returns flag.ErrHelp,
// an error wrapping ErrConfig, or a config that validates; it never
// panics.
func FuzzParseFlags(f *testing.F) {
	f.Add("--port", "6000", "--data", "/tmp/x")
	f.Add("--http-port", "0", "--routes", "nats-route://a:1, nats-route://b:2")
	f.Add("--cluster", ":6222", "--server-name", "x")
	f.Add("--sync", "always", "--sync-interval", "5s")
	f.Add("--scrape-records=false", "--auth", "--nats", "nats://h:4222")
	f.Add("-h", "", "", "")
	f.Add("serve", "", "", "")
	f.Add("--config", "/no/such/file", "--world", "a.b")
	f.Fuzz(func(t *testing.T, a, b, c, d string) {
		for _, arg := range []string{a, b, c, d} {
			if strings.HasPrefix(strings.TrimLeft(arg, "-"), "config") {
				return // reading arbitrary files is FuzzDecodeConfig's business
			}
		}
		cfg, err := Parse([]string{a, b, c, d}, io.Discard)
		if err != nil {
			if !errors.Is(err, flag.ErrHelp) && !errors.Is(err, ErrConfig) {
				t.Fatalf("Parse(%q) = %v: want ErrConfig or ErrHelp", []string{a, b, c, d}, err)
			}
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("Parse(%q) returned a config that does not validate: %v", []string{a, b, c, d}, err)
		}
		if !reflect.DeepEqual(cfg.WithDefaults(), cfg) {
			t.Fatalf("Parse(%q) returned a config without its defaults", []string{a, b, c, d})
		}
	})
}
