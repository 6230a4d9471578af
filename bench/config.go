package bench

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/world"
)

// Scenarios and sizes.
const (
	ScenarioSteady   = "steady"
	ScenarioTakeover = "takeover"
	ScenarioHandoff  = "handoff"
	ScenarioFanIn    = "fan-in"
	ScenarioZipf     = "zipf"
	ScenarioCounter  = "counter"
	SizeSmoke        = "smoke"
	SizeFull         = "full"
)

// Scenarios lists the scenarios in the order of the documentation.
var Scenarios = []string{ScenarioSteady, ScenarioTakeover, ScenarioHandoff, ScenarioFanIn, ScenarioZipf, ScenarioCounter}

// Config is one run. Zero fields take the scenario's and size's defaults
// (see ScenarioSizes).
type Config struct {
	Scenario string // steady, takeover, handoff, fan-in or zipf
	Size     string // "smoke" or "full"; sets the zero fields below

	IDs       int           // mailboxes
	Producers int           // posting goroutines
	Duration  time.Duration // posting time of each side, over all rounds (not fan-in)
	// Rounds: the two sides alternate (ours, raw, ours, raw...) in this
	// many rounds of Duration/Rounds each, so that both see the same
	// machine state on a machine shared with other work. In fan-in a
	// round posts one message to every id (so Rounds is the messages per
	// id) and takes as long as it takes.
	Rounds   int
	BodySize int // bytes per message, at least 20
	Window   int // asynchronous sends in flight per producer
	// MaxBacklog bounds posted-but-undelivered messages, MaxBacklog/IDs per
	// id: producers skip an id above its share (and wait when every id is),
	// so that both sides run at their delivery capacity, the latency
	// measures delivery, not an ever-growing queue, and an id stalled by a
	// takeover does not stop the posts to the others. In fan-in the bound
	// is on the total.
	MaxBacklog int
	// Settle bounds the wait, after posting stops, for the last deliveries.
	Settle time.Duration
	TTL    time.Duration // the workers' node lease ttl

	// Takeover, handoff and zipf: Owners owner processes run OwnerExe
	// (default: this executable, which must call OwnerMain when
	// IsOwnerProcess); a fault every FaultEvery while ours posts, of the
	// kinds in Faults in turn (default kill, stop, seize; handoff: term;
	// zipf: kill; none alone: no fault).
	Owners     int
	FaultEvery time.Duration
	Faults     []string
	OwnerExe   string
	// OwnerGOMAXPROCS, above 0, is the GOMAXPROCS of each owner process
	// (0: Go's own choice, the machine's cores unless the bench's
	// environment sets GOMAXPROCS). The owners share the machine with the
	// server, the producers and each other; raw's consumers are goroutines
	// of the bench's own process (docs/experiments/owner-gomaxprocs.md).
	OwnerGOMAXPROCS int
	// Workers is the pool size of fan-in (in-process workers).
	Workers int

	// Progress, if set, is called about twice a second while a side runs.
	Progress func(Progress)
	// Log is the workers' logger (nil: a discarding one).
	Log *slog.Logger

	// Where to run: Client if set, else URL if set, else an embedded
	// server with its store in a temporary directory, removed at the end.
	// Owner processes connect to URL (or the Client's connected URL)
	// without credentials.
	Client *client.Client
	URL    string
	// Auth runs the embedded server as fencepostd --auth does (in this
	// process, with its retirer of lapsed node leases and its auditor on
	// the run's world; not with Client or URL; the scenarios with owner
	// processes only: takeover, handoff, zipf): the producers post with
	// the producer role's credentials, each owner process connects with
	// credentials of its own bound to its node, and the parent (world,
	// raw baseline, ledger, forced seizes, final drain) is the operator.
	Auth bool
	// Cluster, when 3 or more, runs an embedded cluster of that many
	// members in this process instead of one server (not with Client, URL
	// or Auth), and Replicas defaults to 3. Replicas is the replication of
	// the world's streams and of the raw side's stream (default 1).
	Cluster  int
	Replicas int
	// KillLeaders (with Cluster): in each round of fencepost, the leader of
	// the mailbox stream and then the leader of the bucket stream are
	// killed and their member started again before the next kill; in each
	// round of raw, its stream's leader twice at the same times. Each
	// kill's stall is reported (Report.LeaderKills).
	KillLeaders bool
	// Partitions, if not 0, creates ours' world with that many partitions:
	// each worker reads the posts of the partitions it serves, not every
	// post (world.Config.Partitions, docs/design/partitions.md). PartitionsDefault
	// gives it world.PartitionsFor its replicas, as fencepost world add
	// does.
	Partitions int
	// Shards, if not 0, creates ours' world sharded with that many shards
	// (world.Config.Shards): its workers hold shards, not ids, and the
	// world has no partitions.
	Shards int
	// Peer is a third side, alternated with fencepost and raw in every
	// round: PeerPcgroups runs the same producers against orbit.go's
	// partitioned consumer groups (pcgroups.go), PeerNone none. "" is
	// the default: pcgroups where the run supports it (PeerSupported),
	// else none.
	Peer string
	// PcgroupsMembers is the members of the pcgroups side's static group,
	// and its partitions (0: Workers in fan-in, IDs in steady, Owners in
	// the scenarios with owner processes).
	PcgroupsMembers int

	auth *authServer // the server of an Auth run, set by Run
}

