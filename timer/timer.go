package timer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/world"
)

// Timers administers the timers of one open world.
type Timers struct {
	w *world.World
}

// New returns the timers of w, which must be open in full (world.Open):
// a world open for posting only cannot read its streams.
func New(w *world.World) *Timers { return &Timers{w: w} }

// Timer is one pending timer.
type Timer struct {
	ID     string
	Key    string
	At     time.Time // when it fires (the schedule's time)
	Seq    uint64    // its schedule's sequence in the timer stream
	Set    time.Time // when the schedule was stored (the stream leader's clock)
	From   string    // its sender, if any (header Fencepost-From)
	Size   int       // its body's bytes
	MsgKey string    // its message id's key (queue.WithMsgID), if any
}

// ListOptions select and page a listing.
type ListOptions struct {
	ID    string // only this id's timers; "" all ids
	After string // only ids sorted after this one (by their UTF-8 bytes)
	Limit int    // about this many timers (whole ids: see List); 0 all
}

// Page is one page of a listing: timers sorted by id (its UTF-8 bytes)
// and key. More says a next page begins after Next.
type Page struct {
	Timers []Timer
	More   bool
	Next   string
}

func (t *Timers) streams() (*handles.Handles, error) {
	h := handles.Of(t.w)
	switch {
	case t.w.PostOnly:
		return nil, fmt.Errorf("timer: world %q is open for posting only: its timers cannot be read", t.w.Name)
	case !h.Timers:
		return nil, fmt.Errorf("timer: world %q: %w", t.w.Name, world.ErrNoTimers)
	}
	return h, nil
}

// List returns the pending timers, in pages of whole ids: a page stops
// before an id whose timers would take it past Limit, and holds all the
// timers of its first id whatever their number.
func (t *Timers) List(ctx context.Context, o ListOptions) (Page, error) {
	h, err := t.streams()
	if err != nil {
		return Page{}, err
	}
	filter := wire.TimerFilter(t.w.Name)
	if o.ID != "" {
		if err := wire.ValidateID(o.ID); err != nil {
			return Page{}, err
		}
		filter = wire.TimerIDFilter(t.w.Name, o.ID)
	}
	all, err := t.read(ctx, h.JS.Conn(), filter)
	if err != nil {
		return Page{}, err
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].ID != all[j].ID {
			return all[i].ID < all[j].ID
		}
		return all[i].Key < all[j].Key
	})
	return page(all, o), nil
}

// page cuts the sorted timers to o's page.
func page(all []Timer, o ListOptions) Page {
	var p Page
	for i := 0; i < len(all); {
		j := i
		for j < len(all) && all[j].ID == all[i].ID {
			j++
		}
		switch {
		case o.After != "" && all[i].ID <= o.After:
		case o.Limit > 0 && len(p.Timers) > 0 && len(p.Timers)+j-i > o.Limit:
			p.More, p.Next = true, p.Timers[len(p.Timers)-1].ID
			return p
		default:
			p.Timers = append(p.Timers, all[i:j]...)
		}
		i = j
	}
	return p
}

// readBatch is how many messages one read of List asks for.
const readBatch = 256

// read reads every schedule stored on filter's subjects, with batched
// direct gets in stream order. A message there that is no schedule (a
// revoked reminder's marker, a raw producer's) is skipped.
func (t *Timers) read(ctx context.Context, nc *nats.Conn, filter string) ([]Timer, error) {
	var out []Timer
	for seq := uint64(1); ; {
		b, err := jsapi.DirectGet(ctx, nc, wire.TimerStream(t.w.Name), jsapi.GetRequest{Seq: seq, NextFor: filter, Batch: readBatch, MaxBytes: 4 << 20})
		if err != nil {
			return nil, fmt.Errorf("timer: read the timers of world %q: %w", t.w.Name, err)
		}
		for _, m := range b.Msgs {
			if tm, ok := t.decode(m); ok {
				out = append(out, tm)
			}
			seq = m.Sequence + 1
		}
		if len(b.Msgs) == 0 || b.Pending == 0 {
			return out, nil
		}
	}
}

// decode reads a stored schedule; false for anything else.
func (t *Timers) decode(m *jetstream.RawStreamMsg) (Timer, bool) {
	id, key, err := wire.TimerOf(t.w.Name, m.Subject)
	if err != nil {
		return Timer{}, false
	}
	at, ok := At(m.Header)
	if !ok {
		return Timer{}, false
	}
	tm := Timer{ID: id, Key: key, At: at, Seq: m.Sequence, Set: m.Time, Size: len(m.Data), From: m.Header.Get("Fencepost-From")}
	if k, ok := wire.MsgIDKey(id, m.Header.Get(jetstream.MsgIDHeader)); ok {
		tm.MsgKey = k
	}
	return tm, true
}

// At is the time of a stored schedule's "@at" header, and false when h
// holds no such schedule (or a fired copy's Nats-Scheduler).
func At(h nats.Header) (time.Time, bool) {
	v := h.Get(wire.HeaderSchedule)
	if h.Get(wire.HeaderScheduler) != "" || len(v) < 4 || v[:4] != "@at " {
		return time.Time{}, false
	}
	at, err := time.Parse(time.RFC3339, v[4:])
	return at, err == nil
}

// Cancel removes id's pending timer key, so that it never fires, and
// says whether there was one. A timer whose time has come may be fired
// already (false), or be firing: the server copies a schedule when it is
// due and stores the copy a moment later, and a cancel in between
// removes the schedule (true) while the copy is still stored. So a timer
// cancelled before its time never fires; one cancelled at its time may.
func (t *Timers) Cancel(ctx context.Context, id, key string) (bool, error) {
	h, err := t.streams()
	if err != nil {
		return false, err
	}
	if err := wire.ValidateID(id); err != nil {
		return false, err
	}
	if err := wire.ValidateAnyTimerKey(key); err != nil {
		return false, err
	}
	subj := wire.TimerSubject(t.w.Name, id, key)
	last, err := jsapi.LeaderGet(ctx, h.JS.Conn(), wire.TimerStream(t.w.Name), jsapi.GetRequest{LastFor: subj})
	if errors.Is(err, jsapi.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("timer: cancel %q of %q: read it: %w", key, id, err)
	}
	n, err := purge(ctx, h.JS.Conn(), wire.TimerStream(t.w.Name), subj, 0)
	if err != nil {
		return false, fmt.Errorf("timer: cancel %q of %q: %w", key, id, err)
	}
	_, pending := At(last.Header)
	return pending && n > 0, nil
}

// purge purges stream's messages on subject (below seq, when not 0) and
// returns how many it removed.
func purge(ctx context.Context, nc *nats.Conn, stream, subject string, below uint64) (uint64, error) {
	ctx, cancel := jsapi.WithTimeout(ctx)
	defer cancel()
	req, err := json.Marshal(jetstream.StreamPurgeRequest{Subject: subject, Sequence: below})
	if err != nil {
		return 0, err
	}
	resp, err := nc.RequestWithContext(ctx, jsapi.APIPurge+stream, req)
	if err != nil {
		return 0, fmt.Errorf("purge stream %s: %w", stream, err)
	}
	var r struct {
		Success bool                `json:"success"`
		Purged  uint64              `json:"purged"`
		Error   *jetstream.APIError `json:"error"`
	}
	if err := json.NewDecoder(bytes.NewReader(resp.Data)).Decode(&r); err != nil {
		return 0, fmt.Errorf("purge stream %s: bad response: %w", stream, err)
	}
	if r.Error != nil {
		return 0, fmt.Errorf("purge stream %s: %w", stream, r.Error)
	}
	return r.Purged, nil
}
