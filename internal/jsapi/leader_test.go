package jsapi_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/server/servertest"
)

// TestLeaderGet_AnsweredAfterTheLeaderDies: a leader read of an R3
// stream, asked as its leader dies, is answered by the next leader. The
// reader is connected to a member that stays, so nothing drops its
// connection: a request the dead leader never answers, or one answered
// that the stream has no leader yet, is asked again. Sent once, the read
// waited out its whole deadline (the 10 s here) and failed; a worker's
// delivery waited so after every bucket leader's death.
func TestLeaderGet_AnsweredAfterTheLeaderDies(t *testing.T) {
	cl := servertest.NewCluster(t, 3)
	_, js := servertest.Connect(t, cl.URL())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := servertest.CreateStream(t, js, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, Replicas: 3})
	if _, err := js.Publish(ctx, "s.x", []byte("a")); err != nil {
		t.Fatal(err)
	}
	leader, stays := cl.StopStreamLeader(t, s)
	nc, _ := servertest.Connect(t, stays.URL())
	rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
	defer rcancel()
	start := time.Now()
	m, err := jsapi.LeaderGet(rctx, nc, "S", jsapi.GetRequest{LastFor: "s.x"})
	if err != nil {
		t.Fatalf("a leader read as the leader died: %v after %v", err, time.Since(start))
	}
	if string(m.Data) != "a" {
		t.Fatalf("read %q, want a", m.Data)
	}
	t.Logf("answered %v after the leader %s died", time.Since(start).Round(time.Millisecond), leader.Name())
}
