package bench

// Report is the outcome of a run. The JSON names are a contract for
// machines (fencepost bench --json).
type Report struct {
	Scenario string  `json:"scenario"`
	Size     string  `json:"size"`
	IDs      int     `json:"ids"`
	Seconds  float64 `json:"duration_s"` // posting time of each side (fan-in: 0)
	Rounds   int     `json:"rounds"`     // alternations of the two sides
	Owners   int     `json:"owners,omitempty"`
	TTLms    int64   `json:"ttl_ms"`
	// OwnerGOMAXPROCS is the GOMAXPROCS the owner processes said they ran
	// with (Config.OwnerGOMAXPROCS, or Go's own choice when that is 0).
	OwnerGOMAXPROCS int `json:"owner_gomaxprocs,omitempty"`
	// Auth: the run was on a fencepostd --auth, producers and each owner
	// process with credentials of their own (Config.Auth).
	Auth bool `json:"auth,omitempty"`
	// Partitions: ours' world had partitions (Config.Partitions).
	Partitions int `json:"partitions,omitempty"`
	// Shards: ours' world was sharded (Config.Shards).
	Shards int `json:"shards,omitempty"`
	// Cluster is the embedded cluster's members (0: one server), Replicas
	// the replication of the world's and the raw side's streams.
	Cluster  int `json:"cluster,omitempty"`
	Replicas int `json:"replicas,omitempty"`
	// LeaderKills are the stream leaders killed mid-run
	// (Config.KillLeaders), each with the stall it caused.
	LeaderKills []LeaderKill `json:"leader_kills,omitempty"`
	// Calls is the call scenario's outcome (call.go); the message figures
	// below are then zero.
	Calls *CallReport `json:"calls,omitempty"`

	Sent           int64   `json:"sent"`            // posts acknowledged by the stream
	Delivered      int64   `json:"delivered"`       // handler calls that returned nil
	SendThroughput float64 `json:"send_throughput"` // msgs/s posted
	Throughput     float64 `json:"throughput"`      // msgs/s delivered

	RawSent           int64   `json:"raw_sent"`
	RawDelivered      int64   `json:"raw_delivered"`
	RawSendThroughput float64 `json:"raw_send_throughput"`
	RawThroughput     float64 `json:"raw_throughput"`
	Ratio             float64 `json:"ratio"` // throughput / raw_throughput

	LatencyP50  float64 `json:"latency_p50_ms"` // post (send call) to handler
	LatencyP99  float64 `json:"latency_p99_ms"`
	LatencyP999 float64 `json:"latency_p999_ms"`
	LatencyMax  float64 `json:"latency_max_ms"`

	RawLatencyP50  float64 `json:"raw_latency_p50_ms"`
	RawLatencyP99  float64 `json:"raw_latency_p99_ms"`
	RawLatencyP999 float64 `json:"raw_latency_p999_ms"`

	// The cost of a delivered message on each side, over its rounds:
	// requests to the server (every message a client sent it: posts,
	// requests, acks, pulls; the post itself is one, so raw's floor is
	// about 1) and the machine's CPU time (every process on it, the server
	// included; a shared machine's other work too). Zero where unknown:
	// requests are counted by the embedded server only, CPU on Linux.
	RequestsPerMsg    float64 `json:"round_trips_per_msg,omitempty"`
	RawRequestsPerMsg float64 `json:"raw_round_trips_per_msg,omitempty"`
	CPUPerMsgUs       float64 `json:"cpu_us_per_msg,omitempty"`
	RawCPUPerMsgUs    float64 `json:"raw_cpu_us_per_msg,omitempty"`
	// OwnersCPUPerMsgUs is the part of CPUPerMsgUs spent in the owner
	// processes (takeover, handoff, zipf, counter): their own CPU time, over
	// their whole lives (the raw rounds they sat through included), per
	// delivered message. Each owner reads every post (docs/design/pipeline.md):
	// compare --owners 1 and 3.
	OwnersCPUPerMsgUs float64 `json:"owners_cpu_us_per_msg,omitempty"`

	// Takeovers is the number of faults injected; the gaps run from each
	// fault to the first delivery of each of the victim's ids under a newer
	// epoch, over all kinds (0 when no takeover happened), and per kind in
	// TakeoverGaps.
	Takeovers      int                 `json:"takeovers"`
	TakeoverGapP50 float64             `json:"takeover_gap_p50_ms"`
	TakeoverGapP99 float64             `json:"takeover_gap_p99_ms"`
	TakeoverGapMax float64             `json:"takeover_gap_max_ms"`
	TakeoverGaps   map[string]GapStats `json:"takeover_gaps,omitempty"`
	Faults         []Fault             `json:"faults,omitempty"`
	// UnplannedExits counts owner processes that ended without a fault
	// (each was replaced); SelfFences in-process workers that self-fenced
	// (each was started again).
	UnplannedExits int64 `json:"unplanned_exits,omitempty"`
	SelfFences     int64 `json:"self_fences,omitempty"`

	DuplicatesPct float64 `json:"duplicates_pct"` // extra deliveries / distinct messages delivered, in %
	Lost          int64   `json:"lost"`           // sent but never delivered, even by the final drain: must be 0
	RawLost       int64   `json:"raw_lost"`
	// LostExamples names up to 10 of ours' lost messages: each one's id,
	// number and mailbox stream sequence, and what the world's bucket
	// stream shows of it (a commit of its id's cursor that passed it, or
	// none that reached it), and whether the mailbox stream still stores
	// it.
	LostExamples []string `json:"lost_examples,omitempty"`
	// CommittedStored is how many of ours' messages were delivered and
	// still stored, waiting for their removal, right after its last
	// round (its workers still running; a round ends when every post was
	// delivered, so these are committed or in a commit under way),
	// CommittedStoredAgeMs how long the oldest of them had waited (0 when
	// the round ended with posts undelivered), and CommittedStoredPostMs
	// what they come to in time of posting: milliseconds of ours' send
	// throughput (issue 45 wants under a second's worth).
	CommittedStored       uint64  `json:"committed_stored"`
	CommittedStoredAgeMs  float64 `json:"committed_stored_age_ms"`
	CommittedStoredPostMs float64 `json:"committed_stored_post_ms"`
	// FinalDrained is how many messages the parent's final drain (after
	// the owners stopped) delivered: not lost, but not delivered in time.
	FinalDrained int64 `json:"final_drained"`
	// The counter scenario: ids whose counter (in per-id state) was
	// compared with the messages posted to them, those that differ (must
	// be 0) with examples, and the counters' sum.
	CountersChecked int      `json:"counters_checked,omitempty"`
	CountersOff     int      `json:"counters_off"`
	CounterExamples []string `json:"counter_examples,omitempty"`
	CounterMessages int64    `json:"counter_messages,omitempty"`
	// StaleCommits counts commits the broker accepted under an epoch that
	// had not delivered the messages they removed: must be 0.
	StaleCommits   int64 `json:"stale_commits"`
	CommitsChecked int64 `json:"commits_checked"`
	// StaleDeliveries counts handler calls that started after a newer
	// epoch of their id was stored (allowed: at-least-once; their commits
	// are refused). StaleChecked is how many deliveries were checked.
	StaleDeliveries int64    `json:"stale_deliveries"`
	StaleChecked    int64    `json:"stale_checked"`
	StaleExamples   []string `json:"stale_examples,omitempty"`
	// LedgerMissed counts bucket writes (records, cursors, locks) that were
	// overwritten more than 64 times before the checker read them: 0 means
	// every commit was checked against the record it was accepted under.
	LedgerMissed int64 `json:"ledger_missed"`
	// BucketWrites counts the writes to the world's bucket over the run
	// (claims, renewals, node leases, drain locks, cursor commits), and
	// BucketWritesPerMsg per delivery: the protocol's cost beside the
	// mailbox stream's, which the raw side does not pay.
	BucketWrites       int64   `json:"bucket_writes"`
	BucketWritesPerMsg float64 `json:"bucket_writes_per_msg"`

	// Per-id order, checked on each side from the outside (side.checkOrder):
	// messages whose stream sequence is known and that were delivered,
	// and those of them first delivered after a later message of their id
	// (must be 0), with examples.
	OrderChecked       int64    `json:"order_checked"`
	OrderViolations    int64    `json:"order_violations"`
	OrderExamples      []string `json:"order_examples,omitempty"`
	RawOrderChecked    int64    `json:"raw_order_checked"`
	RawOrderViolations int64    `json:"raw_order_violations"`

	// Pcgroups is the third side (Config.Peer), absent without one;
	// RatioPcgroups is throughput / pcgroups.throughput (ours against it,
	// as Ratio is ours against raw).
	Pcgroups      *PeerReport `json:"pcgroups,omitempty"`
	RatioPcgroups float64     `json:"ratio_pcgroups,omitempty"`

	// Timeline is per second of the run, for the chart.
	Timeline []Second `json:"-"`
}