// Peers, as Config.Peer.
const (
	PeerPcgroups = "pcgroups"
	PeerNone     = "none"
)

// PeerSupported says why the run cannot have a pcgroups side ("" if it
// can): not the counter scenario (per-id state is fencepost's), nor Auth
// (its member processes have no credentials) nor KillLeaders (its
// producers do not resend).
func (c Config) PeerSupported() string {
	switch {
	case c.Scenario == ScenarioCounter:
		return "the counter scenario counts in fencepost's per-id state"
	case c.Scenario == ScenarioCall:
		return "the call scenario compares with raw request-reply"
	case c.Auth:
		return "auth gives credentials to fencepost's owners only"
	case c.KillLeaders:
		return "kill-leaders is measured on fencepost and raw only"
	}
	return ""
}

// Progress is the state of a running side.
type Progress struct {
	Side          string // "fencepost", "raw" or "pcgroups"
	Round, Rounds int    // this round (1-based) of how many
	Elapsed       time.Duration
	Duration      time.Duration // the posting time of the round (0 in fan-in)
	Sent          int64
	Delivered     int64
	Posting       bool    // the producers run (else: waiting for the last deliveries)
	Takeovers     int64   // faults injected so far
	Done          float64 // fraction of the whole run, 0..1 (an estimate)
}

// Sizes are the defaults of the steady scenario's sizes.
var Sizes = ScenarioSizes[ScenarioSteady]

