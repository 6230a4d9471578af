package faults

import (
	"fmt"
	"math/rand/v2"
	"net"
	"sort"
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
	logs  []*memberLog // each member's own notices, warnings and errors
	mu    sync.Mutex
	cut   map[[2]int]bool
}

// memberLog keeps a member's notices, warnings and errors with their
// times (the newest 4000 to 5000), so that a fault can say what
// nats-server did meanwhile: which routes it closed and why, which
// leaders it elected.
type memberLog struct {
	mu    sync.Mutex
	lines []logLine
}

type logLine struct {
	at   time.Time
	text string
}

func (l *memberLog) add(format string, v []any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.lines) == 5000 {
		l.lines = append(l.lines[:0], l.lines[1000:]...)
	}
	l.lines = append(l.lines, logLine{time.Now(), fmt.Sprintf(format, v...)})
}

// since is what was logged at or after from that contains substr.
func (l *memberLog) since(from time.Time, substr string) []logLine {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []logLine
	for _, ln := range l.lines {
		if !ln.at.Before(from) && strings.Contains(ln.text, substr) {
			out = append(out, ln)
		}
	}
	return out
}

func (l *memberLog) Noticef(format string, v ...any) { l.add(format, v) }
func (l *memberLog) Warnf(format string, v ...any)   { l.add("[WRN] "+format, v) }
func (l *memberLog) Errorf(format string, v ...any)  { l.add("[ERR] "+format, v) }
func (l *memberLog) Fatalf(format string, v ...any)  { l.add("[FTL] "+format, v) }
func (l *memberLog) Debugf(string, ...any)           {}
func (l *memberLog) Tracef(string, ...any)           {}

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
		log := &memberLog{}
		rn.logs = append(rn.logs, log)
		s, err := server.Start(server.Config{Opts: opts, Logger: log})
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

// HealAll heals every cut pair and ends every Hold.
func (rn *routeNet) HealAll() {
	for i := range rn.Nodes {
		for j := range rn.Nodes {
			if i < j {
				rn.Heal(i, j)
			}
		}
	}
	rn.Release()
}

// Hold stops the bytes on every route between member i and the others
// without closing a connection, until Release: out, the bytes i sends;
// in, the bytes it receives (both: a silent partition; one: an
// asymmetric one). Member i is the client side of links[i][j] (it dials j
// there) and the server side of links[j][i], and nats-server pools
// several routes per pair, dialed by either member, so both proxies of
// each pair hold, each the direction that carries i's bytes (or the
// others'). What is sent meanwhile waits in the proxies and the sockets,
// and flows after Release unless nats-server closed the route itself.
func (rn *routeNet) Hold(i int, out, in bool) {
	var dialer, dialed Direction // on links[i][j], on links[j][i]
	if out {
		dialer, dialed = dialer|ToServer, dialed|ToClient
	}
	if in {
		dialer, dialed = dialer|ToClient, dialed|ToServer
	}
	for j := range rn.Nodes {
		if j != i {
			rn.links[i][j].Pause(dialer)
			rn.links[j][i].Pause(dialed)
		}
	}
}

// Release ends every Hold: the held bytes flow.
func (rn *routeNet) Release() {
	for _, row := range rn.links {
		for _, p := range row {
			if p != nil {
				p.Resume(BothWays)
			}
		}
	}
}

// accepted is how many route connections the proxies of member i's pairs
// have accepted so far (a new one: a route that nats-server dialed again).
func (rn *routeNet) accepted(i int) int64 {
	var n int64
	for j := range rn.Nodes {
		if j != i {
			n += rn.links[i][j].Accepted.Load() + rn.links[j][i].Accepted.Load()
		}
	}
	return n
}

// openRoutes is how many route connections the proxies of member i's pairs
// forward now.
func (rn *routeNet) openRoutes(i int) int {
	n := 0
	for j := range rn.Nodes {
		if j != i {
			n += rn.links[i][j].open() + rn.links[j][i].open()
		}
	}
	return n
}

