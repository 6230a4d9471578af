package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Namespace prefixes every metric name.
const Namespace = "fencepost"

// Registry is the process's registry: Default's metrics, the Go runtime
// and process collectors. fencepostd serves it at /metrics.
var Registry = prometheus.NewRegistry()

// Default is the process's Set, registered on Registry.
var Default = func() *Set {
	Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return New(Registry)
}()

// Set is one set of fencepost metrics.
type Set struct {
	claims, seizes, releases, renews *prometheus.CounterVec
	fencedCommits, deadLetters       *prometheus.CounterVec
	deadLetterFailures, unroutable   *prometheus.CounterVec
	selfFences                       *prometheus.CounterVec
	drainSeconds                     *prometheus.HistogramVec
	worlds                           *worldCollector
}

// DrainBuckets are the drain latency histogram's buckets, in seconds: from
// 1 ms (one small batch on loopback) to 1 min.
var DrainBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// New makes a Set and registers it on reg (nil: not registered).
func New(reg prometheus.Registerer) *Set {
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: name, Help: help}, labels)
	}
	s := &Set{
		claims:             counter("claims_total", "Claims won by this process (outcome claimed).", "world"),
		seizes:             counter("seizes_total", "Seizes won by this process (outcome seized).", "world"),
		releases:           counter("releases_total", "Releases by this process (outcome released).", "world"),
		renews:             counter("renewals_total", "Renewals by this process (outcome renewed).", "world"),
		fencedCommits:      counter("fenced_commits_total", "Drain commits the broker refused because the ownership record changed (outcome fenced).", "world"),
		deadLetters:        counter("dead_letters_moved_total", "Messages this process moved to dead letters after max_deliveries.", "world"),
		deadLetterFailures: counter("dead_letter_failures_total", "Messages past max_deliveries that this process could not move to dead letters (they stay in their mailbox and are tried again; a WARN says why).", "world"),
		unroutable:         counter("unroutable_moved_total", "Messages on mailbox subjects no id encodes to that this process moved to the world's unroutable dead letters.", "world"),
		selfFences:         counter("self_fences_total", "Leases this process gave up because its authority lapsed, by cause.", "world", "cause"),
		drainSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "drain_duration_seconds",
			Help:    "Time of one drain call, from the ownership check to the last commit.",
			Buckets: DrainBuckets,
		}, []string{"world"}),
		worlds: newWorldCollector(),
	}
	if reg != nil {
		reg.MustRegister(s.claims, s.seizes, s.releases, s.renews, s.fencedCommits,
			s.deadLetters, s.deadLetterFailures, s.unroutable, s.selfFences, s.drainSeconds, s.worlds)
	}
	return s
}

// Claimed counts a won claim.
func (s *Set) Claimed(world string) {
	if s != nil {
		s.claims.WithLabelValues(world).Inc()
	}
}

// Seized counts a won seize.
func (s *Set) Seized(world string) {
	if s != nil {
		s.seizes.WithLabelValues(world).Inc()
	}
}

// Released counts a release.
func (s *Set) Released(world string) {
	if s != nil {
		s.releases.WithLabelValues(world).Inc()
	}
}

// Renewed counts a renewal.
func (s *Set) Renewed(world string) {
	if s != nil {
		s.renews.WithLabelValues(world).Inc()
	}
}

// FencedCommit counts a drain commit refused by the fence.
func (s *Set) FencedCommit(world string) {
	if s != nil {
		s.fencedCommits.WithLabelValues(world).Inc()
	}
}

// DeadLettered counts n messages moved to dead letters.
func (s *Set) DeadLettered(world string, n int) {
	if s != nil && n > 0 {
		s.deadLetters.WithLabelValues(world).Add(float64(n))
	}
}

// DeadLetterFailed counts a message that could not be dead-lettered.
func (s *Set) DeadLetterFailed(world string) {
	if s != nil {
		s.deadLetterFailures.WithLabelValues(world).Inc()
	}
}

// UnroutableMoved counts n unroutable messages moved aside.
func (s *Set) UnroutableMoved(world string, n int) {
	if s != nil && n > 0 {
		s.unroutable.WithLabelValues(world).Add(float64(n))
	}
}

// SelfFenced counts a self-fence with its cause (lease_watchdog_fence,
// lease_record_missing_fence, lease_record_mismatch_fence).
func (s *Set) SelfFenced(world, cause string) {
	if s != nil {
		s.selfFences.WithLabelValues(world, cause).Inc()
	}
}

// Drained observes the duration of one drain call.
func (s *Set) Drained(world string, d time.Duration) {
	if s != nil {
		s.drainSeconds.WithLabelValues(world).Observe(d.Seconds())
	}
}
