package main

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/mailbox"
	"github.com/fencepost/fencepost/ownership"
	"github.com/fencepost/fencepost/world"
)

// The flags of the world command (one command runs per process): the
// settings of add, and rm's --yes.
var worldFlags struct {
	MinTTL        time.Duration `name:"min-ttl" placeholder:"D" help:"add: shortest lease (default 1s)"`
	MaxTTL        time.Duration `name:"max-ttl" placeholder:"D" help:"add: longest lease (default 1h)"`
	DefaultTTL    time.Duration `name:"default-ttl" placeholder:"D" help:"add: lease when none is asked for (default 10s)"`
	MaxBody       int32         `name:"max-body" placeholder:"BYTES" help:"add: largest body a post accepts, in bytes (default 1040384: with the headers, 1 MiB)"`
	MaxMsgSize    int32         `name:"max-msg-size" placeholder:"BYTES" hidden:"" help:"add: deprecated, the old name of --max-body: the largest body (the setting max_msg_size is max_body + max_headers)"`
	MaxHeaders    int32         `name:"max-headers" placeholder:"BYTES" help:"add: most header bytes a post may carry, sender and message id included (default 8192)"`
	MaxMsgs       int64         `name:"max-msgs" placeholder:"N" help:"add: messages one mailbox holds before full (default 100000)"`
	MaxBytes      int64         `name:"max-bytes" placeholder:"BYTES" help:"add: bytes the world's mailboxes and dead letters hold together before full, as the server stores them (default: no limit)"`
	MaxDeliveries int           `name:"max-deliveries" placeholder:"N" help:"add: deliveries before a message moves to dead letters (default 5)"`
	DedupeWindow  time.Duration `name:"dedupe-window" placeholder:"D" help:"add: window in which a repeated --msg-id is stored once (default 2m)"`
	Replicas      int           `name:"replicas" placeholder:"N" help:"add: 1, 3 or 5 (default 1)"`
	Storage       string        `name:"storage" placeholder:"KIND" complete:"file,memory" help:"add: file or memory (default file)"`
	Purge         string        `name:"purge" placeholder:"WHO" complete:"owner,server" help:"add: who removes committed messages: owner (the drain, default) or server (fencepostd; for worlds whose owners may not purge, docs/security.md)"`
	Partitions    int           `name:"partitions" placeholder:"N" help:"add: republish each post to one of N partitions by its id, so that each worker reads the posts of the partitions it serves, not every post (up to 1024; 0: none, every worker reads every post; default 64 with one replica, 0 with more)"`
	Shards        int           `name:"shards" placeholder:"N" help:"add: make a sharded world of N shards, 1..1024: each id's ownership record is its shard's (claim, owner, ... act on the id's shard), fixed at creation; no partitions (default: a per-id world)"`
	Yes           bool          `name:"yes" help:"rm: confirm"`
}

func init() {
	register("world", &command{
		usage: "world add|ls|info|rm [NAME] [settings] [--yes]",
		short: "manage worlds: created | exists | world name=... | removed",
		examples: []string{
			"fencepost world add orders --replicas 3 --default-ttl 30s   # created world=orders ...; exists world=orders ... if it is there with these settings",
			"fencepost world add events --shards 64                      # created world=events ... kind=sharded shards=64: ownership by shard",
			"fencepost world ls                                          # world name=orders replicas=3 storage=file, one line each",
			"fencepost world info orders                                 # its settings, depth, mailboxes, records, ...",
			"fencepost world rm orders --yes                             # removed world=orders",
		},
		flags: &worldFlags,
		run:   runWorld,
	})
}

// worldConfig is the settings the flags give.
func worldConfig() world.Config {
	wf := worldFlags
	cfg := world.Config{
		MinTTL: wf.MinTTL, MaxTTL: wf.MaxTTL, DefaultTTL: wf.DefaultTTL,
		MaxBody: wf.MaxBody, MaxHeaders: wf.MaxHeaders,
		MaxMsgsPerMailbox: wf.MaxMsgs, MaxBytes: wf.MaxBytes, MaxDeliveries: wf.MaxDeliveries,
		DedupeWindow: wf.DedupeWindow, Replicas: wf.Replicas,
		Storage: world.Storage(wf.Storage), Purge: world.PurgeMode(wf.Purge), Partitions: wf.Partitions,
		Shards: wf.Shards,
	}
	if cfg.MaxBody == 0 {
		cfg.MaxBody = wf.MaxMsgSize
	}
	return cfg
}

