package main

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/queue"
	"github.com/fencepost/fencepost/shard"
)

// The flags of the mailbox commands (one command runs per process).
var (
	sendFlags struct {
		From  string `name:"from" placeholder:"F" help:"the sender, shown to the handler"`
		MsgID string `name:"msg-id" placeholder:"K" help:"dedupe key: a retry inside the world's window is stored once"`
		// A timer (docs/contract.md section 11; cmd_timer.go).
		At    atValue    `name:"at" placeholder:"TIME" help:"a timer: the message enters the mailbox at TIME (RFC 3339, e.g. 2026-05-01T09:00:00Z), never before"`
		After afterValue `name:"after" placeholder:"DURATION" help:"a timer: the message enters the mailbox DURATION from now (e.g. 90s, 2h)"`
		Key   string     `name:"key" placeholder:"K" help:"with --at or --after: the timer's key; a send with a pending timer's key replaces it, and timer cancel ID K removes it (default: made from --msg-id, or at random)"`
	}
	drainFlags struct {
		Node  string     `name:"node" placeholder:"N" help:"the holding node (required)"`
		Epoch epochValue `name:"epoch" placeholder:"E" help:"the holding's epoch (required)"`
		Max   maxValue   `name:"max" placeholder:"N" help:"stop after N messages, N >= 1 (default: until the mailbox is empty)"`
		shardFlag
	}
	dlqFlags struct {
		Limit int `name:"limit" placeholder:"N" help:"ls: list at most N (default all)"`
		// Unroutable: dlq ls and purge act on the world's unroutable
		// messages.
		Unroutable bool `name:"unroutable" help:"ls, purge: the world's unroutable messages (posted to a subject no id encodes to), without ID"`
		// Seq: the message dlq skip moves to the dead letters.
		Seq uint64 `name:"seq" placeholder:"N" help:"skip: the sequence of the mailbox message to move to the dead letters (stat ID shows the next one's as next_seq)"`
	}
)

func init() {
	outcomeMappers = append(outcomeMappers, mailboxOutcome)
	register("send", &command{
		usage: "send ID [--from F] [--msg-id K] [--at TIME | --after DURATION [--key K]] BODY",
		short: `post into a mailbox (BODY "-" reads stdin): posted seq=N [duplicate] | full; with --at or --after a timer: scheduled key=K at=T`,
		examples: []string{
			`fencepost send order-42 --from shop "pay 10 EUR"    # posted seq=N (exit 0), owned or not`,
			`fencepost send order-42 --msg-id k1 "ship it"       # posted seq=N; again inside the dedupe window: posted seq=N duplicate`,
			`echo hello | fencepost send order-42 -              # the body from stdin`,
			`fencepost send order-42 -- -1                       # a body that starts with '-' goes after --`,
			`fencepost send order-42 --after 30m --key remind "check payment"   # scheduled key=remind at=... timer_seq=N: in the mailbox in 30 minutes`,
			`fencepost send order-42 --at 2026-05-01T09:00:00Z "open"           # scheduled key=_... at=2026-05-01T09:00:00Z`,
		},
		flags: &sendFlags,
		run:   runSend,
	})
	register("drain", &command{
		usage: "drain ID --node N --epoch E [--max N]   (--shard S for ID: a shard of a sharded world)",
		short: "print the mailbox in order, then done count=K | held-by | free | fenced | contended",
		examples: []string{
			"fencepost drain order-42 --node node-a --epoch 1          # message seq=... body=... per message, then done count=K",
			"fencepost drain order-42 --node node-a --epoch 1 --json   # one object per message (body_b64 too when not UTF-8), then the outcome",
			"fencepost --world sharded drain order-42 --node node-a --epoch 3   # the id's shard, which node-a claimed: message id=... seq=... per message of the shard, then done count=K shard=S",
		},
		flags: &drainFlags,
		run:   runDrain,
	})
	register("stat", &command{
		usage: "stat [ID]",
		short: "mailbox depth, oldest message, cursor, dead letters, owner; without ID the world's totals",
		examples: []string{
			"fencepost stat order-42   # stat depth=2 oldest=... oldest_age=1.5s cursor=... node=... epoch=...",
			"fencepost stat            # stat world=default ids=... depth=... owned=...",
		},
		run: runStat,
	})
	register("dlq", &command{
		usage: "dlq ls|repost|purge ID [--limit N] | dlq skip ID --seq N | dlq ls|purge --unroutable",
		short: "dead letters: list them, post them back into the mailbox, drop them, or move a stuck message there (skip)",
		examples: []string{
			"fencepost dlq ls order-42                # dead-letter seq=... deliveries=5 error=... per letter, then listed count=K",
			"fencepost dlq repost order-42            # reposted count=K: back into the mailbox, in order",
			"fencepost dlq skip order-42 --seq 1041   # skipped seq=1041: the message moves to the dead letters now (operator)",
			"fencepost dlq ls --unroutable            # messages posted to a subject no id encodes to",
			"fencepost dlq purge --unroutable         # purged count=K",
		},
		flags: &dlqFlags,
		run:   runDLQ,
	})
}

