package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/client"
)

// setupRaw is the baseline: a plain stream with one subject per id,
// producers using PublishAsync, and one pull consumer per subject fetching
// batches of up to 100 and acknowledging each batch once (AckAll on its
// last message). In fan-in, one pull consumer of every subject fetches
// batches of up to 1000 instead.
func setupRaw(ctx context.Context, c *client.Client, cfg Config, tag string, ids []string, start time.Time) (_ *runner, err error) {
	s := newSide("raw", cfg, start, ids)
	r := &runner{s: s, errs: make(chan error, len(ids)), stop: func() {}}
	defer func() {
		if err != nil {
			r.close()
		}
	}()
	js := c.JetStream()
	name := "RAW_" + tag[len("bench-"):]
	prefix := "fpbench.raw." + tag[len("bench-"):]
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{prefix + ".*"}, Replicas: cfg.Replicas})
	if err != nil {
		return nil, fmt.Errorf("bench: create raw stream: %w", err)
	}
	r.clean = append(r.clean, removeWith(func(ctx context.Context) error { return js.DeleteStream(ctx, name) }))
	r.streams = map[string]string{streamRaw: name}
	cctx, stopConsumers := context.WithCancel(ctx)
	var wg sync.WaitGroup
	r.stop = func() { stopConsumers(); wg.Wait() }
	filters, batchSize := make([]string, len(ids)), 100
	for i, id := range ids {
		filters[i] = prefix + "." + id
	}
	if cfg.Scenario == ScenarioFanIn || cfg.Scenario == ScenarioZipf {
		filters, batchSize = []string{prefix + ".*"}, 1000
	}
	for i, filter := range filters {
		// InactiveThreshold: an ephemeral consumer is removed after 5 s
		// without a pull by default, which a stall of an overloaded machine
		// can reach; the stream's removal removes it at the end.
		// On a replicated stream the consumers are replicated too (an
		// ephemeral one has one replica and dies with its member).
		cc := jetstream.ConsumerConfig{FilterSubject: filter, AckPolicy: jetstream.AckAllPolicy, MaxAckPending: -1, InactiveThreshold: time.Hour}
		if cfg.Replicas > 1 {
			cc.Durable, cc.Replicas = fmt.Sprintf("raw-%d", i), cfg.Replicas
		}
		cons, err := st.CreateConsumer(ctx, cc)
		if err != nil {
			return nil, fmt.Errorf("bench: raw consumer: %w", err)
		}
		wg.Go(func() {
			var failing time.Time // since when Fetch fails; zero: it works
			// fail notes a failed pull: a stalled server (an overloaded
			// machine) or a lost stream leader may fail pulls for a while;
			// it gives up after 30 s of nothing but failures.
			fail := func(err error) bool {
				if failing.IsZero() {
					failing = time.Now()
				}
				if cctx.Err() != nil {
					return false
				}
				if time.Since(failing) > 30*time.Second {
					r.errs <- err
					return false
				}
				time.Sleep(100 * time.Millisecond)
				return true
			}
			for cctx.Err() == nil {
				batch, err := cons.Fetch(batchSize, jetstream.FetchMaxWait(250*time.Millisecond))
				if err != nil {
					if !fail(err) {
						return
					}
					continue
				}
				var last jetstream.Msg
				for m := range batch.Messages() {
					s.deliver(m.Data())
					last = m
				}
				if last != nil {
					_ = last.Ack()
				}
				if err := batch.Error(); err != nil && cctx.Err() == nil && !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, context.DeadlineExceeded) {
					if !fail(err) {
						return
					}
					continue
				}
				failing = time.Time{}
			}
		})
	}
	publish := rawPublisher(ctx, js, prefix)
	r.send = func(id string, body []byte) (func() (uint64, error), error) {
		return publish(id, body)
	}
	if cfg.KillLeaders {
		r.send = resending(ctx, func(id string, body []byte, msgID string) (func(context.Context) (uint64, error), error) {
			f, err := js.PublishAsync(prefix+"."+id, body, jetstream.WithMsgID(msgID))
			if err != nil {
				return nil, err
			}
			return func(ctx context.Context) (uint64, error) { return ackOf(ctx, f) }, nil
		})
	}
	return r, nil
}

// rawPublisher posts asynchronously to the raw stream's subject of an id.
func rawPublisher(ctx context.Context, js jetstream.JetStream, prefix string) func(id string, body []byte) (func() (uint64, error), error) {
	return func(id string, body []byte) (func() (uint64, error), error) {
		f, err := js.PublishAsync(prefix+"."+id, body)
		if err != nil {
			return nil, err
		}
		return func() (uint64, error) { return ackOf(ctx, f) }, nil
	}
}

// ackOf waits for an asynchronous publish's acknowledgement and says the
// stream sequence it gives.
func ackOf(ctx context.Context, f jetstream.PubAckFuture) (uint64, error) {
	select {
	case a := <-f.Ok():
		return a.Sequence, nil
	case err := <-f.Err():
		return 0, err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}
