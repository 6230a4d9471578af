// Package metrics holds fencepost's Prometheus metrics: counters and a
// histogram that the library packages record in-process (claims, seizes,
// releases, renewals, fenced commits, self-fences, dead letters, drain
// latency), and gauges and counters derived from each world's JetStream
// state (mailbox depth and oldest age, dead letters, ids owned, writes),
// which fencepostd scrapes on an interval and publishes with SetWorlds.
//
// A Set registers its metrics on a prometheus.Registerer. Default is the Set
// of the process, registered on Registry; fencepostd serves Registry at
// /metrics. Every method is safe on a nil *Set (it does nothing), so a
// library can take a *Set option and record unconditionally.
//
// docs/operations.md "Metrics" lists every metric and says which are live.
package metrics