// mailboxOutcome maps the mailbox packages' outcomes to words and codes.
func mailboxOutcome(e *env, err error) (int, bool) {
	var (
		full      *queue.FullError
		contended *drain.ContendedError
	)
	switch {
	case errors.As(err, &full):
		e.emit("full", f("limit", full.Limit), f("kind", string(full.Kind)))
		return exitFull, true
	case errors.As(err, &contended):
		if contended.Node != "" {
			e.emit("contended", f("node", contended.Node), f("epoch", contended.Epoch), f("expires", contended.Expires))
		} else {
			e.emit("contended")
		}
		return exitContended, true
	case errors.Is(err, drain.ErrContended):
		e.emit("contended")
		return exitContended, true
	case errors.Is(err, queue.ErrUnknown), errors.Is(err, drain.ErrUnknown):
		e.errorOut("unknown", err)
		return exitError, true
	}
	return 0, false
}

// worldOp opens the world and runs fn with it, under the --timeout limit.
func (e *env) worldOp(fn func(ctx context.Context, w *client.World) int) int {
	return e.worldOpWith(e.openWorld, fn)
}

func (e *env) worldOpWith(open func(context.Context) (*client.World, error), fn func(ctx context.Context, w *client.World) int) int {
	ctx, cancel := e.ctx()
	defer cancel()
	w, err := open(ctx)
	if err != nil {
		return e.fail(err)
	}
	return fn(ctx, w)
}

// postArgs reads a post's ID and BODY ("-": stdin) for command cmd, and
// the options of its --from and --msg-id; code is exitOK, or the command's
// exit code when the arguments are refused.
func (e *env) postArgs(cmd string, args []string, from, msgID string) (id string, body []byte, opts []queue.SendOption, code int) {
	if len(args) != 2 {
		return "", nil, nil, e.usageErr(cmd, "want ID and BODY, got %d arguments", len(args))
	}
	id, body = args[0], []byte(args[1])
	if args[1] == "-" {
		b, err := io.ReadAll(io.LimitReader(os.Stdin, 64<<20))
		if err != nil {
			return "", nil, nil, e.fail(fmt.Errorf("%s: read stdin: %w", cmd, err))
		}
		body = b
	}
	if from != "" {
		opts = append(opts, queue.WithFrom(from))
	}
	if msgID != "" {
		opts = append(opts, queue.WithMsgID(msgID))
	}
	return id, body, opts, exitOK
}