func runWorld(e *env, args []string) int {
	if len(args) == 0 {
		return e.usageErr("world", "want a subcommand: add, ls, info or rm")
	}
	sub, rest := args[0], args[1:]
	cfg := worldConfig()
	if sub != "add" && cfg != (world.Config{}) {
		return e.usageErr("world", "settings flags go with add only")
	}
	name := e.world
	switch {
	case sub == "ls" && len(rest) > 0:
		return e.usageErr("world", "ls takes no NAME")
	case sub != "ls" && len(rest) == 1:
		name = rest[0]
	case sub == "add" && len(rest) == 0, sub == "rm" && len(rest) == 0:
		return e.usageErr("world", "%s wants the world's NAME", sub)
	case len(rest) > 1:
		return e.usageErr("world", "want one NAME, got %d", len(rest))
	}
	switch sub {
	case "add":
		return worldAdd(e, name, cfg)
	case "ls":
		return worldLs(e)
	case "info":
		return worldInfo(e, name)
	case "rm":
		if !worldFlags.Yes {
			return e.usageErr("world", "this deletes world %q and everything in it; add --yes", name)
		}
		return worldRm(e, name)
	}
	return e.usageErr("world", "unknown subcommand %q: use add, ls, info or rm", sub)
}

// worldAdd creates a world: created, or exists when it is there with the
// settings asked (an error naming those that differ). Only the settings
// whose flags were given are compared. An existing world made before
// per-id state gets its bucket's atomic batches turned on (world.Create).
// A new world without --partitions gets world.PartitionsFor its replicas,
// a sharded one (--shards) none. --shards outside 1..1024 is a usage
// error.
func worldAdd(e *env, name string, cfg world.Config) int {
	if e.given["shards"] && (cfg.Shards < 1 || cfg.Shards > wire.MaxShards) {
		return e.usageErr("world", "--shards %d: a sharded world has 1..%d shards (leave --shards out for a per-id world)", cfg.Shards, wire.MaxShards)
	}
	ctx, cancel := e.ctx()
	defer cancel()
	c, err := e.client()
	if err != nil {
		return e.fail(err)
	}
	if !e.given["partitions"] && cfg.Shards == 0 {
		cfg.Partitions = world.PartitionsFor(cfg.Replicas)
	}
	if e.given["max-msg-size"] {
		// The flag's old meaning is kept; the setting of that name is
		// another (world.Config.MaxMsgSize): say which is which.
		if e.given["max-body"] && worldFlags.MaxBody != worldFlags.MaxMsgSize {
			return e.usageErr("world", "--max-msg-size is the old name of --max-body: give one of them")
		}
		fmt.Fprintf(e.err, "world: --max-msg-size %d is the old name of --max-body: it sets the largest body (max_body); the world's max_msg_size is max_body + max_headers\n", worldFlags.MaxMsgSize)
	}
	want := cfg.WithDefaults()
	if err := want.Validate(); err != nil {
		return e.fail(err)
	}
	js := c.JetStream()
	if w, err := world.Open(ctx, js, name); err == nil {
		if diff := settingsDiff(w.Config, want, givenSettings(e.given)); diff != "" {
			return e.fail(fmt.Errorf("%w: world %q: it has %s; remove it first (world rm) to change them", world.ErrWorldExists, name, diff))
		}
		if !w.AllowsState() {
			// A world created before per-id state: Create with its own
			// settings turns its bucket's atomic batches on.
			if w, err = world.Create(ctx, js, name, w.Config); err != nil {
				return e.fail(err)
			}
		}
		e.emit("exists", append([]field{f("world", name)}, settingFields(w.Config)...)...)
		return exitOK
	} else if !errors.Is(err, world.ErrUnknownWorld) {
		return e.fail(err)
	}
	w, err := world.Create(ctx, js, name, cfg)
	if err != nil {
		return e.fail(err)
	}
	e.emit("created", append([]field{f("world", name)}, settingFields(w.Config)...)...)
	return exitOK
}

func worldLs(e *env) int {
	ctx, cancel := e.ctx()
	defer cancel()
	c, err := e.client()
	if err != nil {
		return e.fail(err)
	}
	names, err := c.Worlds(ctx)
	if err != nil {
		return e.fail(err)
	}
	for _, n := range names {
		w, err := world.Open(ctx, c.JetStream(), n)
		if err != nil {
			e.emit("world", f("name", n), f("error", err.Error()))
			continue
		}
		fields := []field{f("name", n), f("replicas", w.Config.Replicas), f("storage", string(w.Config.Storage))}
		if w.Config.Sharded() || e.json {
			// A per-id world's line reads as it always has; its object
			// says the kind too.
			fields = append(fields, f("kind", w.Config.Kind()), f("shards", w.Config.Shards))
		}
		e.emit("world", fields...)
	}
	return exitOK
}

