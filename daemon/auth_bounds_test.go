package daemon_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/daemon"
	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/queue"
	"github.com/fencepost/fencepost/server/servertest"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/worker"
)

// The shared resources an attacker could exhaust, each bounded against a real
// fencepostd --auth, with each bound as docs/security.md states it.

// pullConsumer creates a pull consumer on the mailbox stream as fencepost's
// drains do (not durable, an inactivity threshold).
func pullConsumer(ctx context.Context, js jetstream.JetStream, name string) error {
	_, err := js.CreateConsumer(ctx, wire.MailboxStream("default"), jetstream.ConsumerConfig{
		Name: name, AckPolicy: jetstream.AckNonePolicy, InactiveThreshold: time.Minute, MemoryStorage: true,
	})
	return err
}

func refusedAs(t *testing.T, err error, what string) {
	t.Helper()
	var apiErr *jetstream.APIError
	require.ErrorAs(t, err, &apiErr, "refused as a JetStream error")
	require.Contains(t, apiErr.Description, what)
}

// TestAttack_ConsumersBounded: one owner creating consumers until none are
// left (about 10,000 stopped every worker from starting or failing over:
// JetStream's limit is per stream, for every user together) is stopped at
// its own limit (auth_max_consumers_per_user), and the owners together at
// their share of the stream's limit, a reserve staying for fencepostd and
// the operator. Another node's worker starts and delivers meanwhile. An
// owner may delete its own consumers, not another's; a deleted consumer
// counts no more.
func TestAttack_ConsumersBounded(t *testing.T) {
	t.Run("per user", func(t *testing.T) {
		a := startAuthedWith(t, "--auth-max-consumers-per-user", "3")
		ctx := testutil.Ctx(t, 30*time.Second)
		mallory := a.asFile(t, a.node(t, "node-a").File)
		js := mallory.c.JetStream()
		for i := range 3 {
			require.NoError(t, pullConsumer(ctx, js, fmt.Sprintf("mal-%d", i)))
		}
		refusedAs(t, pullConsumer(ctx, js, "mal-3"), "auth_max_consumers_per_user")
		a.waitMetricAtLeast(t, `fencepost_consumers_refused_total{reason="user_limit",world="default"}`, 1)

		// node-b is not stopped: its worker starts and delivers.
		b := a.asFile(t, a.node(t, "node-b").File)
		var mu sync.Mutex
		var got []string
		wk, err := b.w.NewWorker(worker.Config{Node: "node-b", Scan: 200 * time.Millisecond}, func(_ context.Context, m drain.Message) error {
			mu.Lock()
			got = append(got, string(m.Body))
			mu.Unlock()
			return nil
		})
		require.NoError(t, err)
		wctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- wk.Run(wctx) }()
		_, err = b.w.Send(ctx, "order", []byte("delivered"))
		require.NoError(t, err)
		servertest.CheckFor(t, 15*time.Second, 50*time.Millisecond, func() error {
			mu.Lock()
			defer mu.Unlock()
			if len(got) != 1 {
				return fmt.Errorf("node-b delivered %d", len(got))
			}
			return nil
		})
		stop()
		require.NoError(t, <-done)

		// Deletes: its own, not another's.
		var apiErr *jetstream.APIError
		err = b.c.JetStream().DeleteConsumer(ctx, wire.MailboxStream("default"), "mal-0")
		require.ErrorAs(t, err, &apiErr)
		require.Contains(t, apiErr.Description, "not created by this user")
		_, err = a.as(t, daemon.RoleOperator).c.JetStream().Consumer(ctx, wire.MailboxStream("default"), "mal-0")
		require.NoError(t, err, "still there")
		require.NoError(t, js.DeleteConsumer(ctx, wire.MailboxStream("default"), "mal-0"))
		servertest.CheckFor(t, 5*time.Second, 20*time.Millisecond, func() error { return pullConsumer(ctx, js, "mal-4") })
	})

	t.Run("the owners' share of the stream", func(t *testing.T) {
		a := startAuthedWith(t, "--auth-max-consumers", "103", "--auth-max-consumers-per-user", "-1")
		ctx := testutil.Ctx(t, 30*time.Second)
		mallory := a.asFile(t, a.node(t, "node-a").File)
		js := mallory.c.JetStream()
		for i := range 3 {
			require.NoError(t, pullConsumer(ctx, js, fmt.Sprintf("mal-%d", i)))
		}
		refusedAs(t, pullConsumer(ctx, js, "mal-3"), "share of auth_max_consumers")
		require.NoError(t, pullConsumer(ctx, a.as(t, daemon.RoleOperator).c.JetStream(), "ops"), "the reserve: the operator's")
	})
}

