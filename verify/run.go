package verify

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/ownership"
	"github.com/fencepost/fencepost/queue"
	"github.com/fencepost/fencepost/testkit/history"
	"github.com/fencepost/fencepost/worker"
	"github.com/fencepost/fencepost/world"
)

// operatorNode is the node of Run's forced seizes.
const operatorNode = "verify-operator"

// Result is one verify run: what it did and its verdict.
type Result struct {
	Recorded
	Verdict Verdict
}

// run is the state of one Run.
type run struct {
	cfg   Config
	admin *client.Client // direct: setup, seizes, the follower, the final drain, cleanup
	w     *client.World
	ids   []string
	rec   *history.Recorder
	ct    *ctLog // calls and timers
	rep   *commitLog
	ps    proxies
	under Conn // how the clients under test connect (through the proxies with cut)
	own   *owners

	loadEnd atomic.Int64 // when the load stops, unix ns; 0 until known

	mu        sync.Mutex
	faults    []FaultEvent
	collected bool
}

// Run runs verify against the deployment of cfg.Conn: see the package
// doc. It returns the run's history and verdict; an error when the run
// could not be made (a refused configuration, wrapping ErrInvalidConfig,
// creates nothing). Its world is removed before it returns, whatever
// happened; when ctx ends the run stops early and returns ctx's error.
func Run(ctx context.Context, cfg Config) (res *Result, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	r := &run{cfg: cfg, rec: history.NewRecorder(), ct: newCTLog(), rep: &commitLog{}}
	for i := range cfg.IDs {
		r.ids = append(r.ids, fmt.Sprintf("v-%d", i))
	}
	if r.admin, err = cfg.Conn.connect(cfg.Log); err != nil {
		return nil, err
	}
	defer r.admin.Close()
	name, err := r.pickWorld(ctx)
	if err != nil {
		return nil, err
	}
	removed := false
	remove := func() error {
		if removed {
			return nil
		}
		removed = true
		if err := r.removeWorld(name); err != nil {
			return err
		}
		cfg.Progress("world %s removed", name)
		return nil
	}
	defer func() { err = errors.Join(err, remove()) }() // also when createWorld or a panic ends the run
	replicas, err := r.createWorld(ctx, name)
	if err != nil {
		return nil, err
	}
	partitions, shards := r.w.Config.Partitions, r.w.Config.Shards
	switch {
	case shards > 0:
		cfg.Progress("world %s created (replicas %d, shards %d)", name, replicas, shards)
	case partitions > 0:
		cfg.Progress("world %s created (replicas %d, partitions %d)", name, replicas, partitions)
	default:
		cfg.Progress("world %s created (replicas %d)", name, replicas)
	}
	res = &Result{Recorded: Recorded{Meta: Meta{World: name, Replicas: replicas, Partitions: partitions, Shards: shards, Started: time.Now(), Duration: cfg.Duration, IDs: cfg.IDs,
		Owners: cfg.Owners, TTL: cfg.TTL, Faults: slices.Clone(cfg.Faults)}}}
	err = r.exercise(ctx, res)
	res.Meta.Elapsed = time.Since(res.Meta.Started)
	// The world goes before the check: the check needs no server, and
	// may take a while.
	if rerr := remove(); rerr != nil || err != nil {
		return res, errors.Join(err, rerr)
	}
	cfg.Progress("check")
	res.Verdict = Check(&res.Recorded)
	return res, nil
}

