package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/pcgroups"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/internal/wire"
)

// The pcgroups side is what a NATS user picks for "each key handled by one
// member at a time, in order": orbit.go's partitioned consumer groups
// (github.com/synadia-io/orbit.go/pcgroups), set up as its README says for
// strictly ordered consumption:
//
//   - a stream whose subject transform puts the partition first in the
//     stored subject ({{partition(n,1)}} of the id's token), n the
//     group's members;
//   - a static group with n members, balanced (one partition each);
//   - each member's consumer with explicit acks, max ack pending 1 and an
//     ack wait of the run's ttl (its pinned TTL too, so that a dead
//     member instance's partitions move after the same time as a dead
//     owner's ids do); the handler double-acks, as the package's cg tool
//     does.
//
// The producers are the other sides': one subject per id, the same bodies
// and rates. In the scenarios with owner processes the members run in
// processes of their own (this executable, as ours' owners), each an
// instance of every member, so that every member has a hot standby in
// every other process (the README's high availability); the faults hit
// them as they hit ours' owners. In steady and fan-in each member is one
// instance in the bench's process, with a connection of its own.

// pcgGroupName is the static group's name on the side's stream.
const pcgGroupName = "bench"

// pcgBucket is the KV bucket where pcgroups keeps the static groups'
// configs (its own constant is not exported).
const pcgBucket = "static-consumer-groups"

// pcgSpec is what a member process (and the in-process members) need to
// know of the group.
type pcgSpec struct {
	Stream    string   `json:"stream"`
	Group     string   `json:"group"`
	Prefix    string   `json:"prefix"` // the posts' subjects: PREFIX.ID
	Members   []string `json:"members"`
	AckWaitMs int64    `json:"ack_wait_ms"`
}

// consumerConfig is the template of every member's consumer: strict
// per-key order (pcgroups' README: "max acks pending 1", explicit acks).
func (p pcgSpec) consumerConfig() jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 1, AckWait: time.Duration(p.AckWaitMs) * time.Millisecond}
}

