package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// pcgMemberMain runs a member process of the pcgroups side (OwnerMain
// with a spec that has Pcgroups) and returns its exit code: an instance of
// every member of the group, whose handler reports each delivery on
// stdout, one line written before the message is acknowledged (lineWriter,
// as an owner's):
//
//	d ID SEQ MEMBER MSG SENT_NS HANDLER_NS
//
// (an owner's line, with the member's index where an owner says its
// epoch). It prints "r PROCS" once it joined as every member, and stops
// (each instance stopped, as pcgroups' Stop does) on SIGTERM or SIGINT or
// when stdin closes. An instance that ends by itself (the group's config
// changed or was removed) ends the process with exit code 1.
func pcgMemberMain(spec ownerSpec) int {
	p := spec.Pcgroups
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("node", spec.Node)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		stop()
	}()
	nc, err := nats.Connect(spec.URL, nats.Name(spec.Node), nats.MaxReconnects(-1))
	if err != nil {
		log.Error("connect", "error", err)
		return exitOwnerError
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Error("jetstream", "error", err)
		return exitOwnerError
	}
	out := newLineWriter(os.Stdout)
	handler := func(member int) func(jetstream.Msg) {
		return func(m jetstream.Msg) {
			at := time.Now().UnixNano()
			d := parsePcgMsg(m, p.Prefix)
			b := make([]byte, 0, 96)
			b = append(b, "d "...)
			b = append(b, d.id...)
			for _, v := range []uint64{d.seq, uint64(member), d.n, d.sent, uint64(at)} {
				b = append(b, ' ')
				b = strconv.AppendUint(b, v, 10)
			}
			b = append(b, '\n')
			// The parent must know of the delivery before it is
			// acknowledged: unreported, it is redelivered after the ack wait.
			if err := out.write(b); err != nil {
				return
			}
			pcgAck(m)
		}
	}
	all := make([]int, len(p.Members))
	for i := range all {
		all[i] = i
	}
	members, err := pcgJoin(ctx, js, *p, all, handler)
	if err != nil {
		log.Error("join", "error", err)
		return exitOwnerError
	}
	_ = out.write(fmt.Appendf(nil, "r %d\n", runtime.GOMAXPROCS(0)))
	select {
	case <-ctx.Done():
		members.stop()
		return 0
	case err := <-members.done:
		log.Error("a member instance ended", "error", err)
		members.stop()
		return exitOwnerError
	}
}