func worldInfo(e *env, name string) int {
	ctx, cancel := e.ctx()
	defer cancel()
	c, err := e.client()
	if err != nil {
		return e.fail(err)
	}
	w, err := world.Open(ctx, c.JetStream(), name)
	if err != nil {
		return e.fail(err)
	}
	info, err := w.Inspect(ctx, world.InspectOptions{})
	if err != nil {
		return e.fail(err)
	}
	own, err := ownership.New(w)
	if err != nil {
		return e.fail(err)
	}
	rc, err := own.CountRecords(ctx)
	if err != nil {
		return e.fail(err)
	}
	// Depth and mailboxes count from each id's cursor, as stat does: the
	// stream's own counts include the committed messages not yet purged.
	mb, err := mailbox.New(w, own)
	if err != nil {
		return e.fail(err)
	}
	mail, err := mb.MailTotals(ctx)
	if err != nil {
		return e.fail(err)
	}
	depth, mailboxes, oldest := info.Depth, info.Mailboxes, info.OldestAge
	if !mail.Unlisted {
		depth, mailboxes = mail.Depth, uint64(mail.IDs)
	}
	if depth == 0 {
		oldest = 0 // what is stored is committed, not waiting
	}
	fields := append([]field{f("name", name)}, settingFields(info.Config)...)
	fields = append(fields,
		f("depth", depth), f("mailboxes", mailboxes), f("committed_stored", mail.CommittedStored), f("oldest_age", oldest.Round(time.Millisecond).String()),
		f("dead_letters", info.DeadLetters), f("records", rc.Records), f("owned", rc.Owned),
		f("acquisitions", rc.Acquisitions),
		f("mailbox_msgs", info.Mailbox.Msgs), f("mailbox_bytes", info.Mailbox.Bytes), f("mailbox_last_seq", info.Mailbox.LastSeq),
		f("bucket_msgs", info.Bucket.Msgs), f("bucket_bytes", info.Bucket.Bytes), f("bucket_last_seq", info.Bucket.LastSeq))
	if rc.Unreadable > 0 {
		fields = append(fields, f("unreadable", rc.Unreadable))
	}
	if !mail.CommittedOldest.IsZero() {
		fields = append(fields, f("committed_age", ageOf(mail.CommittedOldest, time.Now())))
	}
	e.emit("world", fields...)
	return exitOK
}

func worldRm(e *env, name string) int {
	ctx, cancel := e.ctx()
	defer cancel()
	c, err := e.client()
	if err != nil {
		return e.fail(err)
	}
	if err := c.RemoveWorld(ctx, name); err != nil {
		return e.fail(err)
	}
	e.emit("removed", f("world", name))
	return exitOK
}

// settingFields are a world's settings under the names of the add flags.
// max_msgs is the count a mailbox holds (for a world created with the old
// per-mailbox byte limit, the count that limit was enforced as); max_bytes
// is -1 when the world has no byte limit, as in JetStream.
func settingFields(c world.Config) []field {
	maxBytes := c.MaxBytes
	if maxBytes == 0 {
		maxBytes = -1
	}
	return []field{
		f("min_ttl", c.MinTTL.String()), f("max_ttl", c.MaxTTL.String()), f("default_ttl", c.DefaultTTL.String()),
		f("max_body", c.MaxBody), f("max_headers", c.MaxHeaders), f("max_msgs", c.MailboxMsgs()), f("max_bytes", maxBytes),
		f("max_deliveries", c.MaxDeliveries), f("dedupe_window", c.DedupeWindow.String()),
		f("replicas", c.Replicas), f("storage", string(c.Storage)), f("purge", string(c.Purge)), f("partitions", c.Partitions),
		f("kind", c.Kind()), f("shards", c.Shards),
		// The broker's limit on one message, max_body + max_headers: the
		// settings field of that name (docs/wire.md "Worlds").
		f("max_msg_size", c.MaxMsgSize),
	}
}

// givenSettings are the settings (under settingFields' names) whose flags
// the user gave.
func givenSettings(given map[string]bool) map[string]bool {
	settings := map[string]bool{}
	for name := range given {
		switch name {
		case "yes":
		case "max-msg-size":
			settings["max_body"] = true
		default:
			settings[strings.ReplaceAll(name, "-", "_")] = true
		}
	}
	return settings
}

// settingsDiff names the given settings that differ: "replicas 1 (asked
// 3)". A setting whose flag was not given is not compared.
func settingsDiff(have, want world.Config, given map[string]bool) string {
	hf, wf := settingFields(have), settingFields(want)
	s := ""
	for i := range hf {
		if given[hf[i].key] && fmt.Sprint(hf[i].val) != fmt.Sprint(wf[i].val) {
			if s != "" {
				s += ", "
			}
			s += fmt.Sprintf("%s %v (asked %v)", hf[i].key, hf[i].val, wf[i].val)
		}
	}
	return s
}
