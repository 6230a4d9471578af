// Package testkit holds fencepost's test kit, apart from the product: its
// subpackages start embedded servers and 3-node clusters (testutil),
// inject faults into real processes and connections and run the soak
// (faults), and check recorded histories for linearizability and
// delivery (history). The product imports two of them, for `fencepost
// verify` (package verify): history, and the proxy of faults; neither
// links nats-server.
package testkit
