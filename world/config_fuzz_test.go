package world

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// jsonKeys are the JSON names of Config's fields: every validation error
// names one of them.
var jsonKeys = []string{"min_ttl", "max_ttl", "default_ttl", "max_body", "max_headers", "max_msg_size", "max_msgs_per_mailbox", "max_bytes", "max_bytes_per_mailbox", "max_deliveries", "dedupe_window", "replicas", "storage"}

// namesField reports whether err's message is "world: invalid config: <key>: ...".
func namesField(err error) bool {
	for _, k := range jsonKeys {
		if strings.Contains(err.Error(), ErrInvalidConfig.Error()+": "+k+": ") {
			return true
		}
	}
	return false
}

// FuzzDecodeConfigMeta: the world config stored in the bucket stream's
// metadata. Whatever decodes has its defaults filled and passes
// Validate; it encodes and decodes to the same config; every refusal
// wraps ErrInvalidConfig and names the world, and a refusal by Validate
// names the field.
func FuzzDecodeConfigMeta(f *testing.F) {
	def, _ := encodeMeta(Defaults)
	f.Add(configV, def[metaConfig], true)
	f.Add(configV, `{}`, true)
	f.Add(configV, `{"min_ttl":1000000,"max_ttl":2000000,"replicas":3,"storage":"memory"}`, true)
	f.Add(configV, `{"min_ttl":-1}`, true)
	f.Add(configV, `{"replicas":2}`, true)
	f.Add(configV, `{"storage":"tape"}`, true)
	f.Add(configV, `{"max_msg_size":9000000}`, true)
	f.Add(configV, `{"max_msg_size":1048576,"max_msgs_per_mailbox":100000,"max_bytes_per_mailbox":104857600000}`, true) // a world from before max_body
	f.Add(configV, `{"max_body":100,"max_bytes":1000}`, true)
	f.Add(configV, `{"max_body":100,"max_headers":10,"max_msg_size":111}`, true)
	f.Add(configV, `{"max_body":100,"max_bytes":99}`, true)
	f.Add("2", `{}`, true)
	f.Add(configV, `not json`, true)
	f.Add(configV, `null`, false)
	f.Fuzz(func(t *testing.T, v, cfg string, versioned bool) {
		meta := map[string]string{metaConfig: cfg}
		if versioned {
			meta[metaVersion] = v
		}
		c, err := decodeMeta("w1", meta)
		if err != nil {
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("decodeMeta(%q, %q): %v does not wrap ErrInvalidConfig", v, cfg, err)
			}
			if !strings.Contains(err.Error(), `"w1"`) {
				t.Fatalf("decodeMeta: %v does not name the world", err)
			}
			if vErr := validateOf(cfg); versioned && v == configV && vErr != nil && !namesField(err) {
				t.Fatalf("decodeMeta(%q): %v does not name the field", cfg, err)
			}
			return
		}
		if !versioned || v != configV {
			t.Fatalf("decodeMeta accepted config version %q (present %v)", v, versioned)
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("decoded config %+v does not validate: %v", c, err)
		}
		if c.WithDefaults() != c {
			t.Fatalf("decoded config %+v has unset fields", c)
		}
		meta2, err := encodeMeta(c)
		if err != nil {
			t.Fatalf("encodeMeta(%+v): %v", c, err)
		}
		c2, err := decodeMeta("w1", meta2)
		if err != nil || c2 != c {
			t.Fatalf("encode then decode changed %+v into %+v (%v)", c, c2, err)
		}
	})
}

// validateOf is the Validate error of cfg's JSON with defaults, or nil if
// cfg is not a JSON config at all.
func validateOf(cfg string) error {
	meta := map[string]string{metaVersion: configV, metaConfig: cfg}
	_, err := decodeMeta("", meta)
	if err == nil || strings.Contains(err.Error(), "not valid JSON") {
		return nil
	}
	return err
}

