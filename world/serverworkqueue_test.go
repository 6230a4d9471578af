package world_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/server/servertest"
)

// TestServer_WorkQueueLayout pins what nats-server does that the layout
// of docs/experiments/ack-removal.md (removal by acknowledgement, not built) would
// rest on, so that whoever builds it starts from facts, and a server
// upgrade that changes one of them fails here first:
//
//  1. a work-queue stream whose subject transform puts the partition in
//     the stored subject stores a post to m.<id> as p.<k>.<id>, k being
//     wire.Partition(id, n): a reader can name an id's stored subject;
//  2. one consumer per partition is accepted, and a consumer whose
//     filter overlaps one (an ordered consumer over the whole mailbox)
//     is refused;
//  3. the drains' reads (direct gets by subject) work on it;
//  4. an acknowledgement removes its message, and only its message;
//  5. a purge of one id's subject removes its messages and takes them
//     out of the partition consumer's pending set, so that messages a
//     puller got for an id held elsewhere, purged by their holder's
//     commit, do not fill the consumer's pending acknowledgements.
func TestServer_WorkQueueLayout(t *testing.T) {
	const parts = 4
	srv := servertest.New(t)
	nc, js := servertest.Connect(t, srv.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "M", Subjects: []string{"m.*"}, Retention: jetstream.WorkQueuePolicy, AllowDirect: true,
		SubjectTransform: &jetstream.SubjectTransformConfig{Source: "m.*", Destination: "p.{{partition(" + strconv.Itoa(parts) + ",1)}}.{{wildcard(1)}}"}})
	require.NoError(t, err)

	// 1. Three ids of one partition: two messages each of a and b, one of c.
	var a, bb, c string
	for i := 0; c == ""; i++ {
		id := "id" + strconv.Itoa(i)
		if wire.Partition(id, parts) != 0 {
			continue
		}
		switch {
		case a == "":
			a = id
		case bb == "":
			bb = id
		default:
			c = id
		}
	}
	stored := func(id string) string { return "p." + strconv.Itoa(wire.Partition(id, parts)) + "." + id }
	lastOf := map[string]uint64{}
	for _, id := range []string{a, bb, a, bb, c} {
		ack, err := js.Publish(ctx, "m."+id, []byte(id))
		require.NoError(t, err)
		lastOf[id] = ack.Sequence
		m, err := st.GetMsg(ctx, ack.Sequence)
		require.NoError(t, err)
		require.Equal(t, stored(id), m.Subject, "the stored subject names wire.Partition's partition")
	}
	// Another partition's id, for the consumers' filters.
	other := "x"
	for i := 0; wire.Partition(other, parts) == 0; i++ {
		other = "x" + strconv.Itoa(i)
	}
	_, err = js.Publish(ctx, "m."+other, []byte(other))
	require.NoError(t, err)

	// 2. A consumer per partition; an overlapping one is refused.
	// Long enough that nothing comes again before step 5 looks for it.
	ackWait := 2 * time.Second
	cons := make([]jetstream.Consumer, parts)
	for k := range parts {
		cons[k], err = st.CreateConsumer(ctx, jetstream.ConsumerConfig{Durable: "p" + strconv.Itoa(k), FilterSubject: "p." + strconv.Itoa(k) + ".*",
			AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: -1, AckWait: ackWait})
		require.NoError(t, err)
	}
	_, err = st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{"p.>"}})
	require.Error(t, err, "a work queue refuses a consumer that overlaps another")
	_, err = st.CreateConsumer(ctx, jetstream.ConsumerConfig{Durable: "all", FilterSubject: "p.>", AckPolicy: jetstream.AckExplicitPolicy})
	require.Error(t, err, "a work queue refuses a consumer that overlaps another")

	// 3. A drain's reads: an id's messages by subject, its last one.
	got, err := jsapi.DirectGet(ctx, nc, "M", jsapi.GetRequest{Seq: 1, NextFor: stored(a), Batch: 10})
	require.NoError(t, err)
	require.Len(t, got.Msgs, 2, "both of a's messages, by its stored subject")
	last, err := jsapi.DirectLast(ctx, nc, "M", stored(bb))
	require.NoError(t, err)
	require.Equal(t, lastOf[bb], last.Sequence)

	// 4. The partition's puller gets all five; it acknowledges c's alone,
	// which removes c's and nothing else.
	batch, err := cons[0].Fetch(5, jetstream.FetchMaxWait(5*time.Second))
	require.NoError(t, err)
	var msgs []jetstream.Msg
	for m := range batch.Messages() {
		msgs = append(msgs, m)
	}
	require.NoError(t, batch.Error())
	require.Len(t, msgs, 5)
	for _, m := range msgs {
		if m.Subject() == stored(c) {
			require.NoError(t, m.DoubleAck(ctx))
		}
	}
	info, err := st.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(5), info.State.Msgs, "a's two, b's two and the other partition's one are left")
	ci, err := cons[0].Info(ctx)
	require.NoError(t, err)
	require.Equal(t, 4, ci.NumAckPending)

	// 5. A purge of a's subject (its holder's, after a commit that covers
	// both) removes them and leaves b's pending alone.
	require.NoError(t, jsapi.Purge(ctx, nc, "M", stored(a), lastOf[a]+1))
	info, err = st.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(3), info.State.Msgs)
	ci, err = cons[0].Info(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, ci.NumAckPending, "a's purged messages are out of the consumer's pending set: b's two are left")
	// b's two come again after the ack wait; a's never. Each may come
	// more than once (never acknowledged, it comes again after each ack
	// wait, and a loaded machine can take that long between fetches):
	// what counts is which messages come.
	again := map[uint64]string{} // stream sequence -> stored subject
	deadline := time.Now().Add(5 * ackWait)
	for len(again) < 2 && time.Now().Before(deadline) {
		batch, err := cons[0].Fetch(10, jetstream.FetchMaxWait(ackWait))
		require.NoError(t, err)
		for m := range batch.Messages() {
			md, err := m.Metadata()
			require.NoError(t, err)
			again[md.Sequence.Stream] = m.Subject()
		}
	}
	require.Len(t, again, 2, "b's two messages: %v", again)
	for seq, subj := range again {
		require.Equal(t, stored(bb), subj, "message %d came again", seq)
	}
	require.Contains(t, again, lastOf[bb])
}
