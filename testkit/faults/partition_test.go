package faults

import (
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/server"
	"github.com/fencepost/fencepost/server/servertest"
)

// routeNet is a 3-node in-process cluster whose routes all go through TCP
// proxies, one per ordered pair of members: member i dials member j only
// at proxy links[i][j]. Cutting the pair {i, j} refuses and closes both
// proxies of the pair, so no route between i and j exists until it heals,
// while both keep their clients and their routes to the third member.
//
// Members learn each other's route addresses by gossip too (nats-server
// connects on its own to a member another one told it about, at the
// address that member advertises). That would go around the proxies, so
// every member advertises the address of a sink that accepts and closes
// every connection: the only routes that work are the configured ones,
// through the proxies. sink.Accepted counts the attempts it stopped.
type routeNet struct {
	Nodes []*servertest.Node
	links [][]*Proxy
	sink  *sink
	mu    sync.Mutex
	cut   map[[2]int]bool
}

// sink accepts connections and closes them at once.
type sink struct {
	ln       net.Listener
	Accepted atomic.Int64
	done     chan struct{}
}

func newSink() (*sink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &sink{ln: ln, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.Accepted.Add(1)
			c.Close()
		}
	}()
	return s, nil
}

func (s *sink) Close() { s.ln.Close(); <-s.done }

// newRouteNet starts 3 members with proxied routes and waits for a
// JetStream meta leader.
func newRouteNet(t testing.TB) *routeNet {
	t.Helper()
	const n = 3
	rn := &routeNet{cut: map[[2]int]bool{}}
	var err error
	if rn.sink, err = newSink(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rn.sink.Close)
	var ports []int
	for i := 0; i < n; i++ {
		ports = append(ports, freePort(t))
	}
	rn.links = make([][]*Proxy, n)
	for i := 0; i < n; i++ {
		rn.links[i] = make([]*Proxy, n)
		for j := 0; j < n; j++ {
			if i == j {
				continue
			}
			p, err := NewProxy(fmt.Sprintf("127.0.0.1:%d", ports[j]))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(p.Close)
			rn.links[i][j] = p
		}
	}
	for i := 0; i < n; i++ {
		var routes []string
		for j := 0; j < n; j++ {
			if j != i {
				routes = append(routes, rn.links[i][j].URL())
			}
		}
		cfg := server.Config{Name: fmt.Sprintf("fp-%d", i+1), StoreDir: t.TempDir(), Port: -1, ClusterName: "fencepost-routes", ClusterPort: ports[i], Routes: routes}
		opts, err := cfg.Options()
		if err != nil {
			t.Fatal(err)
		}
		opts.Cluster.Advertise = rn.sink.ln.Addr().String()
		s, err := server.Start(server.Config{Opts: opts})
		if err != nil {
			t.Fatalf("member %d: %v", i+1, err)
		}
		node := &servertest.Node{Server: s}
		t.Cleanup(func() { node.Server.Stop() })
		rn.Nodes = append(rn.Nodes, node)
	}
	servertest.CheckFor(t, 30*time.Second, 50*time.Millisecond, rn.healthy)
	return rn
}

// healthy: every member current and one meta leader.
func (rn *routeNet) healthy() error {
	leaders := 0
	for _, node := range rn.Nodes {
		if !node.JetStreamIsCurrent() {
			return fmt.Errorf("%s: JetStream not current", node.Name())
		}
		if node.JetStreamIsLeader() {
			leaders++
		}
	}
	if leaders != 1 {
		return fmt.Errorf("%d JetStream meta leaders", leaders)
	}
	return nil
}

// Cluster is the members as a servertest.Cluster (for URL and leader
// lookups; its members are not restarted).
func (rn *routeNet) Cluster() *servertest.Cluster { return &servertest.Cluster{Nodes: rn.Nodes} }

