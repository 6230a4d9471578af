package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/fencepost/fencepost/drain"
)

// What `fencepost work` tells (docs/design.md 4.5, "What a worker says").
// Every event is a log record with an "event" attribute naming it: the
// worker package logs lease_acquired, claimed, lost, released,
// dead_lettered and lease_released; this command adds started, delivered,
// failed, interrupted and stopped. Without --json they are log lines on
// stderr like any other; with --json each is one JSON object on stdout
// instead, whatever --log-level says, except delivered, which needs
// --log-level debug in both forms.
const eventKey = "event"

// workEvents is the slog.Handler of the work command: records with an
// event attribute go to the event stream (stdout with --json), the others
// to the text handler on stderr.
type workEvents struct {
	*eventSink
	attrs []slog.Attr // from WithAttrs, outside any group
	text  slog.Handler
}

// eventSink is the state the handlers derived with WithAttrs share.
type eventSink struct {
	json  bool
	debug bool // delivered events too
	text  slog.Handler

	mu  sync.Mutex
	out io.Writer
	// pending: per id, the messages whose last delivery failed, to be
	// reported dead-lettered once the worker says the cursor passed them.
	pending map[string][]deadCandidate
}

type deadCandidate struct {
	seq, epoch uint64
	delivery   int
	err        string
	exit       int // -1: no exit status
}

func newWorkEvents(text slog.Handler, json, debug bool, out io.Writer) *workEvents {
	return &workEvents{
		eventSink: &eventSink{json: json, debug: debug, text: text, out: out, pending: map[string][]deadCandidate{}},
		text:      text,
	}
}

// Enabled: every record at info and above, whatever the text level: the
// events must reach the JSON stream, and the dead-letter bookkeeping
// needs the worker's dead_lettered records.
func (h *workEvents) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelInfo || h.text.Enabled(ctx, l)
}

func (h *workEvents) WithAttrs(as []slog.Attr) slog.Handler {
	return &workEvents{eventSink: h.eventSink, attrs: append(h.attrs[:len(h.attrs):len(h.attrs)], as...), text: h.text.WithAttrs(as)}
}

func (h *workEvents) WithGroup(name string) slog.Handler {
	// Nothing logs events in a group; the rest is the text handler's.
	return &workEvents{eventSink: h.eventSink, attrs: h.attrs, text: h.text.WithGroup(name)}
}

func (h *workEvents) Handle(ctx context.Context, r slog.Record) error {
	event := ""
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == eventKey {
			event = a.Value.String()
			return false
		}
		return true
	})
	if event == "" {
		if h.text.Enabled(ctx, r.Level) {
			return h.text.Handle(ctx, r)
		}
		return nil
	}
	attrs := make(map[string]slog.Value)
	for _, a := range h.attrs {
		attrs[a.Key] = a.Value
	}
	r.Attrs(func(a slog.Attr) bool {
		attrs[a.Key] = a.Value
		return true
	})
	id := str(attrs["id"])
	switch event {
	case "claimed", "lost", "released":
		h.mu.Lock()
		delete(h.pending, id)
		h.mu.Unlock()
	case "dead_lettered":
		if _, ok := attrs["seq"]; !ok { // the worker's count: one event per message
			return h.deadLettered(ctx, r, id, attrs)
		}
	case "delivered":
		if !h.debug {
			return nil
		}
	}
	return h.out1(ctx, r)
}

// out1 sends an event record to the JSON stream or the text handler.
func (h *workEvents) out1(ctx context.Context, r slog.Record) error {
	if !h.json {
		if h.text.Enabled(ctx, r.Level) {
			return h.text.Handle(ctx, r)
		}
		return nil
	}
	var sb strings.Builder
	sb.WriteString(`{"event":`)
	field := func(k string, v slog.Value) {
		if k == eventKey {
			return
		}
		kb, _ := json.Marshal(k)
		vb, err := json.Marshal(jsonOf(v))
		if err != nil {
			vb, _ = json.Marshal(v.String())
		}
		sb.WriteByte(',')
		sb.Write(kb)
		sb.WriteByte(':')
		sb.Write(vb)
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == eventKey {
			b, _ := json.Marshal(a.Value.String())
			sb.Write(b)
			return false
		}
		return true
	})
	field("at", slog.TimeValue(r.Time))
	for _, a := range h.attrs {
		field(a.Key, a.Value)
	}
	r.Attrs(func(a slog.Attr) bool {
		field(a.Key, a.Value)
		return true
	})
	sb.WriteString("}\n")
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := io.WriteString(h.out, sb.String())
	return err
}

// jsonOf is v as a JSON value: times in RFC 3339 (UTC), durations as Go
// writes them ("1.5s"), errors as their message.
func jsonOf(v slog.Value) any {
	switch v.Kind() {
	case slog.KindTime:
		return v.Time().UTC().Format(time.RFC3339Nano)
	case slog.KindDuration:
		return v.Duration().String()
	case slog.KindAny:
		switch x := v.Any().(type) {
		case error:
			return x.Error()
		case time.Duration:
			return x.String()
		}
		return v.Any()
	}
	return v.Any()
}

