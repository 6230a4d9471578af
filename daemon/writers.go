package daemon

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/jwt/v2"
	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/fencepost/fencepost/fencing"
	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/internal/wire"
)

// Who wrote a record or a state key (docs/security.md, "Who wrote it").
//
// JetStream stores nothing of a message's publisher: the Nats-Request-Info
// header the server puts on a message that crosses a service import is
// removed before the stream stores it. But the message crosses the
// store account on its way, and every subscriber of the store account
// whose subscription matches its subject receives it, with that header.
// The owners' account imports record, state, cursor and lock writes
// ($KV.fp_<w>.o.>, $KV.fp_<w>.s.>, $KV.fp_<w>.c.>, $KV.fp_<w>.l.>) with
// Share, so the server's header names the user and
// carries its JWT, whatever header the client sent (the server sets its
// own over it). fencepostd subscribes to those subjects and keeps, for
// each write it sees, who sent it, until the auditor meets the stored
// message (same subject, value and fencing headers) in the bucket stream.
// A write without the header comes from the store account itself
// (fencepostd, the operator).
//
// A write the subscription missed (a slow consumer, fencepostd not yet
// subscribed, a write older than it) has no known writer, and the auditor
// judges it by its content only.

// attributedKeys are the key prefixes whose writes carry their writer.
var attributedKeys = []string{wire.RecordPrefix, wire.StatePrefix, wire.CursorPrefix, wire.LockPrefix}

// attributed says whether the owners' service import of subject (w's)
// shares the requester's identity for the auditor.
func attributed(w, subject string) bool {
	for _, p := range attributedKeys {
		if subject == wire.KeySubject(w, p+">") {
			return true
		}
	}
	return false
}

// writer is who published one write.
type writer struct {
	user  string // the user's public key; "" for the store account's (fencepostd, the operator)
	node  string // the node the user is bound to (a node owner); "" for any other
	bound bool   // a node owner
	at    time.Time
}

func (w writer) String() string {
	switch {
	case w.user == "":
		return "the store account"
	case w.bound:
		return fmt.Sprintf("node owner %q (%s)", w.node, w.user)
	}
	return "user " + w.user
}

// writerWait is how long the auditor waits for the writer of a write the
// subscription has not delivered yet; writerKeep how long a write seen in
// flight waits for its stored message (one refused by the stream never
// comes).
const (
	writerWait = 500 * time.Millisecond
	writerKeep = 30 * time.Second
)

// writers are the writes fencepostd saw in flight and not yet met in the
// bucket stream, by fingerprint.
type writers struct {
	since time.Time // the subscription's start: writes stored before it have no known writer

	mu      sync.Mutex
	changed chan struct{} // closed and replaced at every write seen
	pending map[[32]byte][]writer
	n       int
	pruned  time.Time
	nodes   map[string]writer // by user: what its JWT says
}

// maxPendingWriters bounds the writes kept in flight; beyond it the
// oldest are forgotten (their writes are judged by content only).
const maxPendingWriters = 1 << 16

// fingerprintHeaders are the headers of a write its fingerprint takes:
// those the stream keeps of it that say what it is (its operation, batch
// and fence).
var fingerprintHeaders = []string{jsapi.HeaderKVOperation, jsapi.HeaderBatchID, fencing.HeaderExpectedSeq, fencing.HeaderExpectedSubject}