// Cut takes the routes between members i and j down until Heal.
func (rn *routeNet) Cut(i, j int) {
	rn.mu.Lock()
	rn.cut[[2]int{min(i, j), max(i, j)}] = true
	rn.mu.Unlock()
	for _, p := range []*Proxy{rn.links[i][j], rn.links[j][i]} {
		p.Refuse(time.Hour)
		p.CutAll()
	}
}

// Heal lets members i and j route to each other again (they reconnect on
// their own, within nats-server's route reconnect delay).
func (rn *routeNet) Heal(i, j int) {
	rn.mu.Lock()
	delete(rn.cut, [2]int{min(i, j), max(i, j)})
	rn.mu.Unlock()
	rn.links[i][j].Refuse(0)
	rn.links[j][i].Refuse(0)
}

// Isolate cuts member i from every other member.
func (rn *routeNet) Isolate(i int) {
	for j := range rn.Nodes {
		if j != i {
			rn.Cut(i, j)
		}
	}
}

// HealAll heals every cut pair.
func (rn *routeNet) HealAll() {
	for i := range rn.Nodes {
		for j := range rn.Nodes {
			if i < j {
				rn.Heal(i, j)
			}
		}
	}
}

// index is the position of the member named name, or -1.
func (rn *routeNet) index(name string) int {
	for i, n := range rn.Nodes {
		if n.Name() == name {
			return i
		}
	}
	return -1
}

// routes is a line of each member's route count, for logs.
func (rn *routeNet) routes() string {
	var b []string
	for _, n := range rn.Nodes {
		b = append(b, fmt.Sprintf("%s=%d", n.Name(), n.NumRoutes()))
	}
	return strings.Join(b, " ")
}

// leader is the index of the member that says it leads stream, or -1.
func (rn *routeNet) leader(stream string) int {
	for i, n := range rn.Nodes {
		if n.JetStreamIsStreamLeader("$G", stream) {
			return i
		}
	}
	return -1
}

