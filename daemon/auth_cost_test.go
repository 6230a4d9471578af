package daemon_test

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/daemon"
	"github.com/fencepost/fencepost/fencing"
	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/internal/wire"
)

// BenchmarkAuth_RequestAcrossImport: the round trip of one request of an
// owner under --auth, through the owners' account's service import, beside
// the same request of a user of the store account (the operator): a key
// write's acknowledgement, a commit's (a one-message batch fenced on a
// record, to a state key and to a cursor), a post's, a direct get, and
// posts 256 at a time
// (docs/security.md, "What --auth costs").
func BenchmarkAuth_RequestAcrossImport(b *testing.B) {
	for _, who := range []string{"operator", "node-owner"} {
		b.Run(who, func(b *testing.B) {
			a := startAuthedB(b)
			var creds daemon.Creds
			var err error
			if who == "operator" {
				creds, err = daemon.ReadCreds(daemon.CredsFile(a.dir, daemon.RoleOperator))
			} else {
				is, ierr := daemon.IssueCreds(a.dir, daemon.IssueRequest{Role: daemon.RoleOwner, Node: "node-a"})
				require.NoError(b, ierr)
				creds, err = daemon.ReadCreds(is.File)
			}
			require.NoError(b, err)
			nc, err := nats.Connect(a.d.ClientURL(), creds.NATSOption())
			require.NoError(b, err)
			defer nc.Close()
			js, err := jetstream.New(nc)
			require.NoError(b, err)
			ctx := context.Background()
			kv, err := js.KeyValue(ctx, wire.Bucket("default"))
			require.NoError(b, err)
			key := wire.CursorKey("bench")
			body := []byte(`{"v":1,"seq":1}`)
			b.Run("kv-put", func(b *testing.B) {
				for b.Loop() {
					_, err := kv.Put(ctx, key, body)
					require.NoError(b, err)
				}
			})
			// A commit's one-message batch fenced on the user's own
			// record, to a state key (whose import shares the requester,
			// for the auditor: writers.go) and to a cursor (whose import
			// does not).
			rec, err := wire.EncodeRecord(wire.Record{Node: "node-a", Epoch: 1, State: wire.StateHeld, TTLms: 3_600_000, Acquired: time.Now(), Expires: time.Now().Add(time.Hour)})
			require.NoError(b, err)
			rev, err := kv.Create(ctx, wire.RecordKey("bench"), rec)
			require.NoError(b, err)
			for name, k := range map[string]string{"commit-state": wire.StateKey("bench", "k"), "commit-cursor": wire.CursorKey("bench")} {
				b.Run(name, func(b *testing.B) {
					for b.Loop() {
						m := nats.NewMsg(wire.KeySubject("default", k))
						m.Data = body
						m.Header.Set(fencing.HeaderExpectedSeq, strconv.FormatUint(rev, 10))
						m.Header.Set(fencing.HeaderExpectedSubject, wire.KeySubject("default", wire.RecordKey("bench")))
						_, err := jsapi.PublishBatch(ctx, js, []*nats.Msg{m})
						require.NoError(b, err)
					}
				})
			}
			b.Run("post", func(b *testing.B) {
				for b.Loop() {
					_, err := js.Publish(ctx, wire.MailboxSubject("default", "bench"), body)
					require.NoError(b, err)
				}
			})
			b.Run("direct-get", func(b *testing.B) {
				for b.Loop() {
					_, err := kv.Get(ctx, wire.WorldKey) // the settings entry
					require.NoError(b, err)
				}
			})
			b.Run("post-async-window-256", func(b *testing.B) {
				n := 0
				for b.Loop() {
					if _, err := js.PublishAsync(wire.MailboxSubject("default", "bench"), body); err != nil {
						b.Fatal(err)
					}
					n++
					if n%256 == 0 {
						select {
						case <-js.PublishAsyncComplete():
						case <-time.After(10 * time.Second):
							b.Fatal("acks")
						}
					}
				}
				<-js.PublishAsyncComplete()
			})
		})
	}
}

// authedB is startAuthed for a benchmark.
type authedB struct {
	d    *daemon.Daemon
	dir  string
	stop context.CancelFunc
	done chan error
}

func startAuthedB(b *testing.B) *authedB {
	b.Helper()
	dir := b.TempDir()
	cfg, err := daemon.Parse([]string{"--port", "-1", "--http", "off", "--data", dir, "--log-level", "warn", "--auth"}, io.Discard)
	require.NoError(b, err)
	d, err := daemon.Start(cfg, daemon.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	require.NoError(b, err)
	ctx, cancel := context.WithCancel(context.Background())
	a := &authedB{d: d, dir: dir, stop: cancel, done: make(chan error, 1)}
	go func() { a.done <- d.Run(ctx) }()
	b.Cleanup(func() { cancel(); <-a.done })
	// Ready once the operator opens the world.
	creds, err := daemon.ReadCreds(daemon.CredsFile(dir, daemon.RoleOperator))
	require.NoError(b, err)
	deadline := time.Now().Add(10 * time.Second)
	for {
		nc, err := nats.Connect(d.ClientURL(), creds.NATSOption())
		if err == nil {
			js, _ := jetstream.New(nc)
			_, err = js.KeyValue(context.Background(), wire.Bucket("default"))
			nc.Close()
		}
		if err == nil {
			return a
		}
		if time.Now().After(deadline) {
			b.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
