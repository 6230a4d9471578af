package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencepost/fencepost/internal/inbox"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/world"
)

// The consumer gate of fencepostd --auth (docs/security.md,
// "Consumers").
//
// Owners create consumers on the world's streams (a drain of a deep
// mailbox, a worker's feed, a watch), and a consumer's creation carries
// what matters in its body: a deliver subject, a durable name, an
// inactivity threshold. Subject permissions cannot see a body, and the
// consumers are all the store account's: JetStream's consumer limit is
// one per stream for every user together, so one owner could create them
// all (about 10,000) and stop every worker from starting. So the owners'
// account imports the consumer create and delete requests from fencepostd
// instead of from JetStream (renamed: the client still sends
// $JS.API.CONSUMER.CREATE.<stream>...), with the requester's identity
// (the import shares it: the server sets Nats-Request-Info, whatever the
// client sent). fencepostd refuses, answering as JetStream would:
//
//   - a durable consumer, or one with an inactivity threshold above the
//     world's max_ttl and consumerIdle (a consumer kept at rest; the
//     reaper removes those made otherwise);
//   - a deliver subject outside the requester's own inbox, and a deliver
//     group;
//   - a consumer beyond the user's limit (MaxConsumersPerUser), or beyond
//     the owners' share of the stream's limit (a reserve stays for
//     fencepostd and the operator);
//   - a change or a delete of a consumer another user created;
//
// and passes the rest to JetStream as its own request, with the creator
// in the consumer's metadata, and the answer back. Consumers are counted
// from JetStream's answers and its deletion advisories.

// gatePrefix begins the subjects of the gate in the store account:
// $FP.GATE.<w>.CREATE.<stream>..., $FP.GATE.<w>.DELETE.<stream>.<name>.
const gatePrefix = "$FP.GATE."

// creatorKey is the consumer metadata naming the user that created it
// through the gate.
const creatorKey = "fencepost.creator"

// consumerReserve is how many consumers of each stream the owners leave to
// fencepostd and the operator.
const consumerReserve = 100

// DefaultMaxConsumersPerUser is auth_max_consumers_per_user's default.
const DefaultMaxConsumersPerUser = 256

// gateSubject is the gate's subject in the store account for a consumer
// request subject ($JS.API.CONSUMER.CREATE.<stream>...), and whether the
// request goes through the gate.
func gateSubject(w, subject string) (string, bool) {
	for _, op := range []string{"CREATE.", "DELETE."} {
		if rest, ok := strings.CutPrefix(subject, "$JS.API.CONSUMER."+op); ok {
			return gatePrefix + w + "." + op + rest, true
		}
	}
	return "", false
}

// gate is fencepostd's consumer gate of one world.
type gate struct {
	d        *Daemon
	w        string
	perUser  int
	perOwner int // the owners' share of each stream's consumers; 0: none
	count    *prometheus.CounterVec

	mu      sync.Mutex
	creator map[string]string         // stream/consumer -> user
	byUser  map[string]map[string]int // stream -> user -> consumers
	total   map[string]int            // stream -> consumers of users
	maxTTL  time.Duration
}

// startGate subscribes the gate, before clients can create consumers; its
// counts are filled from the streams' consumers once the world is ready.
func (d *Daemon) startGate() error {
	perStream := d.cfg.AuthMaxConsumers
	g := &gate{d: d, w: d.cfg.World, perUser: d.cfg.AuthMaxConsumersPerUser, count: d.refusalsCount(),
		creator: map[string]string{}, byUser: map[string]map[string]int{}, total: map[string]int{}}
	if perStream > 0 {
		g.perOwner = max(1, perStream-consumerReserve)
	}
	if _, err := d.nc.QueueSubscribe(gatePrefix+d.cfg.World+".>", "fencepost-gate", func(m *nats.Msg) { go g.serve(m) }); err != nil {
		return fmt.Errorf("auth: the consumer gate: %w", err)
	}
	if _, err := d.nc.Subscribe("$JS.EVENT.ADVISORY.CONSUMER.DELETED.*.*", g.deleted); err != nil {
		return fmt.Errorf("auth: the consumer gate: %w", err)
	}
	d.gate = g
	return nil
}