// exercise runs the owners, producers, clients and faults and the final
// drain, and puts the history into res (also when it ends early).
func (r *run) exercise(ctx context.Context, res *Result) error {
	name := res.Meta.World
	fol, err := followBucket(ctx, r.admin.JetStream(), name, r.w.Config.Shards)
	if err != nil {
		return err
	}
	defer fol.stop()
	r.under = r.cfg.Conn
	if slices.Contains(r.cfg.Faults, FaultCut) {
		if r.ps, r.under, err = startProxies(r.cfg.Conn); err != nil {
			return err
		}
		defer r.ps.close()
	}
	r.own = startOwners(r.cfg, ownerSpec{Conn: r.under, World: name, TTLms: r.cfg.TTL.Milliseconds(), IDs: r.ids}, r.rec, r.ct, r.rep)
	ownersStopped := false
	defer func() {
		if !ownersStopped {
			r.own.stop(5 * time.Second)
		}
	}()
	load, err := r.startLoad(ctx, name)
	if err != nil {
		return err
	}
	defer load.stop()
	// What was recorded goes into res also when the run ends early (an
	// interrupt): the history file keeps it.
	defer r.collect(res, fol, load)
	if !pollUntil(ctx, r.cfg.Start, func() bool { _, _, n := r.rec.Counts(); return n > 0 }) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		starts, exits, errs := r.own.summary()
		return fmt.Errorf("verify: no owner delivered a message within %v (%d owner processes started; how they ended: %v; report errors: %v; the last one's stderr: %q)",
			r.cfg.Start, starts, exits, errs, r.own.lastStderr())
	}
	r.cfg.Progress("owners deliver; faults for %v: %v", r.cfg.Duration, r.cfg.Faults)
	end := time.Now().Add(r.cfg.Duration)
	r.loadEnd.Store(end.UnixNano())
	r.injectFaults(ctx, end)
	load.stop()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	pollUntil(ctx, 2*r.cfg.TTL+5*time.Second, func() bool { return r.rec.Undelivered() == 0 && r.ct.waiting() == 0 })
	r.own.stop(5 * time.Second)
	ownersStopped = true
	r.cfg.Progress("final drain")
	res.Meta.Drained = r.finalDrain(ctx)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	res.Dead, res.Meta.DeadRead = r.deadLetters(ctx)
	res.Meta.FollowerCurrent = r.catchUp(ctx, fol, name)
	r.collect(res, fol, load)
	return nil
}

// collect puts the history recorded so far into res (once).
func (r *run) collect(res *Result, fol *follower, l *load) {
	if r.collected {
		return
	}
	r.collected = true
	h := r.rec.History()
	commits, pending, unfenced, cov := fol.commits(r.rep.all(), h.Deliveries)
	h.Commits = commits
	res.History, res.Pending, res.Unfenced, res.Coverage = h, pending, unfenced, cov
	res.OwnerStarts, res.OwnerExits, res.OwnerErrors = r.own.summary()
	res.FaultEvents = r.faultEvents()
	res.UnknownSends = l.unknown.Load()
	res.Calls, res.Timers, res.Stored = r.ct.snapshot()
}

// deadLetters are the dead letters of the run's ids; false if they could
// not be read.
func (r *run) deadLetters(ctx context.Context) ([]DeadLetter, bool) {
	var out []DeadLetter
	for _, id := range r.ids {
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		dls, err := r.w.Mailboxes.DeadLetters(dctx, id, 0)
		cancel()
		if err != nil {
			r.cfg.Log.Warn("verify: read the dead letters", "id", id, "error", err)
			return out, false
		}
		for _, dl := range dls {
			out = append(out, DeadLetter{ID: id, Seq: dl.MailboxSeq})
		}
	}
	return out, true
}

// ErrWorldLeft is wrapped by Run's error when it could not remove its
// world.
var ErrWorldLeft = errors.New("verify: world not removed")

// NewWorldName is a new scratch world name: verify-<8 hex digits>.
func NewWorldName() string {
	b := make([]byte, 4)
	_, _ = crand.Read(b)
	return "verify-" + hex.EncodeToString(b)
}

