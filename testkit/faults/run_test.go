package faults

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/queue"
	"github.com/fencepost/fencepost/server/servertest"
	"github.com/fencepost/fencepost/testkit/history"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/worker"
	"github.com/fencepost/fencepost/world"
)

// Fault kinds.
const (
	OwnerKill    = "owner-kill"    // SIGKILL of an owner process
	OwnerStop    = "owner-stop"    // SIGSTOP of an owner past its ttl, then SIGCONT
	ProxyCut     = "proxy-cut"     // every client connection cut
	ProxyLatency = "proxy-latency" // latency on every client connection
	ProxyRefuse  = "proxy-refuse"  // new client connections refused
	ServerCrash  = "server-crash"  // SIGKILL of the server process, restart on its store
	NodeKill     = "node-kill"     // a cluster member stopped and restarted (stream leaders first)

	// Partitions between cluster members (ClusterRoutes), partition_test.go.
	PartMinority = "partition-minority-leader" // a stream's leader cut off from both other members, then healed
	PartIsolate  = "partition-isolated-member" // a member that leads no stream cut off from the others; its clients stay
	PartFlap     = "partition-flap"            // the route between two members cut and healed every few hundred ms
	PartSilent   = "partition-silent"          // a stream's leader's routes pass no bytes either way, none closed, then pass again
	PartAsym     = "partition-asymmetric"      // a stream's leader's routes carry its bytes to the others but none of theirs to it, then all

	// Owners with faulted clocks (clock_test.go).
	OwnerIsolate  = "owner-isolate"      // one owner's connections held (nothing passes) past its ttl; it runs on meanwhile
	ClockJumpFwd  = "clock-jump-forward" // an owner's wall clock jumps forward
	ClockJumpBack = "clock-jump-back"    // an owner's wall clock jumps back
)

// Deployments.
const (
	Single         = "single"          // one in-process server
	ServerAlways   = "server-always"   // a server process, fsync on every write
	ServerInterval = "server-interval" // a server process, fsync every second (fencepostd's default)
	Cluster        = "cluster"         // three in-process servers, R3 world
	ClusterRoutes  = "cluster-routes"  // three in-process servers routed through proxies (partitions), R3 world
)

type scenario struct {
	Name   string
	Deploy string
	Proxy  bool     // clients (producers, owners, ownership clients) through the proxy
	Faults []string // injected in this order
	Gap    time.Duration
	IDs    int
	Owners int
	TTL    time.Duration
	Pace   time.Duration // producer pause between sends
	Lin    int           // ownership clients
	// Backlog caps undelivered messages (producers wait above it).
	Backlog int
	Final   time.Duration // how long the final drain may take
	Work    time.Duration // an owner's handler takes this long per message
	// For, when set, cycles through Faults until this long has passed.
	For time.Duration
	// Cut is how long a PartIsolate or PartFlap lasts (ClusterRoutes),
	// and a PartSilent or PartAsym when set (otherwise until the stream's
	// leader has changed).
	Cut time.Duration
	// HealAtElection heals a PartMinority as soon as the majority has
	// elected a new leader, while the old one may still call itself
	// leader (docs/reliability.md section 6: out of CI, it fails).
	HealAtElection bool
	// MinorityOf picks whose leader a PartMinority cuts off: "mailbox"
	// (the bucket stream's leadership is moved off that member first),
	// "bucket", or "" for mailbox and bucket in turn.
	MinorityOf string
	// FlapLeader flaps every route of the bucket stream's leader instead
	// of one route (PartFlap; section 6 too: out of CI).
	FlapLeader bool
	// OwnerProxies gives each owner process a proxy of its own, so that
	// one owner can be cut off (OwnerIsolate) while it keeps running.
	OwnerProxies bool
	// Clocks are the faulted clocks of owner slots (fakeclock_test.go);
	// the other slots read the true clock.
	Clocks map[int]clockSpec
	// BeyondBounds: the clocks break the documented bounds (rho, delta),
	// so a stale holder may deliver (counted, not failed); every other
	// check holds as always.
	BeyondBounds bool
	// Counter: the owners and the final drain run a state handler that
	// counts each id's messages in its state (counter_test.go); at the end
	// every counter must equal the messages stored for its id. Stale
	// deliveries of a holder displaced by a forced seize (OwnerSeize) are
	// counted apart; every other check holds as always.
	Counter bool
	// Partitions creates the world with that many partitions, and the
	// owners serve every id (not a list of ids), so that each reads the
	// posts of its partitions (docs/design/partitions.md).
	Partitions int
	// Listed: on a partitioned world, the owners serve the list of every
	// mailbox id instead, so that each subscribes to each id's posts
	// (docs/design/partitions.md, "Who reads what").
	Listed bool
	// Shards creates a sharded world of that many shards (docs/design.md
	// 3.14): the owners and the final drain serve shards (workers without
	// ids), OwnerSeize seizes shard units, the commits are the shard
	// cursor writes read from the bucket stream (history.BucketFollower, verify's
	// follower: shard workers report none), and the history is checked per shard as
	// fencepost verify --shards checks it (history.CheckShards).
	Shards int
}

// seizes says whether the scenario force-seizes live holders: stale
// deliveries of the displaced holders are then counted apart (staleApart).
func (sc scenario) seizes() bool { return slices.Contains(sc.Faults, OwnerSeize) }