func runSend(e *env, args []string) int {
	id, body, opts, code := e.postArgs("send", args, sendFlags.From, sendFlags.MsgID)
	if code != exitOK {
		return code
	}
	timerOpts, code := e.sendTimerOpts()
	if code != exitOK {
		return code
	}
	opts = append(opts, timerOpts...)
	// A producer may post without reading the world's streams.
	return e.worldOpWith(e.openWorldToPost, func(ctx context.Context, w *client.World) int {
		p, err := w.Send(ctx, id, body, opts...)
		switch {
		case errors.Is(err, queue.ErrInvalidTimer):
			return e.usageErr("send", "%v; nothing was sent", err)
		case err != nil:
			return e.sendFailed(err)
		case len(timerOpts) > 0:
			// A timer: stored in the world's timer stream (timer_seq), in
			// the mailbox at its time.
			e.emit("scheduled", f("key", p.Key), f("at", p.At), f("timer_seq", p.Seq), f("duplicate", p.Duplicate))
			return exitOK
		}
		e.emit("posted", f("seq", p.Seq), f("duplicate", p.Duplicate))
		return exitOK
	})
}

// sendFailed reports a send that did not answer posted. Once the world
// is open, the send's own error says what happened, also when the server
// refused this client something meanwhile: a refused subscription to the
// reply inbox leaves the post's outcome unknown, it is no refusal of the
// post (docs/wire.md "Limits and errors").
func (e *env) sendFailed(err error) int {
	var unknown *queue.UnknownError
	if !errors.As(err, &unknown) {
		return e.outcome(err)
	}
	retry := fmt.Sprintf("see whether it was stored (fencepost stat %s) before you send it again: without --msg-id a retry may store it twice", quoteIfNeeded(unknown.ID))
	if unknown.MsgID != "" {
		retry = fmt.Sprintf("retry with the same --msg-id %s: if it was stored, the retry answers posted seq=N duplicate", quoteIfNeeded(unknown.MsgID))
	}
	var np *client.NotPermittedError
	if errors.As(err, &np) && np.Op == "subscription" {
		retry += "; its answer cannot come to a reply inbox the server refuses: give --creds (its inbox prefix) or --inbox-prefix"
	}
	e.errorOut("unknown", fmt.Errorf("send to %q: outcome unknown, the post may be stored (%v); %s", unknown.ID, unknown.Err, retry))
	return exitError
}

