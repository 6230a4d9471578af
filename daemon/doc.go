// Package daemon is fencepostd: configuration from flags and a JSON file,
// an embedded nats-server with JetStream (or a connection to an existing
// NATS deployment), the world made ready at start, and an HTTP endpoint
// with Prometheus metrics (/metrics), health (/healthz, /readyz) and
// nats-server's monitoring, each an actor of an oklog/run group that stops
// as a whole on the first failure or when its context ends.
//
// cmd/fencepostd is a thin main around Parse, Start and Run;
// docs/operations.md is the operator's guide.
package daemon