// pickWorld is the configured world or a new verify-<random> name; it
// refuses a world that exists (Run never touches another world).
func (r *run) pickWorld(ctx context.Context) (string, error) {
	for range 5 {
		name := r.cfg.World
		if name == "" {
			name = NewWorldName()
		}
		if err := wire.ValidateWorld(name); err != nil {
			return "", fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
		octx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := world.Open(octx, r.admin.JetStream(), name)
		cancel()
		switch {
		case errors.Is(err, world.ErrUnknownWorld):
			return name, nil
		case err != nil:
			return "", fmt.Errorf("verify: look for world %q: %w", name, err)
		case r.cfg.World != "":
			return "", fmt.Errorf("verify: world %q exists; verify runs on a world of its own", name)
		}
	}
	return "", errors.New("verify: no free world name")
}

// createWorld creates the scratch world: R3 when the deployment takes it
// (cfg.Replicas 0), else R1; or the replicas asked for. Its partitions
// are those fencepost world add gives a world of those replicas
// (world.PartitionsFor: 64 on one, none on more), so that verify runs
// the path a new world of the deployment takes; a sharded one
// (cfg.Shards) has none.
func (r *run) createWorld(ctx context.Context, name string) (int, error) {
	replicas := r.cfg.Replicas
	auto := replicas == 0
	switch {
	case auto && r.admin.Conn().ConnectedClusterName() == "":
		replicas = 1 // a server of no cluster
	case auto:
		replicas = 3
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		wcfg := world.Config{Replicas: replicas, MinTTL: 100 * time.Millisecond, Partitions: world.PartitionsFor(replicas)}
		if r.cfg.Shards > 0 {
			wcfg.Partitions, wcfg.Shards = 0, r.cfg.Shards // a sharded world has no partitions
		}
		octx, cancel := context.WithTimeout(ctx, 30*time.Second)
		w, err := r.admin.CreateWorld(octx, name, wcfg)
		cancel()
		if err == nil {
			r.w = w
			return replicas, nil
		}
		var apiErr *jetstream.APIError
		code := 0
		if errors.As(err, &apiErr) {
			code = int(apiErr.ErrorCode)
		}
		_ = r.removeWorld(name) // a half-made world
		switch {
		case ctx.Err() != nil:
			return 0, ctx.Err()
		case auto && replicas == 3 && code == 10074: // replicas > 1 not supported in non-clustered mode
			replicas = 1
		case auto && replicas == 3 && (code == 10005 || code == 10023) && time.Now().After(deadline):
			// No 3 peers for the placement (a smaller cluster, or
			// members down): R1.
			replicas = 1
		case code == 10005 && time.Now().Before(deadline): // a cluster still forming
			sleepCtx(ctx, 200*time.Millisecond)
		default:
			return 0, fmt.Errorf("verify: create world %q (replicas %d): %w", name, replicas, err)
		}
	}
}

// removeWorld deletes the scratch world's three streams by name (its
// mailboxes, its bucket, its timers), and nothing else.
func (r *run) removeWorld(name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js := r.admin.JetStream()
	var errs []error
	if err := js.DeleteStream(ctx, wire.MailboxStream(name)); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		errs = append(errs, err)
	}
	if err := js.DeleteStream(ctx, wire.BucketStream(name)); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		errs = append(errs, err)
	}
	if err := js.DeleteStream(ctx, wire.TimerStream(name)); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %q (remove it with `fencepost world rm %s --yes`): %w", ErrWorldLeft, name, name, errors.Join(errs...))
	}
	return nil
}

func (r *run) note(ev FaultEvent) {
	ev.At = time.Now()
	r.mu.Lock()
	r.faults = append(r.faults, ev)
	r.mu.Unlock()
	msg := "fault " + ev.Kind
	for _, kv := range [][2]string{{"node", ev.Node}, {"id", ev.ID}, {"", ev.Note}} {
		switch {
		case kv[1] == "":
		case kv[0] == "":
			msg += " (" + kv[1] + ")"
		default:
			msg += " " + kv[0] + "=" + kv[1]
		}
	}
	r.cfg.Progress("%s", msg)
}

func (r *run) faultEvents() []FaultEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.faults)
}

// injectFaults cycles through the configured faults, one every gap,
// until end (the last one at least a gap before it, so that its
// takeovers happen while mail still comes).
func (r *run) injectFaults(ctx context.Context, end time.Time) {
	gap := max(r.cfg.TTL*3/2, time.Second)
	if len(r.cfg.Faults) == 0 {
		sleepCtx(ctx, time.Until(end))
		return
	}
	for i := 0; ; i++ {
		if time.Now().Add(2 * gap).After(end) {
			sleepCtx(ctx, time.Until(end))
			return
		}
		if !sleepCtx(ctx, gap) {
			return
		}
		switch kind := r.cfg.Faults[i%len(r.cfg.Faults)]; kind {
		case FaultKill:
			if p := r.own.pick(rand.IntN(64)); p != nil {
				r.note(FaultEvent{Kind: kind, Node: p.node})
				_ = p.cmd.Process.Signal(syscall.SIGKILL)
			}
		case FaultStop:
			if p := r.own.pick(rand.IntN(64)); p != nil {
				r.note(FaultEvent{Kind: kind, Node: p.node})
				_ = p.cmd.Process.Signal(syscall.SIGSTOP)
				sleepCtx(ctx, r.cfg.TTL*3/2+time.Duration(rand.Int64N(int64(r.cfg.TTL/2))))
				_ = p.cmd.Process.Signal(syscall.SIGCONT)
			}
		case FaultSeize:
			r.seize(ctx)
		case FaultCut:
			n := r.ps.cut()
			r.note(FaultEvent{Kind: kind, Note: fmt.Sprintf("%d connections", n)})
		}
	}
}