// PeerReport is the outcome of the pcgroups side (Config.Peer): orbit.go's
// partitioned consumer groups on the same server, posted to by the same
// producers, alternated with the other sides (pcgroups.go). The names
// mirror the report's own for fencepost.
type PeerReport struct {
	Name string `json:"name"` // "pcgroups"
	// How the group was set up: a static group of Members members over
	// as many partitions ({{partition(n,1)}} in the stored subject), each
	// member's consumer with MaxAckPending (1: strict per-key order) and
	// AckWaitMs (its pinned TTL too); Processes member processes, each an
	// instance of every member (0: members in the bench's process).
	Members       int   `json:"members"`
	Partitions    int   `json:"partitions"`
	MaxAckPending int   `json:"max_ack_pending"`
	AckWaitMs     int64 `json:"ack_wait_ms"`
	Processes     int   `json:"processes,omitempty"`

	Sent           int64   `json:"sent"`
	Delivered      int64   `json:"delivered"`
	SendThroughput float64 `json:"send_throughput"`
	Throughput     float64 `json:"throughput"`
	Ratio          float64 `json:"ratio"` // throughput / raw_throughput

	LatencyP50  float64 `json:"latency_p50_ms"`
	LatencyP99  float64 `json:"latency_p99_ms"`
	LatencyP999 float64 `json:"latency_p999_ms"`
	LatencyMax  float64 `json:"latency_max_ms"`

	RequestsPerMsg     float64 `json:"round_trips_per_msg,omitempty"`
	CPUPerMsgUs        float64 `json:"cpu_us_per_msg,omitempty"`
	MembersCPUPerMsgUs float64 `json:"members_cpu_us_per_msg,omitempty"` // the member processes' part

	DuplicatesPct float64 `json:"duplicates_pct"`
	// Lost: posted, never delivered, and acknowledged all the same (under
	// its member's ack floor): must be 0. Undelivered: posted and still
	// waiting for its member when the run ended (the final drain, Settle
	// long, ran out of time: max ack pending 1 is slow).
	Lost            int64    `json:"lost"`
	LostExamples    []string `json:"lost_examples,omitempty"`
	Undelivered     int64    `json:"undelivered"`
	FinalDrained    int64    `json:"final_drained"`
	OrderChecked    int64    `json:"order_checked"`
	OrderViolations int64    `json:"order_violations"`
	OrderExamples   []string `json:"order_examples,omitempty"`

	// Takeovers: faults injected into the member processes as into ours'
	// owners; a gap runs from the fault to the first delivery of each id
	// the victim delivered last by another process (pcgroups has no
	// epochs: a member's pin moves after its pinned TTL).
	Takeovers      int                 `json:"takeovers"`
	TakeoverGapP50 float64             `json:"takeover_gap_p50_ms"`
	TakeoverGapP99 float64             `json:"takeover_gap_p99_ms"`
	TakeoverGapMax float64             `json:"takeover_gap_max_ms"`
	TakeoverGaps   map[string]GapStats `json:"takeover_gaps,omitempty"`
	Faults         []Fault             `json:"faults,omitempty"`
	UnplannedExits int64               `json:"unplanned_exits,omitempty"`
}