// setupPcgroups is the pcgroups side: its stream and static group, its
// members (processes or in-process), producers publishing asynchronously
// as raw's do.
func setupPcgroups(ctx context.Context, c *client.Client, cfg Config, tag string, ids []string, url string, start time.Time) (_ *runner, err error) {
	s := newSide(PeerPcgroups, cfg, start, ids)
	r := &runner{s: s, errs: make(chan error, 16), stop: func() {}}
	defer func() {
		if err != nil {
			r.close()
		}
	}()
	js := c.JetStream()
	suffix := tag[len("bench-"):]
	n := cfg.PcgroupsMembers
	spec := pcgSpec{Stream: "PCG_" + suffix, Group: pcgGroupName, Prefix: "fpbench.pcg." + suffix, AckWaitMs: cfg.TTL.Milliseconds()}
	for i := range n {
		// Zero-padded: pcgroups gives the partitions to the members in
		// the order of their sorted names, so member i serves partition i.
		spec.Members = append(spec.Members, fmt.Sprintf("m%03d", i))
	}
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{
		Name: spec.Stream, Subjects: []string{spec.Prefix + ".*"}, Replicas: cfg.Replicas,
		SubjectTransform: &jetstream.SubjectTransformConfig{Source: spec.Prefix + ".*", Destination: fmt.Sprintf("{{partition(%d,1)}}.%s.{{wildcard(1)}}", n, spec.Prefix)},
	})
	if err != nil {
		return nil, fmt.Errorf("bench: create the pcgroups stream: %w", err)
	}
	r.clean = append(r.clean, removeWith(func(ctx context.Context) error { return js.DeleteStream(ctx, spec.Stream) }))
	_, bucketErr := js.KeyValue(ctx, pcgBucket)
	if _, err := pcgroups.CreateStatic(ctx, js, spec.Stream, spec.Group, uint(n), nil, spec.Members, nil); err != nil {
		return nil, fmt.Errorf("bench: create the pcgroups static group: %w", err)
	}
	r.clean = append(r.clean, removeWith(func(ctx context.Context) error {
		err := pcgroups.DeleteStatic(ctx, js, spec.Stream, spec.Group)
		if errors.Is(bucketErr, jetstream.ErrBucketNotFound) {
			removeEmptyBucket(ctx, js, pcgBucket) // the run made it
		}
		return err
	}))

	t := &pinTracker{js: js, spec: spec, cur: map[string]recState{}, members: map[int]string{}}
	var ps *procSet
	if cfg.withOwners() {
		ps = &procSet{
			cfg: cfg, s: s, peer: t, kinds: faultKinds(cfg),
			spec:  ownerSpec{URL: url, TTLms: cfg.TTL.Milliseconds(), Pcgroups: &spec},
			errs:  make(chan error, 16),
			procs: map[string]*proc{},
			gaps:  map[string][]*gapSample{},
		}
		r.stop = ps.stop
		s.takeovers = ps.nFaults.Load
		if err := ps.start(ctx); err != nil {
			return nil, err
		}
		r.during = ps.during
		go func() {
			for err := range ps.errs {
				r.errs <- err
			}
		}()
	} else {
		stop, err := pcgInProcess(ctx, c, cfg, t, s, r)
		if err != nil {
			return nil, err
		}
		r.stop = stop
	}
	publish := rawPublisher(ctx, js, spec.Prefix)
	r.send = func(id string, body []byte) (func() (uint64, error), error) { return publish(id, body) }
	// Warm-up, as ours': one message per id (number 0, not counted), then
	// wait until each was delivered. Not in fan-in and zipf, where taking
	// up new ids is part of the work.
	if cfg.Scenario != ScenarioFanIn && cfg.Scenario != ScenarioZipf {
		if err := pcgWarmUp(ctx, publish, cfg, ids, t); err != nil {
			return nil, err
		}
	}
	r.final = func(ctx context.Context, rep *Report) error {
		p := &PeerReport{Name: PeerPcgroups, Members: n, Partitions: n, MaxAckPending: spec.consumerConfig().MaxAckPending, AckWaitMs: spec.AckWaitMs}
		if ps != nil {
			p.Processes = cfg.Owners
			s.ownersCPU = time.Duration(ps.cpu.Load()) // every member process exited: stop ran
		}
		drained, err := pcgFinalDrain(ctx, js, cfg, t, s)
		if err != nil {
			return err
		}
		p.FinalDrained = drained
		if err := pcgLost(ctx, js, spec, s, ids, p); err != nil {
			return err
		}
		if ps != nil {
			gaps := ps.gapStats()
			all := gaps["all"]
			p.Takeovers = all.Faults
			p.TakeoverGapP50, p.TakeoverGapP99, p.TakeoverGapMax = all.P50, all.P99, all.Max
			delete(gaps, "all")
			p.TakeoverGaps = gaps
			ps.mu.Lock()
			p.Faults = append([]Fault(nil), ps.faults...)
			ps.mu.Unlock()
			p.UnplannedExits = ps.unplanned.Load()
		}
		rep.Pcgroups = p
		return nil
	}
	return r, nil
}

// peerFigures fills the pcgroups side's figures in, once its rounds are
// over and its final drain ran (rep.Pcgroups set).
func peerFigures(rep *Report, s *side, ids []string) {
	p := rep.Pcgroups
	if p == nil {
		return
	}
	p.Sent, p.Delivered = s.sent, s.delivered
	p.SendThroughput, p.Throughput = s.sendRate(), s.deliverRate()
	if rep.RawThroughput > 0 {
		p.Ratio = round(p.Throughput/rep.RawThroughput, 3)
	}
	if p.Throughput > 0 {
		rep.RatioPcgroups = round(rep.Throughput/p.Throughput, 3)
	}
	p.LatencyP50, p.LatencyP99, p.LatencyP999, p.LatencyMax = s.percentiles()
	p.CPUPerMsgUs, p.RequestsPerMsg = s.costPerMsg()
	p.MembersCPUPerMsgUs = s.ownersCPUPerMsg()
	p.DuplicatesPct = s.duplicatesPct()
	o := s.checkOrder(ids)
	p.OrderChecked, p.OrderViolations, p.OrderExamples = o.checked, o.violations, o.examples
}

// pcgLost sorts the messages posted and never delivered once the final
// drain ended: those still waiting for their member (above its consumer's
// ack floor: the drain ran out of time) are Undelivered, the others
// (acknowledged with no delivery reported) Lost.
func pcgLost(ctx context.Context, js jetstream.JetStream, spec pcgSpec, s *side, ids []string, p *PeerReport) error {
	_, n := s.lostMsgs(0)
	if n == 0 {
		return nil
	}
	missing, _ := s.lostMsgs(int(n))
	floors := make([]uint64, len(spec.Members))
	for i, m := range spec.Members {
		c, err := js.Consumer(ctx, spec.Stream, spec.Group+"-"+m) // pcgroups' name of a member's consumer
		if err != nil {
			return fmt.Errorf("bench: pcgroups member %s's consumer: %w", m, err)
		}
		floors[i] = c.CachedInfo().AckFloor.Stream
	}
	for _, m := range missing {
		if m.seq > floors[wire.Partition(ids[m.idx], len(spec.Members))] {
			p.Undelivered++
			continue
		}
		if p.Lost++; len(p.LostExamples) < maxLostExamples {
			p.LostExamples = append(p.LostExamples, fmt.Sprintf("%q message %d at stream sequence %d, under its member's ack floor %d", ids[m.idx], m.n, m.seq, floors[wire.Partition(ids[m.idx], len(spec.Members))]))
		}
	}
	return nil
}

