package world

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/fencepost/fencepost/internal/wire"
)

// Storage says where a world's streams keep their data.
type Storage string

// Storage kinds.
const (
	FileStorage   Storage = "file"
	MemoryStorage Storage = "memory"
)

// Config holds a world's settings. The zero value of a field means its
// default (see Defaults).
//
// The size limits (docs/design.md section 5, "Limits"): MaxBody is the
// largest body a post accepts and MaxHeaders the most header bytes one may
// carry (as the server counts them, HeaderSize in package queue); the
// broker's own limit on one message, the mailbox stream's max_msg_size, is
// MaxMsgSize = MaxBody + MaxHeaders, so that the Go client refuses exactly
// what is over MaxBody or MaxHeaders and the broker never refuses what the
// client accepts. Any two of the three give the third; MaxMsgSize alone is
// the form of worlds created before MaxBody existed (WithDefaults).
type Config struct {
	MinTTL     time.Duration `json:"min_ttl"`
	MaxTTL     time.Duration `json:"max_ttl"`
	DefaultTTL time.Duration `json:"default_ttl"`
	// MaxBody is the largest body a post accepts, in bytes.
	MaxBody int32 `json:"max_body,omitempty"`
	// MaxHeaders is the most header bytes a post may carry (the sender,
	// the message id and the caller's headers, as the server counts them).
	MaxHeaders int32 `json:"max_headers,omitempty"`
	// MaxMsgSize is the mailbox stream's max_msg_size: body plus headers,
	// what the broker refuses beyond (MaxBody + MaxHeaders).
	MaxMsgSize int32 `json:"max_msg_size"`
	// MaxMsgsPerMailbox is the number of messages one mailbox holds before
	// a post answers full.
	MaxMsgsPerMailbox int64 `json:"max_msgs_per_mailbox"`
	// MaxBytes is the number of bytes the world's mailbox stream holds
	// (every mailbox and dead letter of the world together, as the server
	// counts a stored message: subject, headers, body and a few bytes of
	// its own) before a post answers full; 0 is no limit. JetStream has no
	// byte limit per subject, so there is none per mailbox (docs/design.md
	// section 5).
	MaxBytes int64 `json:"max_bytes,omitempty"`
	// MaxBytesPerMailbox is the byte limit of worlds created before
	// MaxBytes: it was enforced as a message count, and still is (the
	// per-mailbox count is min(MaxMsgsPerMailbox, MaxBytesPerMailbox /
	// MaxMsgSize), MailboxMsgs). 0, the default, is not set. Deprecated:
	// use MaxMsgsPerMailbox and MaxBytes.
	MaxBytesPerMailbox int64         `json:"max_bytes_per_mailbox,omitempty"`
	MaxDeliveries      int           `json:"max_deliveries"`
	DedupeWindow       time.Duration `json:"dedupe_window"`
	Replicas           int           `json:"replicas"`
	Storage            Storage       `json:"storage"`
	// Purge says who removes committed messages from the mailboxes:
	// PurgeByOwner (the drain that committed them, the default) or
	// PurgeByServer (fencepostd, from the stored cursors), for worlds whose
	// owners may not purge (docs/security.md).
	Purge PurgeMode `json:"purge,omitempty"`
	// Partitions, if not 0, has the mailbox stream republish every post
	// to one of this many partitions by its id, so that each worker reads
	// the posts of the partitions it serves instead of every post
	// (docs/design/partitions.md). 0 is none: every worker reads every post.
	// The library's zero value stays none; the commands that create a
	// world (world add, fencepostd, bench, verify) give it PartitionsFor
	// its replicas unless told otherwise.
	Partitions int `json:"partitions,omitempty"`
	// Shards, if not 0, makes the world sharded: its ids are divided into
	// this many shards (wire.ShardOf) and the unit of ownership is the
	// shard, one record, epoch and lease each (docs/contract.md, "Sharded
	// worlds"). Fixed when the world is created; 0, the default, is a
	// per-id world. A sharded world does not republish (Partitions is 0):
	// its mailbox stream stores each post under its shard.
	Shards int `json:"shards,omitempty"`
}

