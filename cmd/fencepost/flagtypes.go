package main

import (
	"fmt"
	"strconv"
	"time"

	"github.com/alecthomas/kong"

	"github.com/fencepost/fencepost/internal/wire"
)

// Flag value types that check their value as kong reads it: a refused
// value is a usage error (exit 2) that says what to give.

// popString is the flag's value as given.
func popString(ctx *kong.DecodeContext, what string) (string, error) {
	t, err := ctx.Scan.PopValue(what)
	if err != nil {
		return "", err
	}
	return t.String(), nil
}

// ttlValue is a lease term: a positive duration (left out, the world's).
type ttlValue time.Duration

func (v *ttlValue) Decode(ctx *kong.DecodeContext) error {
	s, err := popString(ctx, "duration")
	if err != nil {
		return err
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return fmt.Errorf("want a positive duration such as 10s (leave --ttl out for the world's default)")
	}
	*v = ttlValue(d)
	return nil
}

// epochValue is an epoch: a number of 1 or more (epochs start at 1).
type epochValue uint64

func (v *epochValue) Decode(ctx *kong.DecodeContext) error {
	s, err := popString(ctx, "epoch")
	if err != nil {
		return err
	}
	n, err := strconv.ParseUint(s, 10, 64)
	switch {
	case err != nil:
		return fmt.Errorf("want a number: %v", err)
	case n == 0:
		return fmt.Errorf("epochs start at 1")
	}
	*v = epochValue(n)
	return nil
}

// maxValue is drain's --max: a count of 1 or more.
type maxValue int

func (v *maxValue) Decode(ctx *kong.DecodeContext) error {
	n, err := popCount(ctx)
	if err != nil {
		return fmt.Errorf("want a count of 1 or more (leave --max out to drain until the mailbox is empty)")
	}
	*v = maxValue(n)
	return nil
}

// limitValue is ls's --limit: a count of 1 or more.
type limitValue int

func (v *limitValue) Decode(ctx *kong.DecodeContext) error {
	n, err := popCount(ctx)
	if err != nil {
		return fmt.Errorf("want a count of 1 or more")
	}
	*v = limitValue(n)
	return nil
}

func popCount(ctx *kong.DecodeContext) (int, error) {
	s, err := popString(ctx, "count")
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("not a count of 1 or more: %q", s)
	}
	return n, nil
}

// nodeValue is a node name as the wire takes it.
type nodeValue string

func (v *nodeValue) Decode(ctx *kong.DecodeContext) error {
	s, err := popString(ctx, "node")
	if err != nil {
		return err
	}
	if err := wire.ValidateNode(s); err != nil {
		return err
	}
	*v = nodeValue(s)
	return nil
}

// idValue is an id as the wire takes it.
type idValue string

func (v *idValue) Decode(ctx *kong.DecodeContext) error {
	s, err := popString(ctx, "id")
	if err != nil {
		return err
	}
	if err := wire.ValidateID(s); err != nil {
		return err
	}
	*v = idValue(s)
	return nil
}

// shardValue is --shard: a shard number, 0 to wire.MaxShards-1 (the
// world's own number of shards is checked once it is open).
type shardValue int

func (v *shardValue) Decode(ctx *kong.DecodeContext) error {
	s, err := popString(ctx, "shard")
	if err != nil {
		return err
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n >= wire.MaxShards {
		return fmt.Errorf("want a shard number 0..%d (a sharded world of N shards has 0..N-1), got %q", wire.MaxShards-1, s)
	}
	*v = shardValue(n)
	return nil
}