// removeEmptyBucket removes the KV bucket name if it holds no key.
func removeEmptyBucket(ctx context.Context, js jetstream.JetStream, name string) {
	kv, err := js.KeyValue(ctx, name)
	if err != nil {
		return
	}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return
	}
	for range keys.Keys() {
		_ = keys.Stop()
		return
	}
	_ = js.DeleteKeyValue(ctx, name)
}

// pcgInProcess starts one instance of each member in this process, each
// with a connection of its own (steady and fan-in: as ours' workers), and
// returns what stops them.
func pcgInProcess(ctx context.Context, c *client.Client, cfg Config, t *pinTracker, s *side, r *runner) (func(), error) {
	var joined []*pcgMembers
	stop := func() {
		for _, m := range joined {
			m.stop()
		}
	}
	for i := range t.spec.Members {
		nc, err := c.Conn().Opts.Connect()
		if err != nil {
			stop()
			return nil, fmt.Errorf("bench: a pcgroups member's connection: %w", err)
		}
		r.clean = append(r.clean, nc.Close)
		js, err := jetstream.New(nc)
		if err != nil {
			stop()
			return nil, err
		}
		m, err := pcgJoin(ctx, js, t.spec, []int{i}, t.handler(s, fmt.Sprintf("member-%d", i)))
		if err != nil {
			stop()
			return nil, err
		}
		joined = append(joined, m)
	}
	return stop, nil
}

// pcgWarmUp posts one message (number 0) to every id and waits until each
// was delivered.
func pcgWarmUp(ctx context.Context, publish sender, cfg Config, ids []string, t *pinTracker) error {
	for i, id := range ids {
		b := make([]byte, max(cfg.BodySize, 20))
		binary.BigEndian.PutUint32(b[16:20], uint32(i))
		wait, err := publish(id, b)
		if err == nil {
			_, err = wait()
		}
		if err != nil {
			return fmt.Errorf("bench: pcgroups warm-up send: %w", err)
		}
	}
	if err := pollUntil(ctx, 2*time.Minute, func() bool { return t.seen() >= len(ids) }); err != nil {
		return errors.New("bench: the pcgroups members did not deliver every id's warm-up within 2 minutes")
	}
	return nil
}

// pcgFinalDrain delivers, once the members stopped, what they left: an
// instance of every member in this process ("bench-final"), pinned once
// the stopped instances' pins lapse, until every message was delivered or
// Settle passed; it returns how many it delivered for the first time.
func pcgFinalDrain(ctx context.Context, js jetstream.JetStream, cfg Config, t *pinTracker, s *side) (int64, error) {
	if s.allDelivered() {
		return 0, nil
	}
	before := s.distinct.Load()
	all := make([]int, len(t.spec.Members))
	for i := range all {
		all[i] = i
	}
	m, err := pcgJoin(ctx, js, t.spec, all, t.handler(s, "bench-final"))
	if err != nil {
		return 0, fmt.Errorf("bench: pcgroups final drain: %w", err)
	}
	_ = pollUntil(ctx, 2*cfg.TTL+cfg.Settle, s.allDelivered)
	m.stop()
	return s.distinct.Load() - before, nil
}

// pcgDelivery is what a member's handler reads of a message.
type pcgDelivery struct {
	id           string
	seq, n, sent uint64
}

func parsePcgMsg(m jetstream.Msg, prefix string) pcgDelivery {
	// pcgroups hands the subject without its partition token.
	d := pcgDelivery{id: strings.TrimPrefix(m.Subject(), prefix+".")}
	if md, err := m.Metadata(); err == nil {
		d.seq = md.Sequence.Stream
	}
	if b := m.Data(); len(b) >= 16 {
		d.n, d.sent = binary.BigEndian.Uint64(b[0:8]), binary.BigEndian.Uint64(b[8:16])
	}
	return d
}

