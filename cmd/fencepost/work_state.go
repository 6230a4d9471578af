package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
	"unicode/utf8"

	"github.com/fencepost/fencepost/drain"
)

// The --exec state protocol of `fencepost work --state` (docs/design.md
// 3.12, examples/state). Per message, CMD gets, besides the environment of
// `work --exec`:
//
//	FENCEPOST_STATE         a file holding the id's state as one JSON
//	                        object, key -> value (strings), as of the
//	                        message before this one: {"count":"41"}
//	FENCEPOST_STATE_WRITES  a file, empty, in which CMD may write one JSON
//	                        object of the writes to stage: key -> new value
//	                        (a string), or null to delete the key:
//	                        {"count":"42","draft":null}
//
// Exit status 0 acknowledges the message, and its writes are committed
// with it in one fenced atomic batch: applied exactly once. Any other exit
// status, a writes file that is not one such JSON object, or a key or size
// over the limits (keys of 1..64 of [A-Za-z0-9_-], 64 keys, 16 KiB a value,
// 256 KiB an id) fails the message and stages nothing. Values are text: a
// key whose stored value is not UTF-8 (written by a Go handler) fails the
// message. The JSON in FENCEPOST_STATE is compact, its keys sorted.
const (
	envState       = "FENCEPOST_STATE"
	envStateWrites = "FENCEPOST_STATE_WRITES"
)

// execStateHandler is execHandler with the id's state (the protocol
// above).
func execStateHandler(cmd, node string, grace time.Duration, stdout io.Writer) drain.Handler {
	return drain.StateHandler(func(ctx context.Context, m drain.Message, st *drain.State) error {
		dir, err := os.MkdirTemp("", "fencepost-state-")
		if err != nil {
			return fmt.Errorf("work --state: %w", err)
		}
		defer os.RemoveAll(dir)
		state := map[string]string{}
		for _, k := range st.Keys() {
			v, _ := st.Get(k)
			if !utf8.Valid(v) {
				return fmt.Errorf("work --state: the value of %q in the state of %q is not UTF-8: the --exec state protocol carries text", k, m.ID)
			}
			state[k] = string(v)
		}
		in, err := json.Marshal(state)
		if err != nil {
			return err
		}
		statePath, writesPath := filepath.Join(dir, "state.json"), filepath.Join(dir, "writes.json")
		if err := os.WriteFile(statePath, in, 0o600); err != nil {
			return fmt.Errorf("work --state: %w", err)
		}
		if err := os.WriteFile(writesPath, nil, 0o600); err != nil {
			return fmt.Errorf("work --state: %w", err)
		}
		if err := runHandler(ctx, cmd, node, grace, stdout, m, envState+"="+statePath, envStateWrites+"="+writesPath); err != nil {
			return err
		}
		out, err := os.ReadFile(writesPath)
		if err != nil {
			return fmt.Errorf("work --state: read the writes of %q: %w", cmd, err)
		}
		return stageWrites(st, out)
	}).Handler()
}

// stageWrites stages the JSON object of writes a command left (see the
// protocol above); nothing at all if any of it is refused.
func stageWrites(st *drain.State, out []byte) error {
	if len(bytes.TrimSpace(out)) == 0 {
		return nil
	}
	var writes map[string]*string
	dec := json.NewDecoder(bytes.NewReader(out))
	if err := dec.Decode(&writes); err != nil || writes == nil || dec.More() {
		if err == nil {
			err = fmt.Errorf("more than one JSON object, or null")
		}
		return fmt.Errorf("work --state: %s is not one JSON object of key -> string or null: %v", envStateWrites, err)
	}
	// A refused write fails the message, which drops what it staged.
	for k, v := range writes {
		var err error
		if v == nil {
			err = st.Delete(k)
		} else {
			err = st.Put(k, []byte(*v))
		}
		if err != nil {
			return fmt.Errorf("work --state: %w", err)
		}
	}
	return nil
}
