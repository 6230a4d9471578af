package verify

import (
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/fencepost/fencepost/internal/wire"
)

// Fault kinds Run can inject.
const (
	FaultKill  = "kill"  // SIGKILL of an owner process holding ids
	FaultStop  = "stop"  // SIGSTOP of an owner past its ttl, then SIGCONT
	FaultSeize = "seize" // a forced seize of a held id by an operator node, then its release
	FaultCut   = "cut"   // every connection of the clients under test cut at the local proxy
)

// Faults are every fault kind, in the order Run cycles through them.
var Faults = []string{FaultKill, FaultStop, FaultSeize, FaultCut}

// Bounds of the configuration.
const (
	MinDuration = 5 * time.Second
	MaxDuration = 24 * time.Hour
	MaxIDs      = 1000
	MinOwners   = 2
	MaxOwners   = 16
	MinTTL      = 500 * time.Millisecond
	MaxTTL      = time.Minute
)

// ErrInvalidConfig is wrapped by Config.Validate's errors.
var ErrInvalidConfig = errors.New("verify: invalid configuration")

// Config is one verify run. Zero fields take the defaults documented on
// each.
type Config struct {
	Conn     Conn          // how to reach the deployment (required: Conn.URL)
	Duration time.Duration // producing and fault time; default 60 s, bounds MinDuration..MaxDuration
	IDs      int           // mailboxes; default 8, at most MaxIDs
	Faults   []string      // kinds to inject; nil: all of Faults; empty non-nil: none
	Replicas int           // 0: 3 if the deployment takes an R3 world, else 1; or 1, 3, 5
	Shards   int           // 0: a per-id world; else a sharded one of that many shards, 1 to wire.MaxShards
	Owners   int           // owner processes; default 3
	TTL      time.Duration // the owners' lease; default 2 s
	// Final bounds the final full drain; default 60 s.
	Final time.Duration
	// Start bounds the wait for the owners' first delivery; default 60 s.
	Start time.Duration
	// OwnerCommand makes the command of one owner process: a process that
	// runs OwnerMain with its stdin and stdout (required).
	OwnerCommand func() *exec.Cmd
	// World names the scratch world; "" (the default): verify-<random>.
	// Run refuses a world that exists.
	World string
	Log   *slog.Logger // default: discard
	// Progress, when set, is told what the run is doing (one line each).
	Progress func(format string, args ...any)
}

// withDefaults returns c with its defaults.
func (c Config) withDefaults() Config {
	if c.Duration == 0 {
		c.Duration = 60 * time.Second
	}
	if c.IDs == 0 {
		c.IDs = 8
	}
	if c.Faults == nil {
		c.Faults = slices.Clone(Faults)
	}
	if c.Owners == 0 {
		c.Owners = 3
	}
	if c.TTL == 0 {
		c.TTL = 2 * time.Second
	}
	if c.Final == 0 {
		c.Final = 60 * time.Second
	}
	if c.Start == 0 {
		c.Start = 60 * time.Second
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.Progress == nil {
		c.Progress = func(string, ...any) {}
	}
	return c
}

// Validate checks c (with its defaults) and says what is wrong, wrapping
// ErrInvalidConfig. Run validates before it connects: a refused
// configuration creates nothing.
func (c Config) Validate() error {
	c = c.withDefaults()
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
	}
	switch {
	case c.Conn.URL == "":
		return bad("no server URL")
	case c.Duration < MinDuration || c.Duration > MaxDuration:
		return bad("duration %v is outside %v..%v", c.Duration, MinDuration, MaxDuration)
	case c.IDs < 1 || c.IDs > MaxIDs:
		return bad("ids %d is outside 1..%d", c.IDs, MaxIDs)
	case c.Replicas != 0 && c.Replicas != 1 && c.Replicas != 3 && c.Replicas != 5:
		return bad("replicas %d: use 1, 3 or 5", c.Replicas)
	case c.Shards < 0 || c.Shards > wire.MaxShards:
		return bad("shards %d is outside 1..%d (0: a per-id world)", c.Shards, wire.MaxShards)
	case c.Owners < MinOwners || c.Owners > MaxOwners:
		return bad("owners %d is outside %d..%d", c.Owners, MinOwners, MaxOwners)
	case c.TTL < MinTTL || c.TTL > MaxTTL:
		return bad("ttl %v is outside %v..%v", c.TTL, MinTTL, MaxTTL)
	case c.OwnerCommand == nil:
		return bad("no owner command")
	}
	for _, f := range c.Faults {
		if !slices.Contains(Faults, f) {
			return bad("unknown fault %q: use %s", f, strings.Join(Faults, ", "))
		}
	}
	if slices.Contains(c.Faults, FaultCut) {
		if _, err := proxyTargets(c.Conn.URL); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
	}
	return nil
}

// ParseFaults reads a comma-separated list of fault kinds ("none": no
// faults, "all": every kind).
func ParseFaults(s string) ([]string, error) {
	switch strings.TrimSpace(s) {
	case "all":
		return slices.Clone(Faults), nil
	case "none", "":
		return []string{}, nil
	}
	var out []string
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if !slices.Contains(Faults, f) {
			return nil, fmt.Errorf("%w: unknown fault %q: use %s, all or none", ErrInvalidConfig, f, strings.Join(Faults, ", "))
		}
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out, nil
}
