package fencing

import (
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/internal/wire"
)

// Header names of a fenced write (JetStream's own).
const (
	HeaderExpectedSeq     = "Nats-Expected-Last-Subject-Sequence"
	HeaderExpectedSubject = "Nats-Expected-Last-Subject-Sequence-Subject"
)

// Fence identifies one holding of an id: who (Node), which holding (Epoch)
// and the ownership record's revision that a fenced write expects.
type Fence struct {
	World    string `json:"world"`
	ID       string `json:"id"`
	Node     string `json:"node"`
	Epoch    uint64 `json:"epoch"`
	Revision uint64 `json:"revision"`
}

// RecordSubject is the subject of the ownership record this fence checks.
func (f Fence) RecordSubject() string { return wire.RecordSubject(f.World, f.ID) }

// Expect is the publish option that makes a write to the world's bucket
// stream conditional on the ownership record still being at f.Revision.
func (f Fence) Expect() jetstream.PublishOpt {
	return jetstream.WithExpectLastSequenceForSubject(f.Revision, f.RecordSubject())
}

// Apply sets the fence's headers on a message, for clients that publish a
// raw nats.Msg.
func (f Fence) Apply(m *nats.Msg) {
	if m.Header == nil {
		m.Header = nats.Header{}
	}
	m.Header.Set(HeaderExpectedSeq, fmt.Sprint(f.Revision))
	m.Header.Set(HeaderExpectedSubject, f.RecordSubject())
}

// String gives a short form for logs.
func (f Fence) String() string {
	return fmt.Sprintf("%s/%q node=%q epoch=%d rev=%d", f.World, f.ID, f.Node, f.Epoch, f.Revision)
}
