// Package server runs an embedded nats-server with JetStream in-process:
// for fencepostd, for tests (see servertest), for examples and benchmarks.
package server