// TestAttack_StorageBounded: one producer posting as fast as it can (40 MB
// in a quarter of a second once filled a data dir without limit) fills
// the world's mailboxes up to the share fencepostd gave them of the store
// account's storage (auth_max_store; seven eighths), and its posts are
// then refused as full; commits, claims and renewals go on in the room
// left, so the owners drain, and the server's purge makes room for posts
// again.
func TestAttack_StorageBounded(t *testing.T) {
	const store = 4 << 20
	a := startAuthedWith(t, "--auth-max-store", fmt.Sprint(store))
	ctx := testutil.Ctx(t, 30*time.Second)
	op := a.as(t, daemon.RoleOperator)
	require.EqualValues(t, store-store/8, op.w.Config.MaxBytes, "the world's mailboxes: seven eighths of the store")

	p := a.as(t, daemon.RoleProducer)
	body := make([]byte, 64<<10)
	var posted int
	for ; posted < 200; posted++ {
		_, err := p.w.Send(ctx, fmt.Sprintf("flood-%d", posted%4), body)
		if err != nil {
			require.ErrorIs(t, err, queue.ErrFull, "refused as full after %d posts", posted)
			break
		}
	}
	require.Less(t, posted, 200, "the flood stopped")
	require.Greater(t, posted, 40)

	o := a.asFile(t, a.node(t, "node-a").File)
	l, err := o.w.Ownership.Claim(ctx, "flood-0", "node-a", time.Minute)
	require.NoError(t, err, "claims go on")
	res, err := o.w.Drainer.DrainLease(ctx, l, func(context.Context, drain.Message) error { return nil })
	require.NoError(t, err, "commits go on")
	require.Greater(t, res.Acked, 0)
	servertest.CheckFor(t, 15*time.Second, 50*time.Millisecond, func() error {
		_, err := p.w.Send(ctx, "after", body)
		return err
	})
}

// TestAttack_BatchesBounded: a node owner opening the bucket's 50 atomic
// batches without committing them, and refreshing them, refuses every
// stateful commit of the world (10210): the server counts batches per
// stream, not per user. fencepostd detects it (its probe batch is refused:
// fencepost_batch_slots_exhausted_total, a WARN); the bound is the
// server's: the attacker must keep sending, and once it stops its batches
// are dropped after the batch timeout (10 s by default; 1 s here, from
// the nats-server config file), counted as abandoned, and commits go
// through again.
func TestAttack_BatchesBounded(t *testing.T) {
	daemon.SetBatchProbe(t, 100*time.Millisecond)
	conf := filepath.Join(t.TempDir(), "nats.conf")
	require.NoError(t, os.WriteFile(conf, []byte("jetstream {\n  limits {\n    batch { timeout: \"1s\" }\n  }\n}\n"), 0o600))
	a := startAuthedWith(t, "--nats-config", conf)
	ctx := testutil.Ctx(t, 30*time.Second)
	mallory := a.asFile(t, a.node(t, "node-a").File)
	holder := a.asFile(t, a.node(t, "node-b").File)
	commit := func() error {
		m := nats.NewMsg(wire.KeySubject("default", wire.StateKey("mine", "n")))
		m.Data = []byte("1")
		_, err := jsapi.PublishBatch(ctx, holder.c.JetStream(), []*nats.Msg{m})
		return err
	}
	require.NoError(t, commit(), "a batch before")

	nc := mallory.c.Conn()
	stop := make(chan struct{})
	held := make(chan struct{})
	go func() {
		for seq := 1; ; seq++ {
			for i := range 60 { // more than the 50 slots: fencepostd's probe may hold one a moment
				m := nats.NewMsg(wire.KeySubject("default", wire.LockKey(fmt.Sprintf("squat-%d", i))))
				m.Header.Set(jsapi.HeaderBatchID, fmt.Sprintf("squat-%d", i))
				m.Header.Set(jsapi.HeaderBatchSeq, fmt.Sprint(seq))
				_ = nc.PublishMsg(m)
			}
			_ = nc.Flush()
			if seq == 1 {
				close(held)
			}
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	<-held
	var apiErr *jetstream.APIError
	servertest.CheckFor(t, 5*time.Second, 20*time.Millisecond, func() error {
		err := commit()
		if errors.As(err, &apiErr) && apiErr.ErrorCode == 10210 {
			return nil
		}
		return fmt.Errorf("the holder's batch: %v", err)
	})
	a.waitMetricAtLeast(t, `fencepost_batch_slots_exhausted_total{world="default"}`, 1)
	close(stop)
	servertest.CheckFor(t, 10*time.Second, 50*time.Millisecond, commit)
	a.waitMetricAtLeast(t, `fencepost_batches_abandoned_total{reason="timeout",world="default"}`, 50)
}

// waitMetricAtLeast polls until series is at least want.
func (s *started) waitMetricAtLeast(t *testing.T, series string, want float64) {
	t.Helper()
	servertest.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		if got := s.metric(t, series); got < want {
			return fmt.Errorf("%s = %v, want at least %v", series, got, want)
		}
		return nil
	})
}