// refusalsCount counts what the gate refused, on the registry /metrics
// serves.
func (d *Daemon) refusalsCount() *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fencepost_consumers_refused_total",
		Help: "Consumer creations and deletions fencepostd --auth's consumer gate refused an owner (reason: durable, at_rest, deliver_subject, deliver_group, user_limit, owners_limit, not_creator); docs/security.md.",
	}, []string{"world", "reason"})
	if reg, ok := d.gather.(prometheus.Registerer); ok {
		if err := reg.Register(c); err != nil {
			if are, ok := err.(prometheus.AlreadyRegisteredError); ok {
				if existing, ok := are.ExistingCollector.(*prometheus.CounterVec); ok {
					return existing
				}
			}
		}
	}
	return c
}

// load counts the consumers the streams have, by their creators, and
// reads the world's max_ttl.
func (g *gate) load(ctx context.Context) {
	if w, err := world.Open(ctx, g.d.js, g.w); err == nil {
		g.mu.Lock()
		g.maxTTL = w.Config.MaxTTL
		g.mu.Unlock()
	}
	for _, s := range []string{wire.MailboxStream(g.w), wire.BucketStream(g.w)} {
		st, err := g.d.js.Stream(ctx, s)
		if err != nil {
			continue
		}
		list := st.ListConsumers(ctx)
		for ci := range list.Info() {
			if user := ci.Config.Metadata[creatorKey]; user != "" {
				g.add(s, ci.Name, user)
			}
		}
	}
}

func (g *gate) add(stream, name, user string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	key := stream + "/" + name
	if _, ok := g.creator[key]; ok {
		return
	}
	g.creator[key] = user
	if g.byUser[stream] == nil {
		g.byUser[stream] = map[string]int{}
	}
	g.byUser[stream][user]++
	g.total[stream]++
}

func (g *gate) remove(stream, name string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	key := stream + "/" + name
	user, ok := g.creator[key]
	if !ok {
		return
	}
	delete(g.creator, key)
	if g.byUser[stream][user]--; g.byUser[stream][user] <= 0 {
		delete(g.byUser[stream], user)
	}
	g.total[stream]--
}

// deleted follows JetStream's deletion advisories: a consumer deleted by
// its inactivity threshold, by its creator or by the operator.
func (g *gate) deleted(m *nats.Msg) {
	toks := strings.Split(m.Subject, ".")
	g.remove(toks[len(toks)-2], toks[len(toks)-1])
}

// gateError is what the gate answers for a refusal: a JetStream API error,
// as JetStream would give it, so that every client reports it as it does
// JetStream's own.
type gateError struct {
	code, errCode int
	reason, desc  string
}

func (g *gate) refuse(m *nats.Msg, typ string, e gateError, args ...any) {
	g.count.WithLabelValues(g.w, e.reason).Inc()
	g.d.log.Warn("consumer gate: refused", append([]any{"world", g.w, "reason", e.reason, "subject", m.Subject, "why", e.desc}, args...)...)
	b, _ := json.Marshal(map[string]any{"type": typ, "error": map[string]any{"code": e.code, "err_code": e.errCode, "description": "fencepost: " + e.desc + " (docs/security.md, Consumers)"}})
	_ = m.Respond(b)
}

const (
	createType = "io.nats.jetstream.api.v1.consumer_create_response"
	deleteType = "io.nats.jetstream.api.v1.consumer_delete_response"
)

