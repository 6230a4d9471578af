package metrics

import (
	"maps"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// WorldStats is one world's state as read from JetStream (world.Inspect):
// it holds for every process, whoever did the operations.
type WorldStats struct {
	Depth        uint64        // messages in mailboxes (dead letters excluded)
	Mailboxes    uint64        // ids whose mailbox holds messages
	OldestAge    time.Duration // age of the oldest mailbox message; 0 when empty
	DeadLetters  uint64        // messages in dead-letter stores
	Unroutable   uint64        // messages moved aside because no id's mailbox has their subject
	Records      uint64        // ownership records (held or free)
	Owned        uint64        // records with a live holder
	Acquisitions uint64        // sum of record epochs: claims and seizes since the last reset
	Posts        uint64        // mailbox stream's last sequence: messages ever stored
	BucketWrites uint64        // bucket stream's last sequence: ownership, cursor and lock writes
}

type worldDesc struct {
	desc  *prometheus.Desc
	kind  prometheus.ValueType
	value func(w WorldStats) float64
}

// worldCollector publishes the last scrape of every world.
type worldCollector struct {
	mu      sync.Mutex
	worlds  map[string]WorldStats
	last    time.Time
	took    time.Duration
	failed  uint64
	descs   []worldDesc
	scrapeD [3]*prometheus.Desc
}

func newWorldCollector() *worldCollector {
	d := func(name, help string, kind prometheus.ValueType, value func(w WorldStats) float64) worldDesc {
		return worldDesc{prometheus.NewDesc(prometheus.BuildFQName(Namespace, "world", name), help, []string{"world"}, nil), kind, value}
	}
	g, c := prometheus.GaugeValue, prometheus.CounterValue
	return &worldCollector{
		worlds: map[string]WorldStats{},
		descs: []worldDesc{
			d("mailbox_depth", "Messages waiting in the world's mailboxes (dead letters excluded).", g, func(w WorldStats) float64 { return float64(w.Depth) }),
			d("mailboxes", "Ids whose mailbox holds at least one message.", g, func(w WorldStats) float64 { return float64(w.Mailboxes) }),
			d("mailbox_oldest_age_seconds", "Age of the oldest message in any mailbox of the world; 0 when all are empty.", g, func(w WorldStats) float64 { return w.OldestAge.Seconds() }),
			d("dead_letters", "Messages in the world's dead-letter stores.", g, func(w WorldStats) float64 { return float64(w.DeadLetters) }),
			d("unroutable", "Messages stored on a mailbox subject that no id encodes to, moved to the world's unroutable dead letters (fencepost dlq ls --unroutable).", g, func(w WorldStats) float64 { return float64(w.Unroutable) }),
			d("records", "Ownership records in the world (held or free).", g, func(w WorldStats) float64 { return float64(w.Records) }),
			d("ids_owned", "Ids with a live holder.", g, func(w WorldStats) float64 { return float64(w.Owned) }),
			d("acquisitions_total", "Claims and seizes by any process since the world's last reset (the sum of the records' epochs).", c, func(w WorldStats) float64 { return float64(w.Acquisitions) }),
			d("posts_total", "Messages ever stored in the world's mailbox stream (its last sequence), by any process.", c, func(w WorldStats) float64 { return float64(w.Posts) }),
			d("bucket_writes_total", "Writes to the world's bucket (ownership records, cursors, locks, node leases; its last sequence), by any process.", c, func(w WorldStats) float64 { return float64(w.BucketWrites) }),
		},
		scrapeD: [3]*prometheus.Desc{
			prometheus.NewDesc(Namespace+"_scrape_timestamp_seconds", "When the worlds were last read from JetStream (Unix time; 0 before the first read).", nil, nil),
			prometheus.NewDesc(Namespace+"_scrape_duration_seconds", "How long the last read of all worlds took.", nil, nil),
			prometheus.NewDesc(Namespace+"_scrape_errors_total", "Reads of a world that failed.", nil, nil),
		},
	}
}

// SetWorlds replaces the published state of every world with worlds (a
// world missing from it is no longer published) and records the scrape.
func (s *Set) SetWorlds(worlds map[string]WorldStats, took time.Duration, errors int) {
	if s == nil {
		return
	}
	c := s.worlds
	c.mu.Lock()
	defer c.mu.Unlock()
	c.worlds = maps.Clone(worlds)
	c.last = time.Now()
	c.took = took
	c.failed += uint64(errors)
}

// Worlds returns the last published state of every world.
func (s *Set) Worlds() map[string]WorldStats {
	s.worlds.mu.Lock()
	defer s.worlds.mu.Unlock()
	return maps.Clone(s.worlds.worlds)
}

func (c *worldCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d.desc
	}
	for _, d := range c.scrapeD {
		ch <- d
	}
}

func (c *worldCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, w := range c.worlds {
		for _, d := range c.descs {
			ch <- prometheus.MustNewConstMetric(d.desc, d.kind, d.value(w), name)
		}
	}
	ts := 0.0
	if !c.last.IsZero() {
		ts = float64(c.last.UnixNano()) / 1e9
	}
	ch <- prometheus.MustNewConstMetric(c.scrapeD[0], prometheus.GaugeValue, ts)
	ch <- prometheus.MustNewConstMetric(c.scrapeD[1], prometheus.GaugeValue, c.took.Seconds())
	ch <- prometheus.MustNewConstMetric(c.scrapeD[2], prometheus.CounterValue, float64(c.failed))
}