// fingerprint identifies a write by its key subject, value and
// fingerprintHeaders.
func fingerprint(subject string, hdr nats.Header, data []byte) [32]byte {
	h := sha256.New()
	h.Write([]byte(subject))
	for _, k := range fingerprintHeaders {
		h.Write([]byte{0})
		if hdr != nil {
			h.Write([]byte(hdr.Get(k)))
		}
	}
	h.Write([]byte{0})
	h.Write(data)
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// startWriters subscribes, in the store account, to the world's record and
// state writes.
func (d *Daemon) startWriters() error {
	ws := &writers{since: time.Now(), changed: make(chan struct{}), pending: map[[32]byte][]writer{}, nodes: map[string]writer{}}
	for _, p := range attributedKeys {
		sub, err := d.nc.Subscribe(wire.KeySubject(d.cfg.World, p+">"), ws.seen)
		if err != nil {
			return fmt.Errorf("auth: the writers' subscription: %w", err)
		}
		if err := sub.SetPendingLimits(1<<20, 256<<20); err != nil {
			return err
		}
	}
	d.writers, d.verdicts = ws, newVerdicts()
	return nil
}

// seen keeps the writer of one write seen in flight.
func (ws *writers) seen(m *nats.Msg) {
	now := time.Now()
	w := writer{at: now}
	if h := m.Header.Get(natsserver.ClientInfoHdr); h != "" {
		w = ws.identify(h)
		w.at = now
	}
	fp := fingerprint(m.Subject, m.Header, m.Data)
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.n >= maxPendingWriters {
		ws.prune(now, true)
	} else if now.Sub(ws.pruned) > writerKeep {
		ws.prune(now, false)
	}
	if ws.n >= maxPendingWriters {
		return // full of writes not yet stored: this one is judged by its content
	}
	ws.pending[fp] = append(ws.pending[fp], w)
	ws.n++
	close(ws.changed)
	ws.changed = make(chan struct{})
}

// identify reads the requester from the server's Nats-Request-Info: its
// user, and from its JWT (the server's copy of the one it authenticated)
// the node it is bound to.
func (ws *writers) identify(h string) writer {
	var ci natsserver.ClientInfo
	if err := json.Unmarshal([]byte(h), &ci); err != nil || ci.User == "" {
		return writer{user: "unknown"}
	}
	ws.mu.Lock()
	w, ok := ws.nodes[ci.User]
	ws.mu.Unlock()
	if ok {
		return w
	}
	w = writer{user: ci.User}
	if uc, err := jwt.DecodeUserClaims(ci.Jwt); err == nil && uc.Subject == ci.User {
		if node, ok := strings.CutPrefix(uc.Name, "fp-owner@"); ok && uc.Tags.Contains(tagRole+RoleNodeOwner) {
			w.node, w.bound = node, true
		}
	}
	ws.mu.Lock()
	ws.nodes[ci.User] = w
	ws.mu.Unlock()
	return w
}

// prune forgets the writes older than writerKeep, or, when full, than
// twice writerWait (a stored write is met within writerWait, unless the
// auditor lags). ws.mu is held.
func (ws *writers) prune(now time.Time, full bool) {
	ws.pruned = now
	cut := now.Add(-writerKeep)
	if full {
		cut = now.Add(-2 * writerWait)
	}
	for fp, list := range ws.pending {
		i := 0
		for i < len(list) && list[i].at.Before(cut) {
			i++
		}
		ws.n -= i
		if i == len(list) {
			delete(ws.pending, fp)
		} else {
			ws.pending[fp] = list[i:]
		}
	}
}

// writerOf is who wrote the stored message of subject with hdr and data,
// stored at created: the first write seen in flight with its fingerprint,
// waited for up to writerWait; false when not known.
func (ws *writers) writerOf(subject string, hdr nats.Header, data []byte, created time.Time) (writer, bool) {
	if ws == nil || created.Before(ws.since) {
		return writer{}, false
	}
	fp := fingerprint(subject, hdr, data)
	deadline := time.NewTimer(writerWait)
	defer deadline.Stop()
	for {
		ws.mu.Lock()
		if list := ws.pending[fp]; len(list) > 0 {
			w := list[0]
			if len(list) == 1 {
				delete(ws.pending, fp)
			} else {
				ws.pending[fp] = list[1:]
			}
			ws.n--
			ws.mu.Unlock()
			return w, true
		}
		changed := ws.changed
		ws.mu.Unlock()
		if time.Since(created) > writerKeep {
			return writer{}, false // an old write: not waited for
		}
		select {
		case <-changed:
		case <-deadline.C:
			return writer{}, false
		}
	}
}
