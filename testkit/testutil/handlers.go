package testutil

import (
	"context"
	"strconv"
	"sync"

	"github.com/fencepost/fencepost/drain"
)

// Recorder is a handler that keeps every message it was given.
type Recorder struct {
	// Fail, when set, is the handler's answer for m; nil acknowledges it.
	// It runs under the recorder's lock: calls to it never overlap.
	Fail func(m drain.Message) error

	mu   sync.Mutex
	msgs []drain.Message
}

// Handle is the handler.
func (r *Recorder) Handle(_ context.Context, m drain.Message) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, m)
	if r.Fail != nil {
		return r.Fail(m)
	}
	return nil
}

// Msgs are the messages given so far, in order (a copy).
func (r *Recorder) Msgs() []drain.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]drain.Message(nil), r.msgs...)
}

// Bodies are the bodies of the messages given so far, in order.
func (r *Recorder) Bodies() []string {
	msgs := r.Msgs()
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = string(m.Body)
	}
	return out
}

// Counter is a state handler: each message adds one to its id's "count"
// and appends its body to "seen". It records every call.
type Counter struct {
	mu    sync.Mutex
	calls []string
}

// Handle is the state handler.
func (c *Counter) Handle(_ context.Context, m drain.Message, st *drain.State) error {
	c.mu.Lock()
	c.calls = append(c.calls, string(m.Body))
	c.mu.Unlock()
	n := 0
	if v, ok := st.Get("count"); ok {
		n, _ = strconv.Atoi(string(v))
	}
	seen, _ := st.Get("seen")
	if err := st.Put("count", []byte(strconv.Itoa(n+1))); err != nil {
		return err
	}
	return st.Put("seen", append(seen, m.Body...))
}

// Bodies are the bodies of every call, in order.
func (c *Counter) Bodies() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.calls...)
}