// Kinds of world (Config.Kind).
const (
	KindPerID   = "per-id"
	KindSharded = "sharded"
)

// Kind is KindSharded for a world with shards, else KindPerID.
func (c Config) Kind() string {
	if c.Shards > 0 {
		return KindSharded
	}
	return KindPerID
}

// Sharded says whether the unit of ownership is the shard.
func (c Config) Sharded() bool { return c.Shards > 0 }

// DefaultPartitions is the partitions a new single-replica world gets
// from the commands when none are asked for (PartitionsFor).
const DefaultPartitions = 64

// PartitionsFor is the partitions a new world of these replicas gets when
// none are asked for: DefaultPartitions on one replica, none on more. A
// replicated mailbox stream's new leader may not republish what the old
// one stored (docs/design/partitions.md, "The default"); such a loss is found
// only at the id's next post, a reconnect or a scan, so replicated worlds
// are partitioned only when asked.
func PartitionsFor(replicas int) int {
	if replicas <= 1 {
		return DefaultPartitions
	}
	return 0
}

// PurgeMode says who purges committed messages.
type PurgeMode string

// Purge modes.
const (
	PurgeByOwner  PurgeMode = "owner"
	PurgeByServer PurgeMode = "server"
)

// Defaults are the settings of a world created without any.
var Defaults = Config{
	MinTTL:            time.Second,
	MaxTTL:            time.Hour,
	DefaultTTL:        10 * time.Second,
	MaxBody:           1<<20 - 8<<10, // with MaxHeaders, 1 MiB: nats-server's default max_payload
	MaxHeaders:        8 << 10,
	MaxMsgSize:        1 << 20,
	MaxMsgsPerMailbox: 100_000,
	MaxDeliveries:     5,
	DedupeWindow:      2 * time.Minute,
	Replicas:          1,
	Storage:           FileStorage,
	Purge:             PurgeByOwner,
}

// LegacyHeaderRoom is the header room of a world given only MaxMsgSize
// (a world created before MaxBody existed): the 1 KiB, at most half of
// MaxMsgSize, that its posts kept free, so that such a world takes the
// bodies it took before.
const LegacyHeaderRoom = 1024

// MaxStoredHeaders is the most header bytes the broker stores with one
// message (as HeaderSize in package queue counts them): nats-server
// refuses a message with more (JetStream error 10097, "header size
// exceeds maximum allowed of 64k"), whatever the stream's max_msg_size.
// A new world's MaxHeaders is at most this (Create), so that every post
// the Go client accepts is stored, and every stored message's dead letter
// fits (docs/wire.md "Dead letters").
const MaxStoredHeaders = 1<<16 - 1

// Hard limits on settings, whatever a world asks for.
const (
	floorTTL      = time.Millisecond // tests use short ttls; production worlds keep the 1 s default
	ceilingTTL    = 24 * time.Hour
	maxMsgSizeCap = 8 << 20 // nats-server's max_payload ceiling: max_body + max_headers
)

// ErrInvalidConfig wraps every problem with a world's settings.
var ErrInvalidConfig = errors.New("world: invalid config")

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	d := Defaults
	if c.MinTTL == 0 {
		c.MinTTL = d.MinTTL
	}
	if c.MaxTTL == 0 {
		c.MaxTTL = d.MaxTTL
	}
	if c.DefaultTTL == 0 {
		c.DefaultTTL = max(min(d.DefaultTTL, c.MaxTTL), c.MinTTL)
	}
	c.MaxBody, c.MaxHeaders, c.MaxMsgSize = sizes(c.MaxBody, c.MaxHeaders, c.MaxMsgSize)
	if c.MaxMsgsPerMailbox == 0 {
		c.MaxMsgsPerMailbox = d.MaxMsgsPerMailbox
	}
	if c.MaxDeliveries == 0 {
		c.MaxDeliveries = d.MaxDeliveries
	}
	if c.DedupeWindow == 0 {
		c.DedupeWindow = d.DedupeWindow
	}
	if c.Replicas == 0 {
		c.Replicas = d.Replicas
	}
	if c.Storage == "" {
		c.Storage = d.Storage
	}
	if c.Purge == "" {
		c.Purge = d.Purge
	}
	return c
}