// ScenarioSizes are the defaults of each scenario and size.
var ScenarioSizes = map[string]map[string]Config{
	ScenarioSteady: {
		SizeSmoke: {IDs: 8, Producers: 2, Duration: 8 * time.Second, Rounds: 4, BodySize: 128, Window: 128, MaxBacklog: 4000, Settle: 20 * time.Second, TTL: 5 * time.Second},
		SizeFull:  {IDs: 32, Producers: 4, Duration: 60 * time.Second, Rounds: 10, BodySize: 128, Window: 256, MaxBacklog: 8000, Settle: 60 * time.Second, TTL: 5 * time.Second},
	},
	ScenarioTakeover: {
		SizeSmoke: {IDs: 8, Producers: 2, Duration: 12 * time.Second, Rounds: 3, BodySize: 128, Window: 128, MaxBacklog: 4000, Settle: 20 * time.Second, TTL: time.Second, Owners: 3, FaultEvery: 2 * time.Second},
		SizeFull:  {IDs: 32, Producers: 4, Duration: 120 * time.Second, Rounds: 10, BodySize: 128, Window: 256, MaxBacklog: 8000, Settle: 60 * time.Second, TTL: time.Second, Owners: 4, FaultEvery: 2 * time.Second},
	},
	// counter: takeover's owners and faults, each message adding one to
	// its id's counter in per-id state (bench/counter.go).
	ScenarioCounter: {
		SizeSmoke: {IDs: 8, Producers: 2, Duration: 12 * time.Second, Rounds: 3, BodySize: 128, Window: 128, MaxBacklog: 4000, Settle: 20 * time.Second, TTL: time.Second, Owners: 3, FaultEvery: 2 * time.Second},
		SizeFull:  {IDs: 32, Producers: 4, Duration: 120 * time.Second, Rounds: 10, BodySize: 128, Window: 256, MaxBacklog: 8000, Settle: 60 * time.Second, TTL: time.Second, Owners: 4, FaultEvery: 2 * time.Second},
	},
	ScenarioHandoff: {
		SizeSmoke: {IDs: 8, Producers: 2, Duration: 12 * time.Second, Rounds: 3, BodySize: 128, Window: 128, MaxBacklog: 4000, Settle: 20 * time.Second, TTL: time.Second, Owners: 3, FaultEvery: 2 * time.Second},
		SizeFull:  {IDs: 32, Producers: 4, Duration: 120 * time.Second, Rounds: 10, BodySize: 128, Window: 256, MaxBacklog: 8000, Settle: 60 * time.Second, TTL: time.Second, Owners: 4, FaultEvery: 2 * time.Second},
	},
	ScenarioFanIn: {
		SizeSmoke: {IDs: 10000, Producers: 2, Rounds: 3, BodySize: 128, Window: 256, MaxBacklog: 20000, Settle: 60 * time.Second, TTL: 5 * time.Second, Workers: 4},
		SizeFull:  {IDs: 10000, Producers: 4, Rounds: 10, BodySize: 128, Window: 256, MaxBacklog: 20000, Settle: 120 * time.Second, TTL: 5 * time.Second, Workers: 4},
	},
	// zipf: posts over 100,000 ids, each message's id drawn from a Zipf
	// distribution (s = 1.1: a few hot ids, a long tail of ids with one
	// message), 4 owner processes, one killed every 5 s and replaced.
	ScenarioZipf: {
		SizeSmoke: {IDs: 100000, Producers: 2, Duration: 20 * time.Second, Rounds: 2, BodySize: 128, Window: 256, MaxBacklog: 20000, Settle: 60 * time.Second, TTL: time.Second, Owners: 4, FaultEvery: 5 * time.Second},
		SizeFull:  {IDs: 100000, Producers: 4, Duration: 120 * time.Second, Rounds: 6, BodySize: 128, Window: 256, MaxBacklog: 40000, Settle: 120 * time.Second, TTL: time.Second, Owners: 4, FaultEvery: 5 * time.Second},
	},
}

// zipfS is the exponent of the zipf scenario's distribution.
const zipfS = 1.1

// PartitionsDefault, as Config.Partitions, gives ours' world the
// partitions fencepost world add gives a new world of its replicas
// (world.PartitionsFor): fencepost bench without --partitions.
const PartitionsDefault = -1

// withOwners says whether the scenario runs owner processes.
func (c Config) withOwners() bool {
	return c.Scenario == ScenarioTakeover || c.Scenario == ScenarioHandoff || c.Scenario == ScenarioZipf || c.Scenario == ScenarioCounter
}