// deadLettered turns the worker's count of dead letters of one delivery
// run (id, count, cursor) into one event per message: the failures of the
// last delivery that the cursor passed. Messages whose deliveries ran out
// before (another process, or a dead-lettering that failed and was
// retried without a handler call) are one event with their count.
func (h *workEvents) deadLettered(ctx context.Context, r slog.Record, id string, attrs map[string]slog.Value) error {
	count, cursor := int(num(attrs["count"])), num(attrs["cursor"])
	h.mu.Lock()
	var done []deadCandidate
	keep := h.pending[id][:0]
	for _, c := range h.pending[id] {
		if c.seq <= cursor {
			done = append(done, c)
		} else {
			keep = append(keep, c)
		}
	}
	if len(keep) == 0 {
		delete(h.pending, id)
	} else {
		h.pending[id] = keep
	}
	h.mu.Unlock()
	for _, c := range done {
		as := []slog.Attr{slog.String(eventKey, "dead_lettered"), slog.String("id", id), slog.Uint64("seq", c.seq), slog.Uint64("epoch", c.epoch), slog.Int("delivery", c.delivery), slog.String("error", c.err)}
		if c.exit >= 0 {
			as = append(as, slog.Int("exit", c.exit))
		}
		if err := h.out1(ctx, newRecord(r, slog.LevelWarn, "dead-lettered: no deliveries left (fencepost dlq ls|repost)", as)); err != nil {
			return err
		}
	}
	if rest := count - len(done); rest > 0 {
		as := []slog.Attr{slog.String(eventKey, "dead_lettered"), slog.String("id", id), slog.Uint64("epoch", num(attrs["epoch"])), slog.Int("count", rest), slog.Uint64("cursor", cursor)}
		return h.out1(ctx, newRecord(r, slog.LevelWarn, "dead-lettered: messages whose deliveries ran out earlier (fencepost dlq ls|repost)", as))
	}
	return nil
}

// str is a string attribute's value ("" if it is none).
func str(v slog.Value) string {
	if v.Kind() == slog.KindString {
		return v.String()
	}
	return ""
}

// num is an integer attribute's value (0 if it is none).
func num(v slog.Value) uint64 {
	switch v.Kind() {
	case slog.KindUint64:
		return v.Uint64()
	case slog.KindInt64:
		return uint64(max(v.Int64(), 0))
	}
	return 0
}

func newRecord(from slog.Record, l slog.Level, msg string, as []slog.Attr) slog.Record {
	r := slog.NewRecord(from.Time, l, msg, from.PC)
	r.AddAttrs(as...)
	return r
}

// observe wraps the command's handler: each outcome of a delivery is an
// event (delivered, failed, interrupted), and a failed last delivery is
// remembered until the worker reports it dead-lettered. maxDeliveries is
// the world's; the wait before a retry is drain's default backoff (the
// worker sets none of its own).
func (h *workEvents) observe(log *slog.Logger, maxDeliveries int, hd drain.Handler) drain.Handler {
	return func(ctx context.Context, m drain.Message) error {
		start := time.Now()
		err := hd(ctx, m)
		base := []any{"id", m.ID, "seq", m.Seq, "epoch", m.Fence.Epoch, "delivery", m.Delivery}
		switch {
		case err == nil:
			if h.debug {
				log.Debug("delivered", append([]any{eventKey, "delivered"}, append(base, "took", time.Since(start))...)...)
			}
			return nil
		case ctx.Err() != nil:
			// The drain stopped (the id taken over, a self-fence, the
			// worker stopping): not the message's failure, not counted.
			log.Info("handler stopped with its drain; the message is delivered again", append([]any{eventKey, "interrupted"}, append(base, "reason", context.Cause(ctx))...)...)
			return err
		}
		msg, exit := failure(err)
		args := append([]any{eventKey, "failed"}, base...)
		args = append(args, "max_deliveries", maxDeliveries, "error", msg)
		if exit >= 0 {
			args = append(args, "exit", exit)
		}
		if m.Delivery >= maxDeliveries {
			h.mu.Lock()
			h.pending[m.ID] = append(h.pending[m.ID], deadCandidate{seq: m.Seq, epoch: m.Fence.Epoch, delivery: m.Delivery, err: msg, exit: exit})
			h.mu.Unlock()
			log.Warn("handler failed; no deliveries left: the message goes to the dead letters", append(args, "dead_letter", true)...)
		} else {
			log.Warn("handler failed; delivered again later", append(args, "retry_in", retryIn(m.Delivery))...)
		}
		return err
	}
}

// failure is what the handler's error says: the command's exit status
// (-1: none, e.g. killed by a signal or not started) and its message.
func failure(err error) (string, int) {
	var xe *execError
	if errors.As(err, &xe) {
		err = xe.err
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() >= 0 {
		return err.Error(), ee.ExitCode()
	}
	return err.Error(), -1
}

// retryIn is drain's wait before delivery n+1 after delivery n failed
// (drain.WithBackoff's defaults: 100 ms, doubling, at most 5 s).
func retryIn(delivery int) time.Duration {
	b := drain.DefaultBackoffMin
	for i := 1; i < delivery && b < drain.DefaultBackoffMax; i++ {
		b *= 2
	}
	return min(b, drain.DefaultBackoffMax)
}