// sizes fills the size limits: any two give the third; one alone takes the
// default of another (of MaxHeaders, or for MaxMsgSize alone, the legacy
// split); none takes the defaults.
func sizes(body, headers, msg int32) (int32, int32, int32) {
	d := Defaults
	switch {
	case body != 0 && headers != 0 && msg != 0:
	case body != 0 && headers != 0:
		msg = body + headers
	case body != 0 && msg != 0:
		headers = msg - body
	case headers != 0 && msg != 0:
		body = msg - headers
	case msg != 0:
		// A world created before MaxBody: its posts kept 1 KiB (at most
		// half) free, so its body limit stays what it was.
		headers = min(LegacyHeaderRoom, msg/2)
		body = msg - headers
	case body != 0:
		headers = d.MaxHeaders
		msg = body + headers
	case headers != 0:
		body = d.MaxBody
		msg = body + headers
	default:
		body, headers, msg = d.MaxBody, d.MaxHeaders, d.MaxMsgSize
	}
	return body, headers, msg
}

// MailboxMsgs is the number of messages one mailbox holds: the mailbox
// stream's max_msgs_per_subject. It is MaxMsgsPerMailbox, or for a world
// with the legacy MaxBytesPerMailbox the count that setting was enforced
// as.
func (c Config) MailboxMsgs() int64 {
	if c.MaxBytesPerMailbox > 0 && c.MaxMsgSize > 0 {
		return min(c.MaxMsgsPerMailbox, c.MaxBytesPerMailbox/int64(c.MaxMsgSize))
	}
	return c.MaxMsgsPerMailbox
}

// Validate names the first field that is out of bounds.
func (c Config) Validate() error {
	bad := func(field, format string, a ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrInvalidConfig, field, fmt.Sprintf(format, a...))
	}
	switch {
	case c.MinTTL < floorTTL || c.MinTTL > ceilingTTL:
		return bad("min_ttl", "%v is outside %v..%v", c.MinTTL, floorTTL, ceilingTTL)
	case c.MaxTTL < c.MinTTL || c.MaxTTL > ceilingTTL:
		return bad("max_ttl", "%v is outside min_ttl (%v)..%v", c.MaxTTL, c.MinTTL, ceilingTTL)
	case c.DefaultTTL < c.MinTTL || c.DefaultTTL > c.MaxTTL:
		return bad("default_ttl", "%v is outside %v..%v", c.DefaultTTL, c.MinTTL, c.MaxTTL)
	case c.MaxMsgSize < 1 || c.MaxMsgSize > maxMsgSizeCap:
		return bad("max_msg_size", "%d (max_body %d + max_headers %d) is outside 1..%d bytes", c.MaxMsgSize, c.MaxBody, c.MaxHeaders, maxMsgSizeCap)
	case c.MaxBody < 1 || c.MaxBody > maxMsgSizeCap:
		return bad("max_body", "%d is outside 1..%d bytes", c.MaxBody, maxMsgSizeCap)
	case c.MaxHeaders < 0 || c.MaxHeaders > maxMsgSizeCap:
		return bad("max_headers", "%d is outside 0..%d bytes", c.MaxHeaders, maxMsgSizeCap)
	case int64(c.MaxMsgSize) != int64(c.MaxBody)+int64(c.MaxHeaders):
		return bad("max_msg_size", "%d is not max_body %d + max_headers %d", c.MaxMsgSize, c.MaxBody, c.MaxHeaders)
	case c.MaxMsgsPerMailbox < 1:
		return bad("max_msgs_per_mailbox", "%d must be at least 1", c.MaxMsgsPerMailbox)
	case c.MaxBytes < 0:
		return bad("max_bytes", "%d is negative (0 is no limit)", c.MaxBytes)
	case c.MaxBytes > 0 && c.MaxBytes < int64(c.MaxBody):
		return bad("max_bytes", "%d is less than max_body %d: the world could not hold its largest body", c.MaxBytes, c.MaxBody)
	case c.MaxBytesPerMailbox < 0 || (c.MaxBytesPerMailbox > 0 && c.MaxBytesPerMailbox < int64(c.MaxMsgSize)):
		return bad("max_bytes_per_mailbox", "%d is less than max_msg_size %d", c.MaxBytesPerMailbox, c.MaxMsgSize)
	case c.MaxDeliveries < 1 || c.MaxDeliveries > 1000:
		return bad("max_deliveries", "%d is outside 1..1000", c.MaxDeliveries)
	case c.DedupeWindow < time.Millisecond || c.DedupeWindow > 24*time.Hour:
		return bad("dedupe_window", "%v is outside 1ms..24h", c.DedupeWindow)
	case c.Replicas != 1 && c.Replicas != 3 && c.Replicas != 5:
		return bad("replicas", "%d is not 1, 3 or 5", c.Replicas)
	case c.Storage != FileStorage && c.Storage != MemoryStorage:
		return bad("storage", "%q is neither %q nor %q", c.Storage, FileStorage, MemoryStorage)
	case c.Purge != PurgeByOwner && c.Purge != PurgeByServer:
		return bad("purge", "%q is neither %q nor %q", c.Purge, PurgeByOwner, PurgeByServer)
	case c.Partitions < 0 || c.Partitions > wire.MaxPartitions:
		return bad("partitions", "%d is outside 0 (none)..%d", c.Partitions, wire.MaxPartitions)
	case c.Shards < 0 || c.Shards > wire.MaxShards:
		return bad("shards", "%d is outside 0 (a per-id world)..%d", c.Shards, wire.MaxShards)
	case c.Shards > 0 && c.Partitions > 0:
		return bad("partitions", "%d: a sharded world stores each post under its shard and republishes nothing; give shards or partitions, not both", c.Partitions)
	}
	return nil
}