// outcome is what one run measured.
type outcome struct {
	Report          history.Report
	Lin             history.LinResult
	Faults          map[string]int
	Takeovers       map[string]int // by the fault in force when the new epoch first acted
	StaleWoken      int            // owners that were paused and self-fenced on waking
	UnknownSends    int64          // send attempts whose outcome was unknown (then retried with the same message id)
	ops             []history.OwnOp
	hist            *history.History // kept when an invariant was violated
	faults          []faultAt        // every fault injected, in order
	Fences          int64
	OwnerStarts     int64
	Duration        time.Duration
	ServerRestarted int
	Notes           []string // figures of a scenario's own, for the log
	Partition       partitionFigures
	isolations      []isolation
	ownerLives      map[int]time.Duration // longest life of an owner process, by slot
	// Counter rounds: the counters and the forced seizes.
	Counters      counterFigures
	seizes        []seized
	SeizeFailures int
	// The stale deliveries (staleApart): of seized holders and of calls
	// decided before a pause (counted apart, SeizedStale and
	// PausedStale), and any other (StaleOthers: violations, with
	// StaleExamples).
	SeizedStale   int
	PausedStale   int
	StaleOthers   int
	StaleExamples []violation
	// Sharded rounds: the cursor writes read from the bucket stream
	// without the fence of their own record (violations), and what the
	// follower saw.
	Unfenced []history.CursorWrite
	Coverage history.Coverage
}

type deployment struct {
	t       testing.TB
	kind    string
	node    *servertest.Node
	proc    *serverProc
	cluster *servertest.Cluster
	routes  *routeNet // ClusterRoutes: the members' routes through proxies
	proxy   *Proxy
	owners  []*Proxy // OwnerProxies: one per owner slot
	world   string
	admin   *client.Client // direct, for setup, leader lookups and the final drain
}

// direct is the servers' own URL.
func (d *deployment) direct() string {
	switch {
	case d.node != nil:
		return d.node.ClientURL()
	case d.proc != nil:
		return d.proc.URL()
	default:
		return d.cluster.URL()
	}
}

// url is the URL the clients under test use.
func (d *deployment) url() string {
	if d.proxy != nil {
		return d.proxy.URL()
	}
	return d.direct()
}

func freePort(t testing.TB) int { return testutil.FreePort(t) }

var worldSeq atomic.Int64

