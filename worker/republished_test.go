package worker

import (
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/internal/wire"
)

// republished takes a post's id from the subject the server republished
// it to, and its stored subject and stream from the server's headers (the
// last of each name); a post whose server headers name another id's
// mailbox or another world's stream is refused. The server never sends
// one: this is the check that a post reaches no other id's holder.
func TestRepublished(t *testing.T) {
	const world, n = "w", 8
	msg := func(id, stored, stream string) *nats.Msg {
		m := nats.NewMsg(wire.RepublishSubject(world, id, n))
		m.Header.Add(wire.HeaderRepublishSubject, "forged.by.producer") // the post's own first
		m.Header.Add(wire.HeaderRepublishStream, stream)
		m.Header.Add(wire.HeaderRepublishSubject, stored)
		m.Header.Add(wire.HeaderRepublishSeq, "42")
		m.Header.Add(wire.HeaderRepublishTime, "2026-12-02T16:00:00Z")
		return m
	}
	sm, id, err := republished(world, n, msg("order-1", wire.MailboxSubject(world, "order-1"), wire.MailboxStream(world)))
	require.NoError(t, err)
	require.Equal(t, "order-1", id)
	require.Equal(t, uint64(42), sm.Sequence)
	require.Equal(t, wire.MailboxSubject(world, "order-1"), sm.Subject)
	for _, bad := range []*nats.Msg{
		msg("order-1", wire.MailboxSubject(world, "order-2"), wire.MailboxStream(world)), // another id's mailbox
		msg("order-1", wire.MailboxSubject("w2", "order-1"), wire.MailboxStream(world)),  // another world's
		msg("order-1", wire.MailboxSubject(world, "order-1"), wire.MailboxStream("w2")),  // another world's stream
		msg("order-1", wire.MailboxSubject(world, "order-1"), "ELSEWHERE"),
		msg("order-1", wire.MailboxSubject(world, "order-1")+"x", wire.MailboxStream(world)),
	} {
		_, _, err := republished(world, n, bad)
		require.Error(t, err, "%v", bad.Header)
	}
}
