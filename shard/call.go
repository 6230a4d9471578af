package shard

import (
	"errors"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/call"
	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/wire"
)

// Calls on a sharded world (package call; docs/contract.md section 11). A
// message that names a reply subject is a call: its handler may answer it
// (drain.Message.Reply), and the holder sends the answer only once a
// cursor the broker accepted covers the message, so that an answer means
// handled and committed. A call dead-lettered after its last delivery is
// answered failed, with the last error, once a commit covers it. An answer
// not sent (the holding lost, the process gone) is sent by whoever hands
// the message out again: at least once.

// answer is one call's answer waiting for a commit that covers its
// message.
type answer struct {
	eid    string
	m      *jetstream.RawStreamMsg
	body   []byte
	failed string // a dead letter's last error: answered failed
}

// answerCommitted sends the answers a commit of c covers, and keeps the
// rest for a later commit.
func (h *holder) answerCommitted(c wire.ShardCursor) {
	if len(h.answers) == 0 {
		return
	}
	nc := handles.Of(h.wk.w).JS.Conn()
	keep := h.answers[:0]
	for _, a := range h.answers {
		if !c.Committed(a.eid, a.m.Sequence) {
			keep = append(keep, a)
			continue
		}
		var herr error
		if a.failed != "" {
			herr = errors.New(a.failed)
		}
		if err := call.Answer(nc, a.m.Header, a.m.Sequence, a.body, herr); err != nil {
			h.log.Warn("answer not sent; the caller times out, and the call is handled", "seq", a.m.Sequence, "error", err)
		}
	}
	clear(h.answers[len(keep):])
	h.answers = keep
}
