package drain

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/call"
)

// Calls (package call; docs/contract.md section 11). A message that names
// a reply subject (header Fencepost-Reply-To) is a call: its handler may
// answer it with Message.Reply, and the drain sends the answer once the
// commit covering the message was accepted, so that an answer means the
// message was handled and committed. A call whose handler did not reply
// is answered with an empty body; one dead-lettered after the world's
// max_deliveries is answered failed, with the last handler error, once
// the commit that moves past it was accepted. An answer that was not
// sent (the commit refused, its outcome unknown, the process gone) is
// sent by whoever delivers the message again: answers are at least once.

// ErrAnswerTooLarge: an answer the connection cannot send (over its max
// payload, less call.Overhead). The delivery fails with it, as with a
// handler error.
var ErrAnswerTooLarge = errors.New("drain: answer too large")

// callSlot is where a call's handler leaves its answer: Message is a
// value, and every copy of it shares its call's slot.
type callSlot struct {
	reply  string // the reply subject
	max    int    // the largest answer the connection sends
	answer []byte
	err    error // the answer given was refused (ErrAnswerTooLarge)
}

// IsCall says whether m is a call: whether Reply's answer goes anywhere.
func (m Message) IsCall() bool { return m.call != nil }

// Reply sets the answer to m, a call: the drain sends it to the caller
// once the handler returned nil and the commit covering m was accepted
// (a handler that returns an error answers nothing; the message is
// delivered again). A later Reply replaces an earlier one. For a message
// that is not a call (IsCall) it does nothing. An answer larger than the
// connection can send is refused with ErrAnswerTooLarge, and the delivery
// then fails with it whatever the handler returns.
func (m Message) Reply(answer []byte) error {
	s := m.call
	if s == nil {
		return nil
	}
	if len(answer) > s.max {
		s.err = fmt.Errorf("%w: %d bytes, the connection sends at most %d (its max payload less %d)", ErrAnswerTooLarge, len(answer), s.max, call.Overhead)
		return s.err
	}
	s.answer, s.err = append([]byte(nil), answer...), nil
	return nil
}

// CallHandler is a handler that answers: its answer goes to the caller
// when the message is a call (Message.Reply), and is dropped otherwise.
// An error leaves the message for redelivery, as a Handler's.
type CallHandler func(ctx context.Context, m Message) ([]byte, error)

// Handler returns the Handler that runs ch and replies with its answer.
func (ch CallHandler) Handler() Handler {
	return func(ctx context.Context, m Message) error {
		answer, err := ch(ctx, m)
		if err != nil {
			return err
		}
		return m.Reply(answer)
	}
}

// PrepareCall makes m a call when hdr, the stored message's headers, name
// a reply subject (call.ReplyTo): its handler may then Reply, and
// CallAnswer reads the answer. nc is the connection the answer will be
// sent on (its max payload bounds the answer). An engine that builds its
// own Messages (package shard) calls it before the handler; the drains
// here do it themselves.
func PrepareCall(m *Message, hdr nats.Header, nc *nats.Conn) {
	subj, ok, _ := call.ReplyTo(hdr)
	if !ok {
		m.call = nil
		return
	}
	m.call = &callSlot{reply: subj, max: maxAnswer(nc)}
}

// CallAnswer is what m's handler answered: the answer (nil when it did not
// Reply, or m is no call), and an error when the answer given cannot be
// sent, with which the delivery is to fail (ErrAnswerTooLarge).
func CallAnswer(m Message) ([]byte, error) {
	if m.call == nil {
		return nil, nil
	}
	return m.call.answer, m.call.err
}

// maxAnswer is the largest answer nc sends.
func maxAnswer(nc *nats.Conn) int {
	mp := 1 << 20 // nats-server's default max payload
	if nc != nil {
		if p := nc.MaxPayload(); p > 0 {
			mp = int(p)
		}
	}
	return max(mp-call.Overhead, 0)
}

// answer is a call's answer waiting for the commit that covers its
// message.
type answer struct {
	seq    uint64
	reply  string
	body   []byte
	failed string // dead-lettered: the last handler error
}

// answers are the answers a run or a holding owes, in stream order.
type answers struct {
	list []answer
}

// add keeps a; answers at or after its sequence are dropped (a message
// delivered again: what was handled after it is delivered again too, the
// cursor being below all of them).
func (as *answers) add(a answer) {
	i := len(as.list)
	for i > 0 && as.list[i-1].seq >= a.seq {
		i--
	}
	as.list = append(as.list[:i], a)
}

// release sends the answers of every message up to seq, whose commit
// the broker accepted, and forgets them. An answer that cannot be sent
// is logged: its caller times out (an unknown outcome).
func (as *answers) release(d *Drainer, seq uint64) {
	if as == nil || len(as.list) == 0 || as.list[0].seq > seq {
		return
	}
	n := 0
	for _, a := range as.list {
		if a.seq > seq {
			break
		}
		n++
		var herr error
		if a.failed != "" {
			herr = errors.New(a.failed)
		}
		if err := d.nc.PublishMsg(call.Message(a.reply, a.seq, a.body, herr)); err != nil {
			d.log.Warn("drain: answer to a call not sent; the caller times out", "world", d.world, "seq", a.seq, "error", err)
		}
	}
	as.list = append(as.list[:0], as.list[n:]...)
}

// prepareCall makes msg, the delivery of m, a call if m names a reply
// subject; a reply subject that is not one (call.CheckSubject) is logged,
// and the message handled as any other.
func (r *run) prepareCall(msg *Message, m *jetstream.RawStreamMsg) {
	subj, ok, err := call.ReplyTo(m.Header)
	if err != nil {
		r.d.log.Warn("drain: a message names a reply subject no answer is sent to; handled as any message", "world", r.d.world, "id", r.a.id, "seq", m.Sequence, "error", err)
	}
	if ok {
		msg.call = &callSlot{reply: subj, max: r.d.maxAnswer}
	}
}

// replied takes the answer of msg, a delivery its handler acknowledged:
// kept until the commit that covers it; an error when the answer given
// cannot be sent (the delivery then fails with it).
func (r *run) replied(msg Message) error {
	s := msg.call
	if s == nil {
		return nil
	}
	if s.err != nil {
		return s.err
	}
	if r.answers == nil {
		r.answers = &answers{}
	}
	r.answers.add(answer{seq: msg.Seq, reply: s.reply, body: s.answer})
	return nil
}

// deadLettered answers m failed, if it is a call, once the commit that
// moves past it is accepted: it is in the dead letters, with herr.
func (r *run) deadLettered(m *jetstream.RawStreamMsg, herr string) {
	subj, ok, _ := call.ReplyTo(m.Header)
	if !ok {
		return
	}
	if r.answers == nil {
		r.answers = &answers{}
	}
	if herr == "" {
		herr = "dead-lettered"
	}
	r.answers.add(answer{seq: m.Sequence, reply: subj, failed: herr})
}