// logged is every member's lines since from that contain substr, each
// prefixed with its member and its time after from.
func (rn *routeNet) logged(from time.Time, substr string) []string {
	var out []string
	for i, l := range rn.logs {
		for _, ln := range l.since(from, substr) {
			out = append(out, fmt.Sprintf("%s +%v: %s", rn.Nodes[i].Name(), ln.at.Sub(from).Round(time.Millisecond), ln.text))
		}
	}
	return out
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

// stableLeader is the index of the one member that has called itself
// stream's leader, alone, for the last d, waiting up to total for one;
// -1 if none did.
func (rn *routeNet) stableLeader(stream string, d, total time.Duration) int {
	return settled(func() int {
		if l, n := rn.leaders(stream); n == 1 {
			return l
		}
		return -1
	}, d, total)
}

// leaders is how many members call themselves stream's leader now, and
// the index of the last of them (-1: none).
func (rn *routeNet) leaders(stream string) (last, n int) {
	last = -1
	for i, m := range rn.Nodes {
		if m.JetStreamIsStreamLeader("$G", stream) {
			last, n = i, n+1
		}
	}
	return last, n
}

// settled polls now every 20 ms until it has answered the same value,
// not -1, for d, and returns it; -1 if that did not happen within total.
func settled(now func() int, d, total time.Duration) int {
	deadline := time.Now().Add(total)
	last, since := -1, time.Now()
	for time.Now().Before(deadline) {
		if v := now(); v != last {
			last, since = v, time.Now()
		}
		if last >= 0 && time.Since(since) >= d {
			return last
		}
		time.Sleep(20 * time.Millisecond)
	}
	return -1
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
//   - PartSilent: the routes between the leader of the mailbox stream (odd
//     faults) or of the bucket stream (even) and both other members pass
//     no bytes either way and none is closed (a network that silently
//     drops packets), until the majority has elected a new leader and the
//     old one has stepped down, then heldPast more (at most heldCap; with
//     sc.Cut, for sc.Cut); then the held bytes flow on the same
//     connections, unless nats-server closed them itself (holdLeader).
//   - PartAsym: the same, but only the bytes of the others to the leader
//     are held: it reaches them, they do not reach it.
func partition(t testing.TB, d *deployment, sc scenario, kind string, res *outcome, lap func(string), f *faultAt) {
	rn := d.routes
	if rn == nil {
		t.Fatalf("%s needs the %s deployment", kind, ClusterRoutes)
	}
	mb, kv := wire.MailboxStream(d.world), wire.BucketStream(d.world)
	start := time.Now()
	var afterWhole func() // a note to finish once the cluster is whole again
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
	case PartSilent, PartAsym:
		afterWhole = holdLeader(t, rn, kind, []string{mb, kv}, sc.Cut, res, f)
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
	if afterWhole != nil {
		afterWhole()
	}
	lap("cluster whole, world answers")
}

// heldPast is how long a PartSilent or PartAsym goes on after the
// majority has its new leader and the old one has stepped down: the new
// leader serves while the old one is still cut off. heldCap bounds the
// hold: under PartAsym the old leader's heartbeats still reach the
// others, so they start their election only after it stepped down (12 to
// 19 s after the start of the hold), and elected after 17 to 34 s
// (docs/reliability.md 3.2).
const (
	heldPast = 3 * time.Second
	heldCap  = 45 * time.Second
)

// holdLeader injects a PartSilent or PartAsym: the leader of the mailbox
// stream (the kind's odd faults) or of the bucket stream (even; streams is
// the two) has its routes held (routeNet.Hold), both ways (PartSilent), or
// only what the others send it (PartAsym: it reaches them, they do not
// reach it), no connection closed, its clients connected to it, until the
// majority has elected a new leader and the old one has stepped down,
// then heldPast more, at most heldCap (or for hold, when positive); then
// the held bytes flow. It notes the election, the step down, the routes
// nats-server closed by itself (its pings, its write deadline) and those
// it dialed again, and returns what to note once the cluster is whole
// again.
func holdLeader(t testing.TB, rn *routeNet, kind string, streams []string, hold time.Duration, res *outcome, f *faultAt) func() {
	pf := &res.Partition
	n := &pf.Silent
	if kind == PartAsym {
		n = &pf.Asym
	}
	stream := streams[*n%2]
	// A leader that has led for a while: after a long hold's release the
	// old leader's term deposes the majority's leaders (3.2), and a member
	// that still calls itself leader may be about to step down.
	settled := time.Now()
	victim := rn.stableLeader(stream, time.Second, 30*time.Second)
	waited := time.Since(settled)
	if victim < 0 {
		victim = rand.IntN(len(rn.Nodes))
	}
	name := rn.Nodes[victim].Name()
	clients, routes, accepted := rn.Nodes[victim].NumClients(), rn.Nodes[victim].NumRoutes(), rn.accepted(victim)
	f.target, f.at = name, time.Now()
	start := f.at
	rn.Hold(victim, kind == PartSilent, true)
	w := rn.watchHold(stream, victim, start, hold)
	elected, dual, stepped, minRoutes := w.elected, w.dual, w.stepped, min(routes, w.minRoutes)
	open, redialed := rn.openRoutes(victim), rn.accepted(victim)-accepted
	closed := rn.routeEvents(start)
	elections := len(rn.logged(start, "new stream leader for '$G > "+stream+"'"))
	rn.Release()
	released := time.Now()
	*n++
	for _, l := range closed {
		if strings.Contains(l, "Router connection closed") {
			pf.HeldClosed++
		}
	}
	pf.HeldRedialed += redialed
	ms := func(d time.Duration) string {
		if d < 0 {
			return "never"
		}
		return "after " + d.Round(time.Millisecond).String()
	}
	if elected >= 0 {
		pf.HeldElected++
		if dual {
			pf.HeldDual++
		}
	}
	how := "both ways"
	if kind == PartAsym {
		how = "the others' bytes to it only"
	}
	pf.HeldElections += elections
	note := fmt.Sprintf("%s: %s, leader of %s (alone, for 1 s, after %v) with %d clients, routes held (%s) for %v: a new leader %s (the old one still leading then: %v), the old one stepped down %s, %d elections of a leader of %s in all during the hold; its routes: %d before, at least %d during the hold, %d connections open through the proxies at the release, %d dialed again during the hold",
		kind, name, stream, waited.Round(time.Millisecond), clients, how, released.Sub(start).Round(time.Millisecond), ms(elected), dual, ms(stepped), elections, stream, routes, minRoutes, open, redialed)
	if len(closed) == 0 {
		note += "; nats-server closed no route during the hold"
	} else {
		note += fmt.Sprintf("; nats-server during the hold: %s", summarizeEvents(closed))
	}
	return func() {
		after := rn.routeEvents(released)
		again := rn.accepted(victim) - accepted - redialed
		pf.HeldRedialed += again
		note += fmt.Sprintf("; after the release, %d route connections dialed again", again)
		if len(after) > 0 {
			note += fmt.Sprintf(", nats-server: %s", summarizeEvents(after))
		}
		res.Notes = append(res.Notes, note)
	}
}

// holdWatch is what watchHold saw of a stream's leaders while the routes
// of its leader, the victim, were held; times are from the start of the
// hold, -1 for never.
type holdWatch struct {
	elected    time.Duration // when another member first called itself leader
	dual       bool          // the victim still called itself leader then
	stepped    time.Duration // when the victim first did not
	minRoutes  int           // the fewest routes the victim had
	othersNone time.Duration // about how long, after elected, no other member led
}

// watchHold polls every 20 ms, from start (the hold's), until hold has
// passed (when positive), or else until the majority has elected a new
// leader and the victim has stepped down and heldPast more has passed, at
// most heldCap.
func (rn *routeNet) watchHold(stream string, victim int, start time.Time, hold time.Duration) holdWatch {
	w := holdWatch{elected: -1, stepped: -1, minRoutes: rn.Nodes[victim].NumRoutes()}
	limit := heldCap
	if hold > 0 {
		limit = hold
	}
	for time.Since(start) < limit {
		other := rn.leaderBesides(stream, victim)
		if w.elected < 0 && other >= 0 {
			w.elected = time.Since(start)
			w.dual = rn.Nodes[victim].JetStreamIsStreamLeader("$G", stream)
		}
		if w.elected >= 0 && other < 0 {
			w.othersNone += 20 * time.Millisecond
		}
		if w.stepped < 0 && !rn.Nodes[victim].JetStreamIsStreamLeader("$G", stream) {
			w.stepped = time.Since(start)
		}
		w.minRoutes = min(w.minRoutes, rn.Nodes[victim].NumRoutes())
		if hold <= 0 && w.elected >= 0 && w.stepped >= 0 && time.Since(start) >= max(w.elected, w.stepped)+heldPast {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	return w
}

// summarizeEvents counts routeEvents lines by what happened ("Stale
// Connection", "Duplicate Route", "Slow Consumer", ...), in the order each
// first happened, with the times of the first and the last: "Stale
// Connection x8 (+1m23.3s to +1m23.5s)".
func summarizeEvents(lines []string) string {
	type group struct {
		what        string
		n           int
		first, last time.Duration
	}
	var groups []*group
	by := map[string]*group{}
	for _, l := range lines {
		member, rest, _ := strings.Cut(l, ": ")
		_, off, _ := strings.Cut(member, " +")
		at, err := time.ParseDuration(off)
		if err != nil {
			at = -1
		}
		what := "other"
		switch {
		case strings.Contains(rest, "Router connection closed: "):
			_, what, _ = strings.Cut(rest, "Router connection closed: ")
			what, _, _ = strings.Cut(what, " - ")
		case strings.Contains(rest, "Slow Consumer"):
			what = "Slow Consumer"
		}
		g := by[what]
		if g == nil {
			g = &group{what: what, first: at, last: at}
			by[what] = g
			groups = append(groups, g)
		}
		g.n++
		g.first, g.last = min(g.first, at), max(g.last, at)
	}
	sort.SliceStable(groups, func(i, j int) bool { return groups[i].first < groups[j].first })
	var b []string
	for _, g := range groups {
		b = append(b, fmt.Sprintf("%s x%d (+%v to +%v)", g.what, g.n, g.first, g.last))
	}
	return strings.Join(b, ", ")
}

// routeEvents is what the members logged since from about their routes
// to each other: a route closed (and why), a slow consumer route (its
// write deadline). The gossiped routes that the sink turns away are left
// out.
func (rn *routeNet) routeEvents(from time.Time) []string {
	var out []string
	sink := rn.sink.ln.Addr().String()
	for _, substr := range []string{"Router connection closed", "Slow Consumer"} {
		for _, l := range rn.logged(from, substr) {
			if !strings.Contains(l, sink) {
				out = append(out, l)
			}
		}
	}
	return out
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
	// Held routes (PartSilent, PartAsym): how many of each, those in
	// which the majority elected a new leader and those with two leaders
	// at once; the route connections nats-server closed by itself during
	// the holds (as each end logged it: a connection closed at both ends
	// counts twice) and those dialed again (during or after).
	Silent, Asym, HeldElected, HeldDual int
	HeldElections                       int // leaders of the held stream elected during the holds, as the members logged them
	HeldClosed                          int
	HeldRedialed                        int64
}

// TestSummarizeEvents: route events counted by what happened, in the
// order each first happened, with their first and last times.
func TestSummarizeEvents(t *testing.T) {
	got := summarizeEvents([]string{
		"fp-2 +1m23.4s: 127.0.0.1:1 - rid:9 - Router connection closed: Stale Connection - Remote: fp-1",
		"fp-2 +1m40s: 127.0.0.1:1 - rid:30 - Router connection closed: Duplicate Route - Remote: fp-1",
		"fp-1 +1m23.3s: 127.0.0.1:2 - rid:15 - Router connection closed: Stale Connection - Remote: fp-2",
		"fp-1 +1m30s: 127.0.0.1:3 - rid:40 - Router connection closed: Client Closed",
		"fp-3 +12s: 127.0.0.1:4 - rid:5 - Slow Consumer Detected: WriteDeadline of 10s exceeded with 3 chunks of 100 total bytes.",
	})
	want := "Slow Consumer x1 (+12s to +12s), Stale Connection x2 (+1m23.3s to +1m23.4s), Client Closed x1 (+1m30s to +1m30s), Duplicate Route x1 (+1m40s to +1m40s)"
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	if got := summarizeEvents(nil); got != "" {
		t.Errorf("nothing: %q", got)
	}
}

// TestSettled: a value counts once it has held for d; a change, or -1,
// starts the wait again; none that holds long enough gives -1.
func TestSettled(t *testing.T) {
	start := time.Now()
	// 1 for 100 ms, none for 100 ms, then 2 for good.
	v := settled(func() int {
		switch since := time.Since(start); {
		case since < 100*time.Millisecond:
			return 1
		case since < 200*time.Millisecond:
			return -1
		default:
			return 2
		}
	}, 150*time.Millisecond, 5*time.Second)
	if v != 2 {
		t.Errorf("got %d, want 2 (1 did not hold for 150 ms)", v)
	}
	if took := time.Since(start); took < 350*time.Millisecond {
		t.Errorf("returned after %v: before 2 had held for 150 ms", took)
	}
	flip := 0
	if v := settled(func() int { flip++; return flip % 2 }, 100*time.Millisecond, 300*time.Millisecond); v != -1 {
		t.Errorf("a value that changes at every poll: got %d, want -1", v)
	}
}
