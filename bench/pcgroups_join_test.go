package bench

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/pcgroups"

	"github.com/fencepost/fencepost/server/servertest"
	"github.com/fencepost/fencepost/testkit/testutil"
)

// TestPcgJoin_OutlivesTheCallersContext: instances joined by pcgJoin keep
// watching the group's config after the context of the join ended, so a
// change of the config still ends them (pcgroups v0.2.2 watches the config
// with the context StaticConsume is given, and an instance whose watcher
// ended spins on its closed channel, a CPU each, and never sees a change:
// the bench's pcgroups side ran at 1/400 of its speed).
func TestPcgJoin_OutlivesTheCallersContext(t *testing.T) {
	srv := servertest.New(t)
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testutil.Ctx(t, 30*time.Second)
	spec := pcgSpec{Stream: "PCG", Group: pcgGroupName, Prefix: "p", Members: []string{"m000", "m001"}, AckWaitMs: 1000}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: spec.Stream, Subjects: []string{"p.*"},
		SubjectTransform: &jetstream.SubjectTransformConfig{Source: "p.*", Destination: "{{partition(2,1)}}.p.{{wildcard(1)}}"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := pcgroups.CreateStatic(ctx, js, spec.Stream, spec.Group, 2, nil, spec.Members, nil); err != nil {
		t.Fatal(err)
	}
	jctx, cancel := context.WithCancel(ctx)
	m, err := pcgJoin(jctx, js, spec, []int{0, 1}, func(int) func(jetstream.Msg) { return pcgAck })
	if err != nil {
		t.Fatal(err)
	}
	defer m.stop()
	cancel()
	// Not a synchronisation: a watcher bound to jctx ends on its own
	// goroutine, and the change below must come after that for a wrong
	// join to fail here every time.
	time.Sleep(100 * time.Millisecond)
	// Change the group's config: every instance that still watches it ends.
	kv, err := js.KeyValue(ctx, pcgBucket)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(pcgroups.StaticConsumerGroupConfig{MaxMembers: 2, Members: []string{"m000", "m002"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, spec.Stream+"."+spec.Group, b); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		select {
		case err := <-m.done:
			if err == nil {
				t.Errorf("instance %d ended without saying why", i)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of 2 instances saw the config change: the others no longer watch it", i)
		}
	}
}