// runDrain drains until the mailbox is empty (or --max), or until
// interrupted; --timeout bounds each request, not the drain. In a sharded
// world the mailbox is the id's shard's (or --shard's): the holder of the
// shard drains every id of it (shard.Drain).
func runDrain(e *env, args []string) int {
	byShard := e.given["shard"]
	switch {
	case byShard && len(args) != 0:
		return e.usageErr("drain", "give an ID or --shard S, not both")
	case !byShard && len(args) != 1:
		return e.usageErr("drain", "want exactly one ID (or --shard S in a sharded world), got %d arguments", len(args))
	case drainFlags.Node == "" || drainFlags.Epoch == 0:
		return e.usageErr("drain", "--node and --epoch are required")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	octx, cancel := e.ctx()
	w, err := e.openWorld(octx)
	cancel()
	if err != nil {
		return e.fail(err)
	}
	var u client.Unit
	if byShard {
		if u, err = w.ShardUnit(int(drainFlags.Shard)); err != nil {
			return e.usageErr("drain", "--shard %d: %v", drainFlags.Shard, err)
		}
	} else if u, err = w.Unit(args[0]); err != nil {
		return e.fail(err)
	}
	e.sharded, e.shard = u.Sharded(), u.Shard
	handler := func(_ context.Context, m drain.Message) error {
		var fields []field
		if u.Sharded() {
			fields = append(fields, f("id", m.ID)) // a shard holds many ids
		}
		fields = append(fields, f("seq", m.Seq), f("from", m.From), f("delivery", m.Delivery), f("epoch", m.Fence.Epoch), f("redelivered", m.Redelivered))
		e.emit("message", append(fields, bodyFields(m.Body)...)...)
		return nil
	}
	var res drain.Result
	if u.Sharded() {
		res, err = shard.Drain(ctx, w.World, w.Ownership, w.Drainer, u.Shard, drainFlags.Node, uint64(drainFlags.Epoch), handler,
			shard.DrainOptions{Max: int(drainFlags.Max), Log: e.log})
	} else {
		res, err = w.Drainer.Drain(ctx, args[0], drainFlags.Node, uint64(drainFlags.Epoch), handler, drain.WithMax(int(drainFlags.Max)))
	}
	if err != nil {
		if res.Count > 0 {
			fmt.Fprintf(e.err, "drain: %d messages were committed before this\n", res.Count)
		}
		return e.fail(err)
	}
	e.emitUnit("done", f("count", res.Count), f("dead", res.DeadLettered))
	return exitOK
}

func runStat(e *env, args []string) int {
	if len(args) > 1 {
		return e.usageErr("stat", "want at most one ID, got %d arguments", len(args))
	}
	return e.worldOp(func(ctx context.Context, w *client.World) int {
		if len(args) == 0 {
			ws, err := w.Mailboxes.WorldStat(ctx)
			if err != nil {
				return e.fail(err)
			}
			fields := []field{f("world", w.Name), f("ids", ws.IDs), f("depth", ws.Depth), f("owned", ws.Owned), f("dead", ws.DeadLetters), f("unroutable", ws.Unroutable),
				f("committed_stored", ws.CommittedStored)}
			if !ws.CommittedOldest.IsZero() {
				// How long committed mail has waited for its removal.
				fields = append(fields, f("committed_age", ageOf(ws.CommittedOldest, time.Now())))
			}
			// The world's kind, and its shards (0: a per-id world).
			fields = append(fields, f("kind", w.Config.Kind()), f("shards", w.Config.Shards))
			if ws.Unlisted {
				// Past 100,000 subjects: counted, not listed (mailbox.WorldStat).
				fields = append(fields, f("unlisted", true))
			}
			fields = append(fields, e.timerStatFields(ctx, w, "")...)
			e.emit("stat", fields...)
			return exitOK
		}
		st, err := w.Mailboxes.Stat(ctx, args[0])
		if err != nil {
			return e.fail(err)
		}
		fields := []field{f("depth", st.Depth)}
		if !st.Oldest.IsZero() {
			// The oldest message's timestamp, and its age (docs/contract.md section 2:
			// "oldest message age") under world info's name for it.
			fields = append(fields, f("oldest", st.Oldest), f("oldest_age", ageOf(st.Oldest, time.Now())))
		}
		fields = append(fields, f("cursor", st.Cursor), f("failures", st.Failures), f("dead", st.DeadLetters), f("limit", w.Queue.Limit()))
		if st.Undeliverable {
			fields = append(fields, f("undeliverable", true))
		}
		if u, err := w.Unit(args[0]); err == nil && u.Sharded() {
			// The owner below is the shard's: its record is the id's.
			fields = append(fields, f("shard", u.Shard))
		}
		if st.Owner.Held {
			fields = append(fields, f("node", st.Owner.Node), f("epoch", st.Owner.Epoch), f("expires", st.Owner.Expires))
		} else {
			fields = append(fields, f("free", true), f("epoch", st.Owner.Epoch))
		}
		// The committed messages not yet purged (not depth), and the next
		// message's sequence (dlq skip's --seq).
		fields = append(fields, f("committed_stored", st.CommittedStored))
		if !st.CommittedOldest.IsZero() {
			fields = append(fields, f("committed_age", ageOf(st.CommittedOldest, time.Now())))
		}
		if st.NextSeq != 0 {
			fields = append(fields, f("next_seq", st.NextSeq))
		}
		fields = append(fields, e.timerStatFields(ctx, w, args[0])...)
		e.emit("stat", fields...)
		return exitOK
	})
}

func runDLQ(e *env, args []string) int {
	if dlqFlags.Seq != 0 && (len(args) == 0 || args[0] != "skip") {
		return e.usageErr("dlq", "--seq goes with skip")
	}
	if dlqFlags.Unroutable {
		if len(args) != 1 || args[0] != "ls" && args[0] != "purge" {
			return e.usageErr("dlq", "--unroutable goes with ls or purge and no ID")
		}
		if args[0] == "purge" {
			return e.worldOp(func(ctx context.Context, w *client.World) int {
				n, err := w.Mailboxes.PurgeUnroutable(ctx)
				if err != nil {
					return e.fail(err)
				}
				e.emit("purged", f("count", n))
				return exitOK
			})
		}
		return e.worldOp(func(ctx context.Context, w *client.World) int {
			dls, err := w.Mailboxes.Unroutable(ctx, dlqFlags.Limit)
			if err != nil {
				return e.fail(err)
			}
			for _, dl := range dls {
				e.emit("unroutable", append([]field{f("seq", dl.Seq), f("mailbox_seq", dl.MailboxSeq), f("subject", dl.Subject), f("from", dl.From),
					f("error", dl.Error), f("posted", dl.Posted)}, bodyFields(dl.Body)...)...)
			}
			e.emit("listed", f("count", len(dls)))
			return exitOK
		})
	}
	if len(args) != 2 {
		return e.usageErr("dlq", "want ls, repost, purge or skip and an ID, got %d arguments", len(args))
	}
	op, id := args[0], args[1]
	if op == "skip" && dlqFlags.Seq == 0 {
		return e.usageErr("dlq", "skip wants --seq N, the message to move to the dead letters (stat %s shows the next one's as next_seq)", id)
	}
	return e.worldOp(func(ctx context.Context, w *client.World) int {
		switch op {
		case "ls":
			dls, err := w.Mailboxes.DeadLetters(ctx, id, dlqFlags.Limit)
			if err != nil {
				return e.fail(err)
			}
			for _, dl := range dls {
				e.emit("dead-letter", append([]field{f("seq", dl.Seq), f("mailbox_seq", dl.MailboxSeq), f("from", dl.From),
					f("deliveries", dl.Deliveries), f("error", dl.Error), f("posted", dl.Posted)}, bodyFields(dl.Body)...)...)
			}
			e.emit("listed", f("count", len(dls)))
		case "repost":
			n, err := w.Mailboxes.Repost(ctx, w.Queue, id)
			if err != nil {
				if n > 0 {
					fmt.Fprintf(e.err, "dlq: %d dead letters were reposted before this\n", n)
				}
				return e.fail(err)
			}
			e.emit("reposted", f("count", n))
		case "purge":
			n, err := w.Mailboxes.PurgeDeadLetters(ctx, id)
			if err != nil {
				return e.fail(err)
			}
			e.emit("purged", f("count", n))
		case "skip":
			if err := w.Mailboxes.Skip(ctx, id, dlqFlags.Seq); err != nil {
				return e.fail(err)
			}
			e.emit("skipped", f("seq", dlqFlags.Seq))
		default:
			return e.usageErr("dlq", "unknown operation %q: use ls, repost, purge or skip", op)
		}
		return exitOK
	})
}

// ageOf is how long ago t was, to the millisecond, as a duration
// ("1.5s"); never negative, whatever the clocks.
func ageOf(t, now time.Time) string {
	return max(now.Sub(t), 0).Round(time.Millisecond).String()
}

// bodyFields is a message body as output fields: "body" as text, and, for
// a body that is not valid UTF-8 (which text and JSON cannot carry as it
// is), "body_b64" too, the exact bytes in standard base64.
func bodyFields(b []byte) []field {
	out := []field{f("body", string(b))}
	if !utf8.Valid(b) {
		out = append(out, f("body_b64", base64.StdEncoding.EncodeToString(b)))
	}
	return out
}