// FuzzConfigValidate: a config of any field values. WithDefaults is
// idempotent and fills every zero field; Validate either accepts (and
// then the bounds hold and TTL resolves every request to a ttl within
// them or refuses it with ErrInvalidTTL) or names the field.
func FuzzConfigValidate(f *testing.F) {
	d := Defaults
	f.Add(int64(d.MinTTL), int64(d.MaxTTL), int64(d.DefaultTTL), d.MaxMsgSize, d.MaxMsgsPerMailbox, d.MaxBytesPerMailbox, d.MaxDeliveries, int64(d.DedupeWindow), d.Replicas, string(d.Storage), int64(5*time.Second))
	f.Add(int64(0), int64(0), int64(0), int32(0), int64(0), int64(0), 0, int64(0), 0, "", int64(0))
	f.Add(int64(time.Millisecond), int64(time.Millisecond), int64(0), int32(1), int64(1), int64(1), 1, int64(time.Millisecond), 5, "memory", int64(-1))
	f.Add(int64(2*time.Hour), int64(0), int64(0), int32(0), int64(0), int64(0), 0, int64(0), 0, "", int64(time.Hour))
	f.Add(int64(-1), int64(-1), int64(-1), int32(-1), int64(-1), int64(-1), -1, int64(-1), -1, "file", int64(1))
	f.Fuzz(func(t *testing.T, minTTL, maxTTL, defTTL int64, msgSize int32, msgs, bytes int64, deliveries int, dedupe int64, replicas int, storage string, ttl int64) {
		c := Config{
			MinTTL: time.Duration(minTTL), MaxTTL: time.Duration(maxTTL), DefaultTTL: time.Duration(defTTL),
			MaxMsgSize: msgSize, MaxMsgsPerMailbox: msgs, MaxBytesPerMailbox: bytes, MaxDeliveries: deliveries,
			DedupeWindow: time.Duration(dedupe), Replicas: replicas, Storage: Storage(storage),
		}
		w := c.WithDefaults()
		if w.WithDefaults() != w {
			t.Fatalf("WithDefaults is not idempotent on %+v", c)
		}
		if w.MinTTL == 0 || w.MaxTTL == 0 || w.DefaultTTL == 0 || w.MaxMsgSize == 0 || w.MaxMsgsPerMailbox == 0 ||
			w.MaxDeliveries == 0 || w.DedupeWindow == 0 || w.Replicas == 0 || w.Storage == "" {
			t.Fatalf("WithDefaults left a zero field: %+v", w)
		}
		err := w.Validate()
		if err != nil {
			if !errors.Is(err, ErrInvalidConfig) || !namesField(err) {
				t.Fatalf("Validate(%+v) = %v: want ErrInvalidConfig naming the field", w, err)
			}
			return
		}
		if !(floorTTL <= w.MinTTL && w.MinTTL <= w.DefaultTTL && w.DefaultTTL <= w.MaxTTL && w.MaxTTL <= ceilingTTL) {
			t.Fatalf("Validate accepted ttl bounds %v <= %v <= %v", w.MinTTL, w.DefaultTTL, w.MaxTTL)
		}
		checkSizes(t, w)
		got, err := w.TTL(time.Duration(ttl))
		switch {
		case err != nil:
			if !errors.Is(err, ErrInvalidTTL) || ttl == 0 || (time.Duration(ttl) >= w.MinTTL && time.Duration(ttl) <= w.MaxTTL) {
				t.Fatalf("TTL(%v) with bounds %v..%v: %v", time.Duration(ttl), w.MinTTL, w.MaxTTL, err)
			}
			if !strings.Contains(err.Error(), w.MinTTL.String()) || !strings.Contains(err.Error(), w.MaxTTL.String()) {
				t.Fatalf("TTL refusal %q does not name the bounds", err)
			}
		case ttl == 0 && got != w.DefaultTTL:
			t.Fatalf("TTL(0) = %v, want the default %v", got, w.DefaultTTL)
		case ttl != 0 && got != time.Duration(ttl):
			t.Fatalf("TTL(%v) = %v", time.Duration(ttl), got)
		case got < w.MinTTL || got > w.MaxTTL:
			t.Fatalf("TTL(%v) = %v outside %v..%v", time.Duration(ttl), got, w.MinTTL, w.MaxTTL)
		}
	})
}