// seize force-seizes an id an owner holds (in a sharded world, the id's
// shard), as operatorNode, and releases it, so that an owner claims it
// again under a newer epoch.
func (r *run) seize(ctx context.Context) {
	for _, i := range rand.Perm(len(r.ids)) {
		u, err := r.w.Unit(r.ids[i])
		if err != nil {
			r.cfg.Log.Warn("verify: seize", "id", r.ids[i], "error", err)
			return
		}
		id := u.Name
		octx, cancel := context.WithTimeout(ctx, 5*time.Second)
		st, err := r.w.Ownership.Owner(octx, id)
		if err == nil && st.Held && st.Node != operatorNode {
			var l *ownership.Lease
			l, err = r.w.Ownership.Seize(octx, id, operatorNode, r.cfg.TTL, true)
			if err == nil {
				r.note(FaultEvent{Kind: FaultSeize, ID: id, Node: st.Node, Epoch: l.Epoch})
				err = r.w.Ownership.Release(octx, id, operatorNode)
			}
			if err != nil {
				r.cfg.Log.Warn("verify: seize", "id", id, "error", err)
			}
			cancel()
			return
		}
		cancel()
	}
}

// load is the producers and the ownership clients.
type load struct {
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	clients []*client.Client
	unknown atomic.Int64
	once    sync.Once
}

func (l *load) stop() {
	l.once.Do(func() {
		l.cancel()
		l.wg.Wait()
		for _, c := range l.clients {
			c.Close()
		}
	})
}

// startLoad starts a producer per id, two callers, a timer setter and two
// ownership clients, through the proxies when there are.
func (r *run) startLoad(ctx context.Context, name string) (*load, error) {
	lctx, cancel := context.WithCancel(ctx)
	l := &load{cancel: cancel}
	open := func() (*client.World, error) {
		c, err := r.under.connect(r.cfg.Log)
		if err != nil {
			return nil, err
		}
		l.clients = append(l.clients, c)
		return openWorld(lctx, c, name)
	}
	pw, err := open()
	if err != nil {
		l.stop()
		return nil, err
	}
	ow, err := open()
	if err != nil {
		l.stop()
		return nil, err
	}
	cw, err := open() // the callers' and the timers'
	if err != nil {
		l.stop()
		return nil, err
	}
	bucket, err := r.admin.JetStream().Stream(ctx, wire.BucketStream(name))
	if err != nil {
		l.stop()
		return nil, fmt.Errorf("verify: the bucket stream: %w", err)
	}
	backlog := 50 * len(r.ids)
	for i, id := range r.ids {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			r.produce(lctx, pw, fmt.Sprintf("p%d", i), id, backlog, &l.unknown)
		}()
	}
	for i := range 2 {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			r.ownershipClient(lctx, ow, i)
		}()
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			r.caller(lctx, cw, bucket, fmt.Sprintf("c%d", i))
		}()
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		r.setTimers(lctx, cw, &l.wg)
	}()
	return l, nil
}

// produce posts to id until ctx ends, one send at a time, each with a
// key of its own as body and message id, retried with the same message id
// while its outcome is unknown.
func (r *run) produce(ctx context.Context, w *client.World, producer, id string, backlog int, unknown *atomic.Int64) {
	for n := 1; ctx.Err() == nil; n++ {
		for r.rec.Undelivered() > backlog {
			if !sleepCtx(ctx, 5*time.Millisecond) {
				return
			}
		}
		key := fmt.Sprintf("%s-%d", producer, n)
		h := r.rec.SendInvoked(producer, id, key)
		o, seq := send(ctx, w, id, key, unknown)
		r.rec.SendDone(h, o, seq)
		sleepCtx(ctx, 10*time.Millisecond)
	}
}

// send posts one message, retrying for up to 30 s, and not after stop
// ends (each attempt runs to its own end: stopping makes no outcome
// unknown).
func send(stop context.Context, w *client.World, id, key string, unknown *atomic.Int64) (history.Outcome, uint64) {
	wasUnknown := false
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		p, err := w.Queue.Send(ctx, id, []byte(key), queue.WithMsgID(key))
		cancel()
		if err == nil {
			return history.Posted, p.Seq
		}
		if errors.Is(err, queue.ErrUnknown) {
			wasUnknown = true
			unknown.Add(1)
		}
		if errors.Is(err, queue.ErrFull) || errors.Is(err, queue.ErrTooLarge) || time.Now().After(deadline) || !sleepCtx(stop, 20*time.Millisecond) {
			if wasUnknown {
				return history.Unknown, 0
			}
			return history.Refused, 0
		}
	}
}