// serve judges one request of the gate.
func (g *gate) serve(m *nats.Msg) {
	rest := strings.TrimPrefix(m.Subject, gatePrefix+g.w+".")
	op, rest, _ := strings.Cut(rest, ".")
	stream, _, _ := strings.Cut(rest, ".")
	typ := createType
	if op == "DELETE" {
		typ = deleteType
	}
	var ci natsserver.ClientInfo
	if err := json.Unmarshal([]byte(m.Header.Get(natsserver.ClientInfoHdr)), &ci); err != nil || ci.User == "" {
		g.refuse(m, typ, gateError{400, 10012, "unknown", "a consumer request without the requester's identity"})
		return
	}
	if stream != wire.MailboxStream(g.w) && stream != wire.BucketStream(g.w) {
		g.refuse(m, typ, gateError{400, 10012, "stream", fmt.Sprintf("stream %q is not world %q's", stream, g.w)}, "user", ci.User)
		return
	}
	if op == "DELETE" {
		name := rest[len(stream)+1:]
		g.mu.Lock()
		creator := g.creator[stream+"/"+name]
		g.mu.Unlock()
		if creator != ci.User {
			g.refuse(m, typ, gateError{403, 10012, "not_creator", fmt.Sprintf("consumer %q was not created by this user", name)}, "user", ci.User)
			return
		}
		g.forward(m, "$JS.API.CONSUMER.DELETE."+rest, m.Data, func([]byte) { g.remove(stream, name) })
		return
	}
	var req natsserver.CreateConsumerRequest
	if err := json.Unmarshal(m.Data, &req); err != nil {
		g.forward(m, "$JS.API.CONSUMER.CREATE."+rest, m.Data, nil) // JetStream says what is wrong
		return
	}
	c := &req.Config
	name := c.Name
	if after, ok := strings.CutPrefix(rest, stream+"."); ok {
		name, _, _ = strings.Cut(after, ".")
	}
	g.mu.Lock()
	maxTTL := g.maxTTL
	users, total := g.byUser[stream][ci.User], g.total[stream]
	existing, exists := g.creator[stream+"/"+name]
	g.mu.Unlock()
	idle := max(maxTTL, consumerIdle) + auditMargin
	own := inbox.ForUser(ci.User) + "."
	switch {
	case c.Durable != "":
		g.refuse(m, typ, gateError{400, 10012, "durable", "a durable consumer would be kept at rest: fencepost makes none"}, "user", ci.User)
	case c.InactiveThreshold < 0 || c.InactiveThreshold > idle:
		// 0: JetStream's default for a consumer that is not durable (5 s).
		g.refuse(m, typ, gateError{400, 10012, "at_rest", fmt.Sprintf("inactive threshold %v: give one of at most %v", c.InactiveThreshold, idle)}, "user", ci.User)
	case c.DeliverSubject != "" && !strings.HasPrefix(c.DeliverSubject, own):
		g.refuse(m, typ, gateError{400, 10012, "deliver_subject", fmt.Sprintf("deliver subject %q is not under the requester's own inbox %s", c.DeliverSubject, own)}, "user", ci.User)
	case c.DeliverGroup != "":
		g.refuse(m, typ, gateError{400, 10012, "deliver_group", "a deliver group: fencepost uses none"}, "user", ci.User)
	case exists && existing != ci.User:
		g.refuse(m, typ, gateError{403, 10012, "not_creator", fmt.Sprintf("consumer %q was created by another user", name)}, "user", ci.User)
	case !exists && g.perUser > 0 && users >= g.perUser:
		g.refuse(m, typ, gateError{400, 10012, "user_limit", fmt.Sprintf("this user has %d consumers on %s, its limit (auth_max_consumers_per_user)", users, stream)}, "user", ci.User)
	case !exists && g.perOwner > 0 && total >= g.perOwner:
		g.refuse(m, typ, gateError{400, 10012, "owners_limit", fmt.Sprintf("the owners have %d consumers on %s, their share of auth_max_consumers", total, stream)}, "user", ci.User)
	default:
		if c.Metadata == nil {
			c.Metadata = map[string]string{}
		}
		c.Metadata[creatorKey] = ci.User
		body, err := json.Marshal(req)
		if err != nil {
			g.refuse(m, typ, gateError{500, 10012, "unknown", err.Error()})
			return
		}
		g.forward(m, "$JS.API.CONSUMER.CREATE."+rest, body, func(answer []byte) {
			var r struct {
				Name  string          `json:"name"`
				Error json.RawMessage `json:"error"`
			}
			if json.Unmarshal(answer, &r) == nil && r.Error == nil && r.Name != "" {
				g.add(stream, r.Name, ci.User)
			}
		})
	}
}

// forward sends the request to JetStream as fencepostd's own and the answer
// back to the requester, after done has read it.
func (g *gate) forward(m *nats.Msg, subject string, body []byte, done func([]byte)) {
	ctx, cancel := context.WithTimeout(g.d.stopCtx, 5*time.Second)
	defer cancel()
	a, err := g.d.nc.RequestWithContext(ctx, subject, body)
	if err != nil {
		g.d.log.Warn("consumer gate: JetStream did not answer", "world", g.w, "subject", subject, "err", err)
		return // the requester times out, as without the gate
	}
	if done != nil {
		done(a.Data)
	}
	_ = m.Respond(a.Data)
}

// gateLoop counts the consumers the world's streams have once the world is
// ready, and reads its max_ttl again every consumerSweep.
func (d *Daemon) gateLoop(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return nil
	case <-d.readyCh:
	}
	d.gate.load(ctx)
	t := time.NewTicker(consumerSweep)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if w, err := world.Open(ctx, d.js, d.cfg.World); err == nil {
				d.gate.mu.Lock()
				d.gate.maxTTL = w.Config.MaxTTL
				d.gate.mu.Unlock()
			}
		}
	}
}