// stepDown asks stream's leader to hand its leadership to another
// replica.
func (d *deployment) stepDown(t testing.TB, stream string) {
	for attempt := 0; attempt < 20; attempt++ {
		m, err := d.admin.JetStream().Conn().Request("$JS.API.STREAM.LEADER.STEPDOWN."+stream, nil, 2*time.Second)
		if err == nil && !strings.Contains(string(m.Data), `"error"`) {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("step down of %s's leader refused", stream)
}

// leaderBesides is the index of a member other than skip that says it
// leads stream, or -1.
func (rn *routeNet) leaderBesides(stream string, skip int) int {
	for i, n := range rn.Nodes {
		if i != skip && n.JetStreamIsStreamLeader("$G", stream) {
			return i
		}
	}
	return -1
}

// partition injects one partition fault of a ClusterRoutes run, heals it,
// and waits until every member is current again and the world answers. It
// fills in f's target (the member or route cut), start and end (the heal).
//
//   - PartMinority: the leader of the mailbox stream (odd faults) or of the
//     bucket stream (even) is cut off from both other members until the
//     majority has elected a new leader and the old one has stepped down
//     (at most minorityCap; with sc.HealAtElection, healed as soon as the new
//     leader is elected). Its clients stay connected to it. The note says
//     when the majority elected a new leader and whether the old one still
//     called itself leader then (two leaders at once).
//   - PartIsolate: a member that leads neither stream (the one with the
//     most clients) is cut off from the others for sc.Cut; its clients
//     keep their connections to it and get no answers.
//   - PartFlap: for sc.Cut, every 100 to 500 ms, cut and heal the route
//     between the mailbox stream's leader and another member, or with
//     sc.FlapLeader every route of the bucket stream's leader.
func partition(t testing.TB, d *deployment, sc scenario, kind string, res *outcome, lap func(string), f *faultAt) {
	rn := d.routes
	if rn == nil {
		t.Fatalf("%s needs the %s deployment", kind, ClusterRoutes)
	}
	mb, kv := wire.MailboxStream(d.world), wire.BucketStream(d.world)
	start := time.Now()
	switch kind {
	case PartMinority:
		stream := []string{mb, kv}[res.Partition.Minority%2] // mailbox first
		switch sc.MinorityOf {
		case "mailbox":
			stream = mb
		case "bucket":
			stream = kv
		}
		victim := rn.leader(stream)
		if victim < 0 {
			victim = rand.IntN(len(rn.Nodes))
		}
		if sc.MinorityOf == "mailbox" && rn.leader(kv) == victim {
			// Only the mailbox stream's leader: move the bucket stream's
			// leadership away first (section 6 has why).
			d.stepDown(t, kv)
			if !waitUntil(30*time.Second, func() bool { l := rn.leader(kv); return l >= 0 && l != victim }) {
				t.Fatalf("the bucket stream's leader did not move off %s", rn.Nodes[victim].Name())
			}
		}
		clients := rn.Nodes[victim].NumClients()
		f.target, f.at = rn.Nodes[victim].Name(), time.Now()
		rn.Isolate(victim)
		// Heal once the majority has a new leader and the old one has
		// stepped down (it notices its lost quorum after 10 to 20 s), at
		// most after sc.Cut; with HealAtElection as soon as the majority
		// has its new leader, while the old one may still lead.
		elected, dual, stepped := time.Duration(-1), false, time.Duration(-1)
		for time.Now().Before(start.Add(minorityCap)) {
			if elected < 0 && rn.leaderBesides(stream, victim) >= 0 {
				elected = time.Since(start)
				dual = rn.Nodes[victim].JetStreamIsStreamLeader("$G", stream)
			}
			if elected >= 0 && stepped < 0 && !rn.Nodes[victim].JetStreamIsStreamLeader("$G", stream) {
				stepped = time.Since(start)
			}
			if elected >= 0 && (sc.HealAtElection || stepped >= 0) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		rn.HealAll()
		res.Partition.Minority++
		what := "no new leader during the cut"
		if elected >= 0 {
			res.Partition.Elected++
			down := "not yet"
			if stepped >= 0 {
				down = "after " + stepped.Round(time.Millisecond).String()
			}
			what = fmt.Sprintf("a new leader after %v, the old one still leading then: %v, stepped down %s; healed after %v", elected.Round(time.Millisecond), dual, down, time.Since(start).Round(time.Millisecond))
			if dual {
				res.Partition.Dual++
			}
		}
		res.Notes = append(res.Notes, fmt.Sprintf("%s: %s, leader of %s with %d clients, cut off: %s", kind, rn.Nodes[victim].Name(), stream, clients, what))
	case PartIsolate:
		victim, most := -1, -1
		for i, n := range rn.Nodes {
			if i != rn.leader(mb) && i != rn.leader(kv) && n.NumClients() > most {
				victim, most = i, n.NumClients()
			}
		}
		if victim < 0 { // one member leads both: cut a follower anyway
			victim = (rn.leader(mb) + 1) % len(rn.Nodes)
			most = rn.Nodes[victim].NumClients()
		}
		f.target, f.at = rn.Nodes[victim].Name(), time.Now()
		rn.Isolate(victim)
		for time.Now().Before(start.Add(sc.Cut)) {
			time.Sleep(20 * time.Millisecond)
		}
		rn.HealAll()
		res.Partition.Isolated++
		res.Notes = append(res.Notes, fmt.Sprintf("%s: %s with %d clients cut off for %v", kind, rn.Nodes[victim].Name(), most, sc.Cut))
	case PartFlap:
		// The route between the mailbox stream's leader and one other
		// member (the third keeps both connected); with sc.FlapLeader
		// every route of the bucket stream's leader (it loses and regains
		// its quorum again and again).
		leaderOnly := sc.FlapLeader
		stream := mb
		if leaderOnly {
			stream = kv
		}
		a := rn.leader(stream)
		if a < 0 {
			a = 0
		}
		b := (a + 1 + rand.IntN(len(rn.Nodes)-1)) % len(rn.Nodes)
		f.target, f.at = rn.Nodes[a].Name()+"-"+rn.Nodes[b].Name(), time.Now()
		if leaderOnly {
			f.target = rn.Nodes[a].Name()
		}
		flaps := 0
		for time.Now().Before(start.Add(sc.Cut)) {
			if leaderOnly {
				rn.Isolate(a)
			} else {
				rn.Cut(a, b)
			}
			time.Sleep(time.Duration(100+rand.IntN(400)) * time.Millisecond)
			rn.HealAll()
			time.Sleep(time.Duration(100+rand.IntN(400)) * time.Millisecond)
			flaps++
		}
		res.Partition.Flaps += flaps
		what := fmt.Sprintf("the route %s-%s", rn.Nodes[a].Name(), rn.Nodes[b].Name())
		if leaderOnly {
			what = fmt.Sprintf("every route of %s (leader of %s)", rn.Nodes[a].Name(), stream)
		}
		res.Notes = append(res.Notes, fmt.Sprintf("%s: %s cut and healed %d times in %v", kind, what, flaps, sc.Cut))
	}
	lap(kind + " healed")
	healed := time.Now()
	f.end = healed
	if !waitUntil(60*time.Second, func() bool { return rn.healthy() == nil && rn.leader(mb) >= 0 && rn.leader(kv) >= 0 }) {
		t.Fatalf("cluster not whole 60 s after healing %s: %v (%s)", kind, rn.healthy(), rn.routes())
	}
	if err := d.waitWorld(60 * time.Second); err != nil {
		t.Fatalf("world after healing %s: %v", kind, err)
	}
	res.Partition.HealWait = max(res.Partition.HealWait, time.Since(healed))
	lap("cluster whole, world answers")
}

// TestRouteNet_CutAndHeal: a cut pair has no route between its members
// (and gossip does not find one around the proxies), the other pairs keep
// theirs, and a healed pair routes again.
func TestRouteNet_CutAndHeal(t *testing.T) {
	rn := newRouteNet(t)
	// Full mesh: each member has routes to both others (a pool of them
	// per remote, so count remotes through the proxies instead).
	connected := func(i, j int) bool {
		return rn.links[i][j].open()+rn.links[j][i].open() > 0
	}
	if !waitUntil(10*time.Second, func() bool { return connected(0, 1) && connected(0, 2) && connected(1, 2) }) {
		t.Fatalf("no full mesh: %s", rn.routes())
	}
	rn.Isolate(0)
	if !waitUntil(5*time.Second, func() bool { return rn.Nodes[0].NumRoutes() == 0 }) {
		t.Fatalf("an isolated member keeps its routes: %s", rn.routes())
	}
	// Well past nats-server's route reconnect delay (1 s): still cut.
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if connected(0, 1) || connected(0, 2) {
			t.Fatalf("an isolated member has a route: %s", rn.routes())
		}
		if rn.Nodes[0].NumRoutes() != 0 {
			t.Fatalf("an isolated member has a route around the proxies: %s (sink stopped %d)", rn.routes(), rn.sink.Accepted.Load())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !connected(1, 2) {
		t.Fatalf("the majority lost its route: %s", rn.routes())
	}
	rn.HealAll()
	if !waitUntil(20*time.Second, func() bool { return connected(0, 1) && connected(0, 2) && rn.healthy() == nil }) {
		t.Fatalf("not healed: %s: %v", rn.routes(), rn.healthy())
	}
}

// minorityCap bounds a PartMinority cut: an election takes 4 to 9 s
// without the leader's heartbeats, the old leader steps down 10 to 20 s
// after it lost its quorum.
const minorityCap = 30 * time.Second

// partitionFigures count what the partitions of a run did.
type partitionFigures struct {
	Minority, Elected, Dual int // minority-leader cuts, those in which the majority elected a new leader, and those with two leaders at once
	Isolated, Flaps         int
	HealWait                time.Duration // longest wait from a heal until the cluster was whole and the world answered
}