func (c Config) withDefaults() (Config, error) {
	if c.Scenario == "" {
		c.Scenario = ScenarioSteady
	}
	sizes, ok := ScenarioSizes[c.Scenario]
	if !ok {
		return c, fmt.Errorf("bench: scenario %q: use steady, takeover, handoff, fan-in, zipf or counter", c.Scenario)
	}
	if c.Size == "" {
		c.Size = SizeSmoke
	}
	d, ok := sizes[c.Size]
	if !ok {
		return c, fmt.Errorf("bench: size %q: use smoke or full", c.Size)
	}
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	defD := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.IDs, d.IDs)
	def(&c.Rounds, d.Rounds)
	def(&c.Producers, d.Producers)
	def(&c.BodySize, d.BodySize)
	def(&c.Window, d.Window)
	def(&c.MaxBacklog, d.MaxBacklog)
	def(&c.Owners, d.Owners)
	def(&c.Workers, d.Workers)
	defD(&c.Duration, d.Duration)
	defD(&c.Settle, d.Settle)
	defD(&c.TTL, d.TTL)
	defD(&c.FaultEvery, d.FaultEvery)
	c.BodySize = max(c.BodySize, 20)
	if c.Scenario == ScenarioFanIn {
		c.Duration = 0
	}
	if c.Scenario == ScenarioZipf && len(c.Faults) == 0 {
		c.Faults = []string{FaultKill}
	}
	switch {
	case c.Auth && (c.Client != nil || c.URL != ""):
		return c, errors.New("bench: auth runs a fencepostd --auth of its own: give no client or URL")
	case c.Cluster != 0 && (c.Client != nil || c.URL != "" || c.Auth):
		return c, errors.New("bench: cluster runs an embedded cluster of its own: give no client, URL or auth")
	case c.Cluster != 0 && (c.Cluster < 3 || c.Cluster > 5):
		return c, fmt.Errorf("bench: cluster of %d members: use 3 to 5", c.Cluster)
	case c.KillLeaders && c.Cluster == 0:
		return c, errors.New("bench: kill-leaders kills members of the embedded cluster: give cluster 3")
	case (c.Owners > 0 || len(c.Faults) > 0 || c.OwnerGOMAXPROCS != 0) && !c.withOwners():
		return c, fmt.Errorf("bench: owners, faults and owner GOMAXPROCS are of owner processes: scenario %s has none (use takeover, handoff, zipf or counter)", c.Scenario)
	case c.OwnerGOMAXPROCS < 0:
		return c, fmt.Errorf("bench: owner GOMAXPROCS %d: give 1 or more (0: Go's own choice)", c.OwnerGOMAXPROCS)
	case c.Auth && !c.withOwners():
		return c, fmt.Errorf("bench: auth gives owner processes credentials of their own: scenario %s has none (use takeover, handoff or zipf)", c.Scenario)
	}
	if c.Replicas == 0 {
		c.Replicas = 1
		if c.Cluster != 0 {
			c.Replicas = 3
		}
	}
	if c.Replicas < 1 || c.Replicas > 5 || (c.Cluster != 0 && c.Replicas > c.Cluster) {
		return c, fmt.Errorf("bench: replicas %d: use 1 to 5, at most the cluster's members", c.Replicas)
	}
	if c.Shards < 0 || c.Shards > wire.MaxShards {
		return c, fmt.Errorf("bench: shards %d: use 1 to %d (0: a per-id world)", c.Shards, wire.MaxShards)
	}
	if c.Shards > 0 && c.Partitions > 0 {
		return c, fmt.Errorf("bench: a sharded world has no partitions: give --shards or --partitions, not both")
	}
	if c.Partitions == PartitionsDefault {
		c.Partitions = world.PartitionsFor(c.Replicas)
		if c.Shards > 0 {
			c.Partitions = 0
		}
	}
	if err := c.peerDefaults(); err != nil {
		return c, err
	}
	if c.withOwners() {
		for _, k := range c.Faults {
			if k == FaultNone && len(c.Faults) > 1 {
				return c, fmt.Errorf("bench: faults %q: none goes alone", strings.Join(c.Faults, ","))
			}
			if k != FaultKill && k != FaultStop && k != FaultSeize && k != FaultTerm && k != FaultNone {
				return c, fmt.Errorf("bench: fault %q: use kill, stop, seize, term or none", k)
			}
		}
		if c.OwnerExe == "" {
			exe, err := os.Executable()
			if err != nil {
				return c, fmt.Errorf("bench: the owner executable: %w", err)
			}
			c.OwnerExe = exe
		}
	}
	return c, nil
}

// peerDefaults resolves Peer and PcgroupsMembers.
func (c *Config) peerDefaults() error {
	why := c.PeerSupported()
	switch c.Peer {
	case "":
		c.Peer = PeerPcgroups
		if why != "" {
			c.Peer = PeerNone
		}
	case PeerNone:
	case PeerPcgroups:
		if why != "" {
			return fmt.Errorf("bench: peer pcgroups: %s (use peer none)", why)
		}
	default:
		return fmt.Errorf("bench: peer %q: use pcgroups or none", c.Peer)
	}
	if c.PcgroupsMembers < 0 || c.PcgroupsMembers > MaxPcgroupsMembers {
		return fmt.Errorf("bench: pcgroups members %d: use 1 to %d", c.PcgroupsMembers, MaxPcgroupsMembers)
	}
	if c.PcgroupsMembers == 0 {
		switch {
		case c.withOwners():
			c.PcgroupsMembers = c.Owners
		case c.Scenario == ScenarioFanIn:
			c.PcgroupsMembers = c.Workers
		default:
			c.PcgroupsMembers = c.IDs
		}
		c.PcgroupsMembers = min(max(c.PcgroupsMembers, 1), MaxPcgroupsMembers)
	}
	return nil
}

// MaxPcgroupsMembers bounds Config.PcgroupsMembers: each member is a
// consumer, with an instance in every member process.
const MaxPcgroupsMembers = 256