// TTL resolves a requested ttl: zero means the world's default; anything
// outside MinTTL..MaxTTL is refused with a message naming the bounds.
func (c Config) TTL(ttl time.Duration) (time.Duration, error) {
	if ttl == 0 {
		return c.DefaultTTL, nil
	}
	if ttl < c.MinTTL || ttl > c.MaxTTL {
		return 0, fmt.Errorf("%w: ttl %v is outside this world's bounds %v..%v", ErrInvalidTTL, ttl, c.MinTTL, c.MaxTTL)
	}
	return ttl, nil
}

// ErrInvalidTTL is returned for a ttl outside the world's bounds.
var ErrInvalidTTL = errors.New("invalid ttl")

// config metadata keys on the bucket stream.
const (
	metaVersion = "fencepost.world.v"
	metaConfig  = "fencepost.world.config"
	configV     = "1"
)

func encodeMeta(c Config) (map[string]string, error) {
	b, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	return map[string]string{metaVersion: configV, metaConfig: string(b)}, nil
}

func decodeMeta(world string, meta map[string]string) (Config, error) {
	v, ok := meta[metaVersion]
	if !ok {
		return Config{}, fmt.Errorf("%w: world %q: its bucket has no fencepost metadata; is it a fencepost world?", ErrInvalidConfig, world)
	}
	if v != configV {
		return Config{}, fmt.Errorf("%w: world %q: config version %q, this reader knows %q; upgrade fencepost", ErrInvalidConfig, world, v, configV)
	}
	var c Config
	if err := json.Unmarshal([]byte(meta[metaConfig]), &c); err != nil {
		return Config{}, fmt.Errorf("%w: world %q: config metadata is not valid JSON: %v", ErrInvalidConfig, world, err)
	}
	c = c.WithDefaults()
	if err := c.Validate(); err != nil {
		return Config{}, fmt.Errorf("world %q: %w", world, err)
	}
	return c, nil
}