func deploy(t testing.TB, sc scenario) *deployment {
	t.Helper()
	d := &deployment{t: t, kind: sc.Deploy}
	switch sc.Deploy {
	case Single:
		d.node = servertest.New(t)
	case ServerAlways, ServerInterval:
		d.proc = &serverProc{store: t.TempDir(), port: freePort(t), sync: map[string]string{ServerAlways: "always", ServerInterval: "interval"}[sc.Deploy]}
		if err := d.proc.start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(d.proc.crash)
	case Cluster:
		d.cluster = servertest.NewCluster(t, 3)
	case ClusterRoutes:
		d.routes = newRouteNet(t)
		d.cluster = d.routes.Cluster()
	}
	if sc.Proxy {
		target := strings.TrimPrefix(d.direct(), "nats://")
		p, err := NewProxy(target)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		d.proxy = p
	}
	for i := 0; sc.OwnerProxies && i < sc.Owners; i++ {
		p, err := NewProxy(strings.TrimPrefix(d.direct(), "nats://"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		d.owners = append(d.owners, p)
	}
	c, err := dial(d.direct(), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	d.admin = c
	d.world = fmt.Sprintf("f%d", worldSeq.Add(1))
	cfg := world.Config{MinTTL: 10 * time.Millisecond, Partitions: sc.Partitions, Shards: sc.Shards}
	if d.cluster != nil {
		cfg.Replicas = 3
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		_, err := c.CreateWorld(ctx, d.world, cfg)
		if err == nil {
			break
		}
		var apiErr *jetstream.APIError
		if ctx.Err() != nil || !(errors.As(err, &apiErr) && apiErr.ErrorCode == 10005) {
			t.Fatalf("create world: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return d
}

// connect opens a client of the deployment for a component under test.
func (d *deployment) connect() (*client.Client, *client.World, error) {
	deadline := time.Now().Add(30 * time.Second)
	c, err := dial(d.url(), 2*time.Second)
	if err != nil {
		return nil, nil, err
	}
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		w, err := c.World(ctx, d.world)
		cancel()
		if err == nil {
			return c, w, nil
		}
		if time.Now().After(deadline) {
			c.Close()
			return nil, nil, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// dial connects to url, retrying for up to 30 s (a loaded machine can miss
// the connect timeout).
func dial(url string, reqTimeout time.Duration) (*client.Client, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := client.Connect(url, client.WithTimeout(reqTimeout), client.WithLogger(quiet), natsOpts())
		if err == nil || time.Now().After(deadline) {
			return c, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitWorld polls until the world answers through the admin client.
func (d *deployment) waitWorld(total time.Duration) error {
	deadline := time.Now().Add(total)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		w, err := d.admin.World(ctx, d.world)
		if err == nil {
			_, err = w.Ownership.Owner(ctx, "probe")
		}
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// leaderOf is the server name of the stream's leader.
func (d *deployment) leaderOf(stream string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, err := d.admin.JetStream().Stream(ctx, stream)
	if err != nil {
		return ""
	}
	if ci := s.CachedInfo().Cluster; ci != nil {
		return ci.Leader
	}
	return ""
}

func ids(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("mb-%d", i)
	}
	return out
}

// run is one fault run: producers post (one per id, each send acknowledged
// before the next), owner processes drain, ownership clients operate on ids
// of their own, the faults are injected on a schedule, then everything is
// healed, the producers stop, a final full drain runs, and the history is
// checked.
func run(t testing.TB, sc scenario) outcome {
	start := time.Now()
	last := start
	// lap logs where a run spends its time (go test -v).
	lap := func(what string) {
		now := time.Now()
		t.Logf("%s %s: %-40s %6.1fs (at %5.1fs)", now.Format("15:04:05.000"), sc.Name, what, now.Sub(last).Seconds(), now.Sub(start).Seconds())
		last = now
	}
	d := deploy(t, sc)
	lap("deploy")
	rec := history.NewRecorder()
	mbIDs := ids(sc.IDs)
	res := outcome{Faults: map[string]int{}, Takeovers: map[string]int{}}

	// Owner processes.
	slotEnv := func(slot int) []string {
		env := []string{"FP_URL=" + d.url()}
		if d.owners != nil {
			env[0] = "FP_URL=" + d.owners[slot].URL()
		}
		if c, ok := sc.Clocks[slot]; ok {
			env = append(env, "FP_CLOCK="+c.String())
		}
		return env
	}
	ownIDs := strings.Join(mbIDs, ",")
	if sc.Partitions > 0 && !sc.Listed || sc.Shards > 0 {
		ownIDs = "" // every id: a partitioned world's workers read by partition, a sharded world's serve shards
	}
	// A sharded world's commits are read from its bucket stream, from
	// before the first (shard workers report none).
	var fol *history.BucketFollower
	if sc.Shards > 0 {
		var err error
		if fol, err = history.FollowBucket(context.Background(), d.admin.JetStream(), d.world, sc.Shards); err != nil {
			t.Fatal(err)
		}
		defer fol.Stop()
	}
	own := startOwners(t, rec, sc.Owners, sc.TTL, slotEnv, "FP_WORLD="+d.world, "FP_IDS="+ownIDs, fmt.Sprintf("FP_WORK=%v", sc.Work), fmt.Sprintf("FP_STATE=%v", sc.Counter))
	ownersStopped := false
	defer func() {
		if !ownersStopped {
			own.stop()
		}
	}()

	// Producers.
	prodCtx, stopProducers := context.WithCancel(context.Background())
	defer stopProducers()
	var prodWG sync.WaitGroup
	var unknownSends atomic.Int64
	for i, id := range mbIDs {
		c, w, err := d.connect()
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		prodWG.Add(1)
		go func() {
			defer prodWG.Done()
			produce(prodCtx, w, rec, fmt.Sprintf("p%d", i), id, sc.Pace, sc.Backlog, &unknownSends)
		}()
	}

	// Ownership clients on ids of their own, with plain leases.
	linCtx, stopLin := context.WithCancel(context.Background())
	defer stopLin()
	var linWG sync.WaitGroup
	for i := 0; i < sc.Lin; i++ {
		c, w, err := d.connect()
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		linWG.Add(1)
		go func() {
			defer linWG.Done()
			ownershipClient(linCtx, w, rec, i)
		}()
	}

	// Wait until the owners deliver, then inject the faults.
	lap("start owners, producers, clients")
	waitUntil(60*time.Second, func() bool { _, _, n := rec.Counts(); return n > 0 })
	lap("first delivery")
	var faults []faultAt
	var mu sync.Mutex
	note := func(f faultAt) {
		mu.Lock()
		faults = append(faults, f)
		mu.Unlock()
		res.Faults[f.kind]++
	}
	nodeKills := 0
	schedule := sc.Faults
	if sc.For > 0 { // cycle through the faults until sc.For has passed
		schedule = nil
		for len(schedule) < 10000 {
			schedule = append(schedule, sc.Faults...)
		}
	}
	// A soak round (sc.For) logs its phases, not each of its hundred faults.
	faultLap := func(what string) {
		if sc.For == 0 {
			lap(what)
		}
	}
	faultsEnd := time.Now().Add(sc.For)
	for i, kind := range schedule {
		if sc.For > 0 && time.Now().After(faultsEnd) {
			break
		}
		time.Sleep(sc.Gap) // the schedule: faults are spaced in time
		f := faultAt{kind: kind, at: time.Now()}
		switch kind {
		case OwnerKill:
			if p := own.pick(rand.IntN(16)); p != nil {
				f.target = p.node
				p.cmd.Process.Signal(syscall.SIGKILL)
				note(f)
			}
		case OwnerStop:
			p := own.pick(rand.IntN(16))
			if p == nil {
				continue
			}
			holder := p.active.Load() > 0
			f.target, f.at = p.node, time.Now()
			p.cmd.Process.Signal(syscall.SIGSTOP)
			time.Sleep(sc.TTL + sc.TTL/2 + time.Duration(rand.IntN(500))*time.Millisecond)
			p.cmd.Process.Signal(syscall.SIGCONT)
			f.end = time.Now()
			note(f)
			// The stale owner wakes up: its lease has lapsed, it must
			// self-fence (and the checker verifies it committed nothing
			// under its old epoch after a newer one acted).
			// (An owner that had delivered nothing may not have had its
			// node lease yet: it has nothing to fence.)
			wait := 20 * time.Second
			if !holder {
				wait = 2 * sc.TTL
			}
			select {
			case <-p.exited:
				if c, _ := p.fence.Load().(string); strings.Contains(c, "fence") {
					res.StaleWoken++
				} else if holder {
					t.Errorf("owner %s woke up and stopped without a self-fence: %q", p.node, c)
				}
			case <-time.After(wait):
				if holder {
					// Its goroutines, to see where it hangs: a Go
					// process dumps them on stderr at SIGQUIT, and exits.
					p.cmd.Process.Signal(syscall.SIGQUIT)
					c, _ := p.fence.Load().(string)
					t.Errorf("owner %s (%d deliveries) woke up past its ttl and did not self-fence within %v (cause reported: %q); its goroutines are dumped on stderr (SIGQUIT)", p.node, p.active.Load(), wait, c)
				}
			}
		case OwnerSeize:
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			ss, err := seizeOwner(sctx, d, mbIDs, sc.Shards)
			cancel()
			if err != nil {
				res.SeizeFailures++
				t.Logf("%s: forced seize: %v", sc.Name, err)
			}
			if len(ss) > 0 {
				var seizedIDs []string
				for _, s := range ss {
					seizedIDs = append(seizedIDs, s.id)
				}
				f.target, f.end = strings.Join(seizedIDs, ","), time.Now()
				note(f)
				res.seizes = append(res.seizes, ss...)
			}
		case ProxyCut:
			f.target = "clients"
			note(f)
			d.proxy.CutAll()
		case ProxyLatency:
			lat := time.Duration(50+rand.IntN(250)) * time.Millisecond
			f.target = fmt.Sprintf("clients +%v", lat)
			d.proxy.SetLatency(lat)
			time.Sleep(sc.Gap)
			d.proxy.SetLatency(0)
			f.end = time.Now()
			note(f)
		case ProxyRefuse:
			// Longer than the ttl: the owners lose their leases.
			dur := sc.TTL + time.Duration(rand.IntN(1000))*time.Millisecond
			d.proxy.Refuse(dur)
			d.proxy.CutAll()
			time.Sleep(dur)
			f.target, f.end = "clients", time.Now()
			note(f)
		case ServerCrash:
			d.proc.crash()
			time.Sleep(time.Duration(200+rand.IntN(800)) * time.Millisecond)
			if err := d.proc.start(); err != nil {
				t.Fatalf("restart the server: %v", err)
			}
			f.target, f.end = "server", time.Now()
			note(f)
			res.ServerRestarted++
			faultLap("server crash and restart")
			if err := d.waitWorld(60 * time.Second); err != nil {
				t.Fatalf("world after a server restart: %v", err)
			}
			faultLap("world answers after the restart")
		case NodeKill:
			var victim *servertest.Node
			target := []string{wire.BucketStream(d.world), wire.MailboxStream(d.world), ""}[nodeKills%3]
			nodeKills++
			leader := ""
			if target != "" {
				leader = d.leaderOf(target)
			}
			for _, n := range d.cluster.Nodes {
				if n.Name() == leader {
					victim = n
				}
			}
			if victim == nil {
				victim = d.cluster.Nodes[i%3]
			}
			f.target, f.at = victim.Name(), time.Now()
			victim.Server.Stop()
			time.Sleep(time.Duration(500+rand.IntN(1000)) * time.Millisecond)
			victim.Restart(t)
			f.end = time.Now()
			note(f)
			faultLap("member " + victim.Name() + " stopped and restarted")
			// Never two members down: wait until it is current again.
			if !waitUntil(60*time.Second, func() bool { return victim.JetStreamIsCurrent() }) {
				t.Fatalf("%s did not catch up after its restart", victim.Name())
			}
			faultLap("member current again")
			if err := d.waitWorld(60 * time.Second); err != nil {
				t.Fatalf("world after a node restart: %v", err)
			}
			faultLap("world answers after the restart")
		case PartMinority, PartIsolate, PartFlap, PartSilent, PartAsym:
			partition(t, d, sc, kind, &res, faultLap, &f)
			note(f)
		case OwnerIsolate, ClockJumpFwd, ClockJumpBack:
			if clockFault(t, d, own, sc, kind, &res, &f) {
				note(f)
			}
		}
		faultLap(kind)
	}
	lap("faults")
	res.faults = faults
	time.Sleep(sc.Gap)

	// Heal, stop the producers and the ownership clients.
	if d.proxy != nil {
		d.proxy.SetLatency(0)
		d.proxy.Refuse(0)
	}
	for _, p := range d.owners {
		p.Hold(0)
	}
	if d.routes != nil {
		d.routes.HealAll()
	}
	stopProducers()
	stopLin()
	prodWG.Wait()
	linWG.Wait()

	// Let the owners deliver what they can, then stop them and drain
	// everything in a final full drain.
	lap("heal, stop producers and clients")
	if !waitUntil(5*time.Second, func() bool { return rec.Undelivered() == 0 }) {
		d.logUndelivered(t, rec)
		waitUntil(sc.Final, func() bool { return rec.Undelivered() == 0 })
	}
	lap("owners deliver the rest")
	own.stop()
	ownersStopped = true
	lap("stop owners")
	final := finalDrain(t, d, rec, mbIDs, sc)
	lap("final drain")

	h := rec.History()
	check := history.Check
	if sc.Shards > 0 {
		check = shardCheck(t, d, sc, fol, &h, &res)
		lap("read the bucket stream's commits")
	}
	res.Report = check(h)
	res.StaleOthers, res.StaleExamples, res.SeizedStale, res.PausedStale = staleApart(h, res.Report, res.seizes, res.faults, sc.Shards, check)
	if sc.Counter {
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		var err error
		res.Counters, err = checkCounters(cctx, d, h, mbIDs)
		cancel()
		if err != nil {
			t.Errorf("%s: counters: %v", sc.Name, err)
		}
		lap("check counters")
	}
	if len(res.isolations) > 0 {
		res.Notes = append(res.Notes, takeoverNote(h, res.isolations))
	}
	if !res.Report.OK() {
		res.hist = &h
	}
	lap("check")
	res.Lin = history.CheckOwnership(h.Ops, 2*time.Minute)
	if res.Lin.Result != porcupine.Ok {
		res.ops = h.Ops
	}
	lap("check linearizability")
	res.Fences = own.Fences.Load()
	res.UnknownSends = unknownSends.Load()
	res.OwnerStarts = own.Starts.Load()
	res.Duration = time.Since(start)
	res.ownerLives = own.lives()

	// Takeovers by the fault in force when the new epoch first acted.
	firstAct := map[[2]any]time.Time{}
	for _, dl := range h.Deliveries {
		k := [2]any{history.UnitOf(dl.ID, sc.Shards), dl.Epoch} // a sharded world's epochs are its shards'
		if at, ok := firstAct[k]; !ok || dl.At.Before(at) {
			firstAct[k] = dl.At
		}
	}
	firstEpoch := map[string]uint64{}
	for k := range firstAct {
		id, e := k[0].(string), k[1].(uint64)
		if f, ok := firstEpoch[id]; !ok || e < f {
			firstEpoch[id] = e
		}
	}
	for k, at := range firstAct {
		if k[1].(uint64) == firstEpoch[k[0].(string)] {
			continue
		}
		kind := "none"
		for _, f := range faults {
			if f.at.Before(at) {
				kind = f.kind
			}
		}
		if at.After(final) {
			kind = "final-drain"
		}
		res.Takeovers[kind]++
	}
	if own.BadLines.Load() > 0 {
		t.Errorf("%d unreadable report lines", own.BadLines.Load())
	}
	t.Logf("%s: owner exits: %s", sc.Name, own.causes())
	return res
}

// shardCheck puts the commits of a sharded world's run into h: the shard
// cursor writes its follower read from the bucket stream (once it has read
// the stream to its end), each named by the holder its fence expected. It
// returns the check of such a history, fencepost verify --shards's
// (history.CheckShards): lenient when the follower missed a write (one
// replaced before it was read, or whose holder nothing names), which may
// have committed what a later write covers.
func shardCheck(t testing.TB, d *deployment, sc scenario, fol *history.BucketFollower, h *history.History, res *outcome) func(history.History) history.Report {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	s, err := d.admin.JetStream().Stream(ctx, wire.BucketStream(d.world))
	cancel()
	if err != nil {
		t.Fatalf("%s: the bucket stream: %v", sc.Name, err)
	}
	last := s.CachedInfo().State.LastSeq
	if !waitUntil(30*time.Second, func() bool { return fol.CaughtUp(last) }) {
		t.Errorf("%s: the follower did not read the bucket stream up to its last message (%d) within 30 s: commits may be missing", sc.Name, last)
	}
	commits, pending, unfenced, cov := fol.Commits(h.Commits, h.Deliveries)
	h.Commits = commits
	res.Unfenced, res.Coverage = unfenced, cov
	lenient := cov.Skipped > 0 || cov.Unattributed > 0
	return func(h history.History) history.Report { return history.CheckShards(h, sc.Shards, pending, lenient) }
}

// produce posts to id until ctx ends, one send at a time. Each key is sent
// with its own message id and retried (same message id, so at most one copy
// is stored) while the outcome is unknown or the send is refused
// transiently, for up to 30 s.
func produce(ctx context.Context, w *client.World, rec *history.Recorder, producer, id string, pace time.Duration, backlog int, unknownSends *atomic.Int64) {
	for n := 1; ctx.Err() == nil; n++ {
		for backlog > 0 && rec.Undelivered() > backlog && ctx.Err() == nil {
			time.Sleep(5 * time.Millisecond)
		}
		key := fmt.Sprintf("%s-%d", producer, n)
		h := rec.SendInvoked(producer, id, key)
		o, seq := send(w, id, key, unknownSends)
		rec.SendDone(h, o, seq)
		if pace > 0 {
			time.Sleep(pace)
		}
	}
}

func send(w *client.World, id, key string, unknownSends *atomic.Int64) (history.Outcome, uint64) {
	unknown := false
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		p, err := w.Queue.Send(ctx, id, []byte(key), queue.WithMsgID(key))
		cancel()
		if err == nil {
			return history.Posted, p.Seq
		}
		if errors.Is(err, queue.ErrUnknown) {
			unknown = true
			unknownSends.Add(1)
		}
		if errors.Is(err, queue.ErrFull) || errors.Is(err, queue.ErrTooLarge) || time.Now().After(deadline) {
			if unknown {
				return history.Unknown, 0
			}
			return history.Refused, 0
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ownershipClient runs random ownership operations on three ids of their own
// (shared with the other ownership clients), with ttls short enough to
// lapse during the run, and records each with its call and return times.
func ownershipClient(ctx context.Context, w *client.World, rec *history.Recorder, n int) {
	node := fmt.Sprintf("lin-%d", n)
	linIDs := []string{"lin-a", "lin-b", "lin-c"}
	kinds := []history.OpKind{history.OpClaim, history.OpClaim, history.OpRenew, history.OpRenew, history.OpRelease, history.OpSeize, history.OpForceSeize, history.OpOwner, history.OpOwner}
	ttls := []time.Duration{150 * time.Millisecond, 400 * time.Millisecond, time.Second}
	for ctx.Err() == nil {
		octx, cancel := context.WithTimeout(ctx, 2*time.Second)
		out := rec.Own(octx, w.Ownership, kinds[rand.IntN(len(kinds))], linIDs[rand.IntN(len(linIDs))], node, ttls[rand.IntN(len(ttls))])
		cancel()
		pause := time.Duration(10+rand.IntN(60)) * time.Millisecond
		if out.Res == history.ResUnknown || out.Res == history.ResFailed {
			pause = 300 * time.Millisecond // few operations of unknown outcome: they widen the search
		}
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
	}
}

// finalDrain serves every mailbox id with an in-process worker (direct
// connection, no faults) until each mailbox is empty, and returns when it
// started.
func finalDrain(t testing.TB, d *deployment, rec *history.Recorder, mbIDs []string, sc scenario) time.Time {
	started := time.Now()
	c, err := dial(d.direct(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := c.World(ctx, d.world)
	if err != nil {
		t.Fatal(err)
	}
	h := func(_ context.Context, m drain.Message) error {
		rec.Deliver(history.Delivery{ID: m.ID, Key: string(m.Body), Seq: m.Seq, Node: m.Fence.Node, Epoch: m.Fence.Epoch, Revision: m.Fence.Revision, At: time.Now()})
		return nil
	}
	obs := drain.WithCommitObserver(func(cm drain.Commit) {
		rec.Commit(history.Commit{ID: cm.ID, Node: cm.Node, Epoch: cm.Epoch, Revision: cm.Revision, Cursor: cm.Cursor, StreamSeq: cm.StreamSeq, At: time.Now()})
	})
	cfg := worker.Config{Node: "final", TTL: sc.TTL, IDs: mbIDs, Log: quiet, DrainOptions: []drain.Option{obs}}
	filter := wire.MailboxFilter(d.world)
	if sc.Shards > 0 {
		// Every shard (a sharded world's workers serve shards, and report
		// no commits: the bucket stream's follower reads them), whose
		// mail is stored under the shards' subjects.
		cfg.IDs, cfg.DrainOptions = nil, nil
		filter = wire.ShardedMailboxFilter(d.world)
	}
	if sc.Counter {
		cfg.State, h = true, counting(h).Handler()
	}
	wk, err := w.NewWorker(cfg, h)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- wk.Run(ctx) }()
	// Empty: no message left in any mailbox after its cursor. Purges run
	// after commits, so wait for the stream itself to be empty of them.
	empty := waitUntil(sc.Final, func() bool {
		ictx, icancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer icancel()
		info, err := handles.Of(w).Mailbox.Info(ictx, jetstream.WithSubjectFilter(filter))
		if err != nil {
			return false
		}
		for _, n := range info.State.Subjects {
			if n > 0 {
				return false
			}
		}
		return rec.Undelivered() == 0
	})
	cancel()
	if err := <-done; err != nil {
		t.Errorf("final worker: %v", err)
	}
	if !empty {
		t.Errorf("final drain: mailboxes not empty after %v (%d posted messages undelivered)", sc.Final, rec.Undelivered())
		logStored(t, w, mbIDs)
	}
	return started
}

// logStored logs what each id's mailbox still stores: what waits after
// its cursor, and what its cursor covers that was not removed.
func logStored(t testing.TB, w *client.World, mbIDs []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, id := range mbIDs {
		st, err := w.Mailboxes.Stat(ctx, id)
		t.Logf("stored: %s: depth %d, committed and still stored %d, cursor %d, next seq %d, owner %s/%d held=%v (err %v)", id, st.Depth, st.CommittedStored, st.Cursor, st.NextSeq, st.Owner.Node, st.Owner.Epoch, st.Owner.Held, err)
	}
}

// logUndelivered logs, for every id with posted messages not delivered
// yet, the lowest such sequence and what the mailbox and record say.
func (d *deployment) logUndelivered(t testing.TB, rec *history.Recorder) {
	h := rec.History()
	delivered := map[string]bool{}
	for _, dl := range h.Deliveries {
		delivered[dl.Key] = true
	}
	lowest, count := map[string]uint64{}, map[string]int{}
	for _, s := range h.Sends {
		if s.Outcome == history.Posted && !delivered[s.Key] {
			if l, ok := lowest[s.ID]; !ok || s.Seq < l {
				lowest[s.ID] = s.Seq
			}
			count[s.ID]++
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	w, err := d.admin.World(ctx, d.world)
	if err != nil {
		t.Logf("undelivered: %v", err)
		return
	}
	for id, seq := range lowest {
		st, err := w.Mailboxes.Stat(ctx, id)
		t.Logf("undelivered: %s: %d messages from seq %d; cursor %d, depth %d, owner %+v (err %v)", id, count[id], seq, st.Cursor, st.Depth, st.Owner, err)
	}
}

// waitUntil polls fn until it is true or total passed.
func waitUntil(total time.Duration, fn func() bool) bool {
	deadline := time.Now().Add(total)
	for !fn() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// verify fails the test unless the run kept every invariant.
func verify(t testing.TB, sc scenario, res outcome) {
	t.Helper()
	rep := res.Report
	timed := failures(sc, res)
	t.Logf("%s: %s", sc.Name, summary(res))
	if pf := res.Partition; pf.Minority+pf.Isolated+pf.Flaps > 0 {
		t.Logf("%s: partitions: %d minority leaders (%d replaced in the majority, %d with two leaders at once), %d isolated members, %d flaps; longest wait from a heal to a whole cluster %v",
			sc.Name, pf.Minority, pf.Elected, pf.Dual, pf.Isolated, pf.Flaps, pf.HealWait.Round(time.Millisecond))
	}
	if pf := res.Partition; pf.Silent+pf.Asym > 0 {
		t.Logf("%s: held routes: %d silent, %d asymmetric (%d leaders replaced in the majority, %d with two leaders at once, %d elections of the held stream's leader in all); %d routes closed by nats-server during a hold, %d route connections dialed again; longest wait from a release to a whole cluster %v",
			sc.Name, pf.Silent, pf.Asym, pf.HeldElected, pf.HeldDual, pf.HeldElections, pf.HeldClosed, pf.HeldRedialed, pf.HealWait.Round(time.Millisecond))
	}
	for _, n := range res.Notes {
		t.Logf("%s: %s", sc.Name, n)
	}
	if sc.Shards > 0 {
		c := res.Coverage
		t.Logf("%s: %d shards; bucket stream: %d messages read, %d replaced before they were read, %d undecodable, %d cursor writes whose holder nothing names (left out); %d commits checked; %d cursor writes without their record's fence",
			sc.Name, sc.Shards, c.Read, c.Skipped, c.Bad, c.Unattributed, rep.Commits, len(res.Unfenced))
		if len(res.Unfenced) > 0 {
			t.Errorf("%s: %d cursor writes stored without the fence of their own record, e.g. %+v", sc.Name, len(res.Unfenced), res.Unfenced[0])
		}
	}
	if sc.seizes() && !sc.Counter {
		t.Logf("%s: %d units force-seized in %d seizes (%d failed), %d stale deliveries of seized holders (counted apart), %d other stale deliveries",
			sc.Name, len(res.seizes), res.Faults[OwnerSeize], res.SeizeFailures, res.SeizedStale, res.StaleOthers)
	}
	if res.PausedStale > 0 {
		t.Logf("%s: %d stale deliveries of calls decided before a pause (counted apart: docs/design.md, invariant 4 point 3)", sc.Name, res.PausedStale)
	}
	stale := res.StaleOthers
	if sc.Counter || sc.seizes() {
		if res.StaleOthers != 0 {
			t.Errorf("%s: %d stale deliveries not of a seized holder:\n  %s", sc.Name, res.StaleOthers, strings.Join(texts(res.StaleExamples), "\n  "))
		}
	}
	if sc.Counter {
		c := res.Counters
		t.Logf("%s: counters: %d checked, %d off, summing to %d for %d messages stored (%d posted); %d ids force-seized in %d seizes (%d failed), %d stale deliveries of seized holders (counted apart), %d other stale deliveries",
			sc.Name, c.Checked, c.Off, c.Counted, c.Stored, rep.Posted, len(res.seizes), res.Faults[OwnerSeize], res.SeizeFailures, res.SeizedStale, res.StaleOthers)
		if c.Off != 0 || c.Checked != sc.IDs || c.Counted != int64(c.Stored) {
			t.Errorf("%s: %d counters off of %d checked (want %d), summing to %d for %d messages stored:\n  %s", sc.Name, c.Off, c.Checked, sc.IDs, c.Counted, c.Stored, strings.Join(c.Examples, "\n  "))
		}
	}
	if sc.BeyondBounds {
		// What breaks beyond the clock bounds, shown and counted; the
		// fenced commit (stale commits) and everything else must hold.
		t.Logf("%s: beyond the clock bounds: %d stale deliveries of %d (not a failure here)", sc.Name, stale, rep.Deliveries)
		stale = 0
	}
	checkClockBounds(t, sc, res)
	if rep.Lost+rep.Unexpected+rep.StaleCommits+stale+rep.Order+rep.CursorBack != 0 {
		where := ""
		if res.hist != nil {
			if f, err := os.CreateTemp("", "fp-violation-*.txt"); err == nil {
				f.WriteString(describe(*res.hist, timed, sc.Shards))
				f.Close()
				where = " (history around the violations in " + f.Name() + ")"
			}
		}
		t.Errorf("%s: invariants violated%s:\n%s", sc.Name, where, rep)
	}
	if res.Lin.Result != porcupine.Ok {
		f, err := os.CreateTemp("", "fp-lin-*.txt")
		if err == nil {
			f.WriteString(history.Explain(res.ops, 2*time.Minute))
			f.Close()
		}
		t.Errorf("%s: ownership history not linearizable: %s (%d ops, %d unknown); explained in %s", sc.Name, res.Lin.Result, res.Lin.Ops, res.Lin.Unknown, f.Name())
	}
	if rep.Posted == 0 || rep.Deliveries == 0 {
		t.Errorf("%s: nothing happened: %s", sc.Name, rep)
	}
	for _, f := range sc.Faults {
		if sc.For == 0 && res.Faults[f] == 0 {
			t.Errorf("%s: fault %s was never injected", sc.Name, f)
		}
	}
	if t.Failed() {
		logFaults(t, sc.Name, res.faults, timed)
	}
}

func summary(res outcome) string {
	kinds := func(m map[string]int) string {
		var ks []string
		for k := range m {
			ks = append(ks, k)
		}
		sort.Strings(ks)
		var b []string
		for _, k := range ks {
			b = append(b, fmt.Sprintf("%s=%d", k, m[k]))
		}
		return strings.Join(b, ",")
	}
	return fmt.Sprintf("%v | faults %s | takeovers %s | stale owners woken and fenced %d | self-fences %d, owner starts %d | send attempts unknown %d | ownership ops %d (unknown %d): %s | %s",
		res.Duration.Round(time.Millisecond), kinds(res.Faults), kinds(res.Takeovers), res.StaleWoken, res.Fences, res.OwnerStarts, res.UnknownSends,
		res.Lin.Ops, res.Lin.Unknown, res.Lin.Result, res.Report)
}

// describe writes, for every posted message never delivered, the sends,
// deliveries and commits of its id around its sequence; and for every
// violation of vs (those with a time: a stale delivery or commit, ...),
// the holders and commits of its id and its deliveries around its
// sequence. shards: the world's (0: per-id), whose commits and per-unit
// violations are its shard units'.
func describe(h history.History, vs []violation, shards int) string {
	var b strings.Builder
	delivered := map[string]bool{}
	for _, d := range h.Deliveries {
		delivered[d.Key] = true
	}
	described := map[string]bool{}
	n := 0
	for _, s := range h.Sends {
		if s.Outcome != history.Posted || delivered[s.Key] {
			continue
		}
		if !described[s.ID] {
			described[s.ID] = true
			describeHolders(&b, h, s.ID, s.Seq, "lost", shards)
		}
		if n++; n > 10 {
			break
		}
		fmt.Fprintf(&b, "LOST %s key %s seq %d invoked %s returned %s\n", s.ID, s.Key, s.Seq, s.Invoked.Format(time.RFC3339Nano), s.Returned.Format(time.RFC3339Nano))
		for _, o := range h.Sends {
			if o.ID == s.ID && o.Seq+5 >= s.Seq && o.Seq <= s.Seq+5 && o.Outcome == history.Posted {
				fmt.Fprintf(&b, "  send %s seq %d delivered=%v returned %s\n", o.Key, o.Seq, delivered[o.Key], o.Returned.Format(time.RFC3339Nano))
			}
		}
		for _, d := range h.Deliveries {
			if d.ID == s.ID && d.Seq+5 >= s.Seq && d.Seq <= s.Seq+5 {
				fmt.Fprintf(&b, "  delivery seq %d key %s %s/%d rev %d at %s\n", d.Seq, d.Key, d.Node, d.Epoch, d.Revision, d.At.Format(time.RFC3339Nano))
			}
		}
		var cs []history.Commit
		for _, c := range h.Commits {
			if c.ID == history.UnitOf(s.ID, shards) {
				cs = append(cs, c)
			}
		}
		sort.Slice(cs, func(i, j int) bool { return cs[i].StreamSeq < cs[j].StreamSeq })
		for i, c := range cs {
			if c.Cursor+50 >= s.Seq && (i == 0 || cs[i-1].Cursor <= s.Seq+50) {
				fmt.Fprintf(&b, "  commit cursor %d by %s/%d rev %d at bucket seq %d at %s\n", c.Cursor, c.Node, c.Epoch, c.Revision, c.StreamSeq, c.At.Format(time.RFC3339Nano))
				if c.Cursor > s.Seq+50 {
					break
				}
			}
		}
	}
	// The other violations: the holders of each id (around its first
	// violation), and the deliveries around each.
	holders := map[string]bool{}
	for _, v := range vs {
		if !holders[v.ID] {
			holders[v.ID] = true
			describeHolders(&b, h, v.ID, v.Seq, v.Kind, shards)
		}
		fmt.Fprintf(&b, "VIOLATION %s\n", v.text)
		for _, d := range h.Deliveries {
			if (d.ID == v.ID || history.UnitOf(d.ID, shards) == v.ID) && d.Seq+5 >= v.Seq && d.Seq <= v.Seq+5 {
				fmt.Fprintf(&b, "  delivery seq %d key %s %s/%d rev %d at %s\n", d.Seq, d.Key, d.Node, d.Epoch, d.Revision, d.At.Format(time.RFC3339Nano))
			}
		}
	}
	return b.String()
}

// describeHolders writes, for id, each holder's deliveries (how many, the
// first and the last, and those on either side of the first lost message,
// at lost, or of the first message of another violation, what) and every
// commit, in the bucket's order: which holder skipped the lost messages,
// and whether a drain or its inbox handed out what came after them.
// In a world of shards (> 0), id may be a shard unit (a per-unit
// violation's): its holders are those of every id of the shard.
func describeHolders(b *strings.Builder, h history.History, id string, lost uint64, what string, shards int) {
	type span struct {
		node          string
		epoch         uint64
		n             int
		first, last   history.Delivery
		before, after *history.Delivery
	}
	var order []*span
	spans := map[string]*span{}
	for _, d := range h.Deliveries {
		if d.ID != id && history.UnitOf(d.ID, shards) != id {
			continue
		}
		k := fmt.Sprintf("%s/%d", d.Node, d.Epoch)
		sp := spans[k]
		if sp == nil {
			sp = &span{node: d.Node, epoch: d.Epoch, first: d}
			spans[k] = sp
			order = append(order, sp)
		}
		sp.n++
		sp.last = d
		switch {
		case d.Seq < lost && (sp.before == nil || d.Seq >= sp.before.Seq):
			sp.before = &d
		case d.Seq > lost && (sp.after == nil || d.Seq < sp.after.Seq):
			sp.after = &d
		}
	}
	at := func(d *history.Delivery) string {
		if d == nil {
			return "-"
		}
		return fmt.Sprintf("%d at %s", d.Seq, d.At.Format("15:04:05.000"))
	}
	fmt.Fprintf(b, "HOLDERS of %s (first %s seq %d), in the order of their first delivery:\n", id, what, lost)
	for _, sp := range order {
		fmt.Fprintf(b, "  %s/%d: %d deliveries, first %s, last %s; last before the %s %s, first after %s\n",
			sp.node, sp.epoch, sp.n, at(&sp.first), at(&sp.last), what, at(sp.before), at(sp.after))
	}
	var cs []history.Commit
	for _, c := range h.Commits {
		if c.ID == id || c.ID == history.UnitOf(id, shards) {
			cs = append(cs, c)
		}
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i].StreamSeq < cs[j].StreamSeq })
	fmt.Fprintf(b, "COMMITS of %s, in the bucket's order:\n", id)
	for _, c := range cs {
		fmt.Fprintf(b, "  cursor %d by %s/%d rev %d at bucket seq %d at %s\n", c.Cursor, c.Node, c.Epoch, c.Revision, c.StreamSeq, c.At.Format("15:04:05.000"))
	}
}

// The violation file names, for an id that lost messages, which holder
// delivered what on either side of the first lost one and every commit
// of the id: here mb-0's message 3 was skipped by n1/2, which delivered
// 4 and committed past 3.
func TestDescribe_NamesTheHolderThatSkipped(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 5, 0, 0, 0, time.UTC)
	var h history.History
	for i, seq := range []uint64{1, 2, 3, 4} {
		h.Sends = append(h.Sends, history.Send{ID: "mb-0", Key: fmt.Sprintf("k%d", seq), Outcome: history.Posted, Seq: seq, Invoked: t0, Returned: t0.Add(time.Duration(i) * time.Millisecond)})
	}
	h.Deliveries = []history.Delivery{
		{ID: "mb-0", Key: "k1", Seq: 1, Node: "n0", Epoch: 1, At: t0.Add(time.Second)},
		{ID: "mb-0", Key: "k2", Seq: 2, Node: "n1", Epoch: 2, At: t0.Add(2 * time.Second)},
		{ID: "mb-0", Key: "k4", Seq: 4, Node: "n1", Epoch: 2, At: t0.Add(3 * time.Second)},
	}
	h.Commits = []history.Commit{
		{ID: "mb-0", Node: "n0", Epoch: 1, Cursor: 1, StreamSeq: 10, At: t0.Add(time.Second)},
		{ID: "mb-0", Node: "n1", Epoch: 2, Cursor: 4, StreamSeq: 12, At: t0.Add(4 * time.Second)},
	}
	describes(t, describe(h, nil, 0),
		"LOST mb-0 key k3 seq 3",
		"HOLDERS of mb-0 (first lost seq 3)",
		"n1/2: 2 deliveries, first 2 at 05:00:02.000, last 4 at 05:00:03.000; last before the lost 2 at 05:00:02.000, first after 4 at 05:00:03.000",
		"n0/1: 1 deliveries, first 1 at 05:00:01.000, last 1 at 05:00:01.000; last before the lost 1 at 05:00:01.000, first after -",
		"  cursor 4 by n1/2 rev 0 at bucket seq 12 at 05:00:04.000",
	)
}

// describes fails t for each of wants that the violation file's text out
// lacks.
func describes(t *testing.T, out string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(out, want) {
			t.Errorf("the description lacks %q:\n%s", want, out)
		}
	}
}