// pcgAck acknowledges a handled message and waits for the server to
// confirm it (pcgroups' cg tool does the same).
func pcgAck(m jetstream.Msg) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = m.DoubleAck(ctx)
}

// pcgMembers are instances of members of the group, joined together.
type pcgMembers struct {
	ccs    []pcgroups.ConsumerGroupConsumeContext
	done   chan error         // one value per instance, when it ends
	ended  sync.WaitGroup     // the instances that did not end yet
	cancel context.CancelFunc // of the context the instances joined with
}

// pcgJoin joins the group as each of the members (indexes into
// spec.Members), handler(i) handling member i's messages.
//
// The context StaticConsume is given must last as long as the instance:
// pcgroups watches the group's config with it, and an instance whose
// watcher ended (its channel closed) spins on it, a CPU each, until it is
// stopped (v0.2.2). So the instances join with a context of their own,
// ended by stop once they stopped; the caller's ctx only bounds the join.
func pcgJoin(ctx context.Context, js jetstream.JetStream, spec pcgSpec, members []int, handler func(member int) func(jetstream.Msg)) (*pcgMembers, error) {
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	m := &pcgMembers{done: make(chan error, len(members)), cancel: cancel}
	for _, i := range members {
		if err := ctx.Err(); err != nil {
			m.stop()
			return nil, err
		}
		cc, err := pcgroups.StaticConsume(wctx, js, spec.Stream, spec.Group, spec.Members[i], handler(i), spec.consumerConfig())
		if err != nil {
			m.stop()
			return nil, fmt.Errorf("join the pcgroups group as %s: %w", spec.Members[i], err)
		}
		m.ccs = append(m.ccs, cc)
		m.ended.Go(func() { m.done <- <-cc.Done() }) // done has room for every instance
	}
	return m, nil
}

// stop stops every instance and waits (5 s at most) until they ended.
func (m *pcgMembers) stop() {
	defer m.cancel()
	for _, cc := range m.ccs {
		cc.Stop()
	}
	ended := make(chan struct{})
	go func() { m.ended.Wait(); close(ended) }()
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
	}
}

// pinTracker follows who delivers what on the pcgroups side, from the
// delivery reports: per id the process (or in-process member) that
// delivered it last, with an epoch of its own that rises at each change
// of process (pcgroups has none: the takeover gaps and the victims of the
// faults are read from it), and per member the process that delivered its
// last message (its pinned instance, as far as the reports show).
type pinTracker struct {
	js   jetstream.JetStream
	spec pcgSpec

	mu      sync.Mutex
	cur     map[string]recState
	members map[int]string
}

// delivered records a delivery of id by node, for member (-1: not
// known), and returns the id's epoch.
func (t *pinTracker) delivered(node, id string, member int) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.cur[id]
	if !r.held || r.node != node {
		r = recState{epoch: r.epoch + 1, node: node, held: true}
		t.cur[id] = r
	}
	if member >= 0 {
		t.members[member] = node
	}
	return r.epoch
}

// holders is, per id, the process that delivered it last.
func (t *pinTracker) holders() map[string]recState {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]recState, len(t.cur))
	for id, r := range t.cur {
		out[id] = r
	}
	return out
}

// seen is how many ids were delivered at least once.
func (t *pinTracker) seen() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.cur)
}

// stepDown unpins the members whose last message node delivered
// (pcgroups.StaticMemberStepDown): the seize fault of the pcgroups side.
func (t *pinTracker) stepDown(ctx context.Context, node string) error {
	t.mu.Lock()
	var members []int
	for m, n := range t.members {
		if n == node {
			members = append(members, m)
		}
	}
	t.mu.Unlock()
	for _, m := range members {
		if err := pcgroups.StaticMemberStepDown(ctx, t.js, t.spec.Stream, t.spec.Group, t.spec.Members[m]); err != nil {
			return err
		}
	}
	return nil
}

// handler is the in-process members' handler (node: who they are).
func (t *pinTracker) handler(s *side, node string) func(member int) func(jetstream.Msg) {
	return func(member int) func(jetstream.Msg) {
		return func(m jetstream.Msg) {
			at := time.Now().UnixNano()
			d := parsePcgMsg(m, t.spec.Prefix)
			t.delivered(node, d.id, member)
			idx, ok := s.ids[d.id]
			if !ok {
				idx = -1
			}
			s.deliverAt(idx, d.n, int64(d.sent), at)
			pcgAck(m)
		}
	}
}