// ownershipClient runs random ownership operations on three ids of the
// ownership clients' own (no owner serves them), with ttls short enough to
// lapse during the run, and records each with its call and return times
// for the linearizability check.
func (r *run) ownershipClient(ctx context.Context, w *client.World, n int) {
	node := fmt.Sprintf("lin-%d", n)
	ids := []string{"lin-a", "lin-b", "lin-c"}
	kinds := []history.OpKind{history.OpClaim, history.OpClaim, history.OpRenew, history.OpRenew, history.OpRelease, history.OpSeize, history.OpForceSeize, history.OpOwner, history.OpOwner}
	ttls := []time.Duration{200 * time.Millisecond, 500 * time.Millisecond, time.Second}
	for ctx.Err() == nil {
		octx, cancel := context.WithTimeout(ctx, 2*time.Second)
		out := r.rec.Own(octx, w.Ownership, kinds[rand.IntN(len(kinds))], ids[rand.IntN(len(ids))], node, ttls[rand.IntN(len(ttls))])
		cancel()
		pause := time.Duration(20+rand.IntN(80)) * time.Millisecond
		if out.Res == history.ResUnknown || out.Res == history.ResFailed {
			pause = 300 * time.Millisecond // few operations of unknown outcome: they widen the search
		}
		sleepCtx(ctx, pause)
	}
}

// finalDrain serves every id with an in-process worker on the direct
// connection until every mailbox is empty and every posted message was
// delivered; false if that did not happen within cfg.Final.
func (r *run) finalDrain(ctx context.Context) bool {
	dctx, cancel := context.WithCancel(ctx)
	defer cancel()
	h := func(_ context.Context, m drain.Message) error {
		at := time.Now()
		r.ct.deliver(string(m.Body), m.Seq, m.Posted)
		r.rec.Deliver(history.Delivery{ID: m.ID, Key: string(m.Body), Seq: m.Seq, Node: m.Fence.Node, Epoch: m.Fence.Epoch, Revision: m.Fence.Revision, At: at})
		return m.Reply(answerFor(m, at.UnixNano()))
	}
	obs := drain.WithCommitObserver(func(cm drain.Commit) {
		r.rep.add(history.Commit{ID: cm.ID, Node: cm.Node, Epoch: cm.Epoch, Revision: cm.Revision, Cursor: cm.Cursor, StreamSeq: cm.StreamSeq, At: time.Now()})
	})
	wcfg := worker.Config{Node: "verify-final", TTL: r.cfg.TTL, IDs: r.ids, Log: r.cfg.Log, DrainOptions: []drain.Option{obs}}
	if r.w.Shards() > 0 {
		// A sharded world's worker serves every shard, and its commits are
		// read from the bucket stream only.
		wcfg.IDs, wcfg.DrainOptions = nil, nil
	}
	wk, err := r.w.NewWorker(wcfg, h)
	if err != nil {
		r.cfg.Log.Error("verify: final worker", "error", err)
		return false
	}
	done := make(chan error, 1)
	go func() { done <- wk.Run(dctx) }()
	empty := pollUntil(ctx, r.cfg.Final, func() bool {
		if r.rec.Undelivered() > 0 || r.ct.waiting() > 0 {
			return false
		}
		ictx, icancel := context.WithTimeout(ctx, 5*time.Second)
		defer icancel()
		ids, err := r.w.MailboxIDs(ictx)
		return err == nil && len(ids) == 0
	})
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		r.cfg.Log.Error("verify: final worker", "error", err)
	}
	return empty
}

// catchUp waits until the follower has read the bucket stream up to its
// last message.
func (r *run) catchUp(ctx context.Context, fol *follower, name string) bool {
	ictx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	s, err := r.admin.JetStream().Stream(ictx, wire.BucketStream(name))
	if err != nil {
		return false
	}
	last := s.CachedInfo().State.LastSeq
	return pollUntil(ctx, 30*time.Second, func() bool { return fol.caughtUp(last) })
}

// pollUntil polls fn every 10 ms until it is true, total passed or ctx
// ended.
func pollUntil(ctx context.Context, total time.Duration, fn func() bool) bool {
	deadline := time.Now().Add(total)
	for !fn() {
		if time.Now().After(deadline) || !sleepCtx(ctx, 10*time.Millisecond) {
			return false
		}
	}
	return true
}