// checkSizes fails unless the size limits of a valid config hold: a body
// of 1..cap, headers of 0..cap, max_msg_size exactly their sum within the
// cap, a byte limit that holds the largest body, a legacy per-mailbox
// byte limit that holds the largest message, and a per-mailbox count of
// at least 1.
func checkSizes(t *testing.T, w Config) {
	t.Helper()
	if w.MaxBody < 1 || w.MaxHeaders < 0 || int64(w.MaxMsgSize) != int64(w.MaxBody)+int64(w.MaxHeaders) || w.MaxMsgSize > maxMsgSizeCap ||
		w.MaxBytes < 0 || (w.MaxBytes > 0 && w.MaxBytes < int64(w.MaxBody)) ||
		w.MaxBytesPerMailbox < 0 || (w.MaxBytesPerMailbox > 0 && w.MaxBytesPerMailbox < int64(w.MaxMsgSize)) ||
		w.MailboxMsgs() < 1 || w.MailboxMsgs() > w.MaxMsgsPerMailbox {
		t.Fatalf("Validate accepted sizes %+v", w)
	}
}

// FuzzConfigSizes: any mix of the size limits. Any two of max_body,
// max_headers and max_msg_size give the third, max_msg_size alone keeps
// the legacy split (1 KiB, at most half, for headers), and WithDefaults
// is idempotent; Validate accepts only limits that hold (checkSizes) or
// names the field.
func FuzzConfigSizes(f *testing.F) {
	f.Add(int32(0), int32(0), int32(0), int64(0), int64(0))
	f.Add(int32(10), int32(0), int32(0), int64(0), int64(0))
	f.Add(int32(100), int32(0), int32(0), int64(1000), int64(0))
	f.Add(int32(0), int32(0), int32(1<<20), int64(0), int64(100_000<<20))
	f.Add(int32(0), int32(0), int32(10), int64(0), int64(0))
	f.Add(int32(100), int32(10), int32(111), int64(0), int64(0))
	f.Add(int32(1<<23), int32(1), int32(0), int64(0), int64(0))
	f.Fuzz(func(t *testing.T, body, headers, msg int32, maxBytes, perMailbox int64) {
		c := Config{MaxBody: body, MaxHeaders: headers, MaxMsgSize: msg, MaxBytes: maxBytes, MaxBytesPerMailbox: perMailbox}
		w := c.WithDefaults()
		if w.WithDefaults() != w {
			t.Fatalf("WithDefaults is not idempotent on %+v", c)
		}
		switch {
		case body == 0 && headers == 0 && msg == 0:
			if w.MaxBody != Defaults.MaxBody || w.MaxHeaders != Defaults.MaxHeaders || w.MaxMsgSize != Defaults.MaxMsgSize {
				t.Fatalf("no sizes gave %+v, want the defaults", w)
			}
		case body == 0 && headers == 0:
			if w.MaxMsgSize != msg || w.MaxHeaders != min(LegacyHeaderRoom, msg/2) {
				t.Fatalf("max_msg_size %d alone gave %+v, want the legacy split", msg, w)
			}
		case body != 0 && w.MaxBody != body, headers != 0 && w.MaxHeaders != headers, msg != 0 && w.MaxMsgSize != msg:
			t.Fatalf("WithDefaults changed a size given: %+v into %+v", c, w)
		}
		if err := w.Validate(); err != nil {
			if !errors.Is(err, ErrInvalidConfig) || !namesField(err) {
				t.Fatalf("Validate(%+v) = %v: want ErrInvalidConfig naming the field", w, err)
			}
			return
		}
		checkSizes(t, w)
	})
}