// OK says whether the side kept the promises it is chosen for: nothing
// lost, per-id order.
func (p *PeerReport) OK() bool { return p == nil || (p.Lost == 0 && p.OrderViolations == 0) }

// Second is one second of a run: deliveries and latency p99 of each side.
type Second struct {
	At            float64 // seconds since the start
	Delivered     int64
	P99           float64 // ms; 0 without deliveries
	RawDelivered  int64
	RawP99        float64
	PeerDelivered int64 // the pcgroups side, if it ran
	PeerP99       float64
}

// OK says whether the run kept its safety promises: nothing lost and no
// commit under a stale epoch.
func (r Report) OK() bool { return r.Lost == 0 && r.StaleCommits == 0 && r.CountersOff == 0 }

// timeline merges the per-second figures of the sides (peer: nil if none
// ran).
func timeline(ours, raw, peer *side) []Second {
	ours.mu.Lock()
	defer ours.mu.Unlock()
	raw.mu.Lock()
	defer raw.mu.Unlock()
	n := max(len(ours.secs), len(raw.secs))
	var peerSecs []*second
	if peer != nil {
		peer.mu.Lock()
		defer peer.mu.Unlock()
		peerSecs = peer.secs
		n = max(n, len(peerSecs))
	}
	out := make([]Second, n)
	ms := func(us int64) float64 { return round(float64(us)/1000, 3) }
	for i := range out {
		out[i].At = float64(i)
		if i < len(ours.secs) && ours.secs[i] != nil {
			out[i].Delivered = ours.secs[i].n
			out[i].P99 = ms(ours.secs[i].h.ValueAtQuantile(99))
		}
		if i < len(raw.secs) && raw.secs[i] != nil {
			out[i].RawDelivered = raw.secs[i].n
			out[i].RawP99 = ms(raw.secs[i].h.ValueAtQuantile(99))
		}
		if i < len(peerSecs) && peerSecs[i] != nil {
			out[i].PeerDelivered = peerSecs[i].n
			out[i].PeerP99 = ms(peerSecs[i].h.ValueAtQuantile(99))
		}
	}
	return out
}

func round(v float64, places int) float64 {
	p := 1.0
	for range places {
		p *= 10
	}
	return float64(int64(v*p+0.5)) / p
}
