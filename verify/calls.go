package verify

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/queue"
	"github.com/fencepost/fencepost/testkit/history"
)

// Calls (docs/contract.md section 11). Beside the producers, callers call
// random ids of the run with client.World.Call, one call at a time, each
// with a key of its own as body and message id. The owners answer every
// call with answerFor: the call's key and sequence and the handler call
// that answered (node, epoch, entry time), which the checker matches
// against the deliveries the owners reported. Each call is also a send of
// the history (producer c<n>): posted when the post was stored (replied,
// failed, or timed out after its post), so lost, order and the rest apply
// to it as to every post.

// Call outcomes, as CallRecord.Outcome.
const (
	CallReplied = "replied" // answered replied
	CallFailed  = "failed"  // answered failed (dead-lettered)
	CallTimeout = "timeout" // stored, then no answer in time: unknown, never lost
	CallUnknown = "unknown" // the post's outcome is unknown
	CallRefused = "refused" // the post was refused: nothing stored
)

// CallRecord is one call a caller made.
type CallRecord struct {
	Caller   string    `json:"caller"` // its producer in the history's sends
	ID       string    `json:"id"`
	Key      string    `json:"key"`     // body and message id
	Outcome  string    `json:"outcome"` // CallReplied, ...
	Seq      uint64    `json:"seq,omitempty"`
	Answer   string    `json:"answer,omitempty"` // replied: the answer; failed: the handler error
	Invoked  time.Time `json:"invoked"`
	Returned time.Time `json:"returned"`
	// BucketSeq is the bucket stream's last sequence, read after the
	// answer came (0: not read): every commit stored before the answer was
	// sent is at or below it.
	BucketSeq uint64 `json:"bucket_seq,omitempty"`
}

// callGrace is how long a call in flight when the load stops may still
// wait for its answer (then it is a timeout: an unknown outcome).
const callGrace = time.Second

// callTimeout is how long a caller waits for the answer of its n-th call:
// for even n long enough for a takeover after a fault to answer, for odd
// n half a ttl, so that a call to a holder a fault stopped times out (an
// unknown outcome: it must be handled later all the same).
func (r *run) callTimeout(n int) time.Duration {
	if n%2 == 1 {
		return max(r.cfg.TTL/2, 250*time.Millisecond)
	}
	return 2*r.cfg.TTL + time.Second
}

// caller calls random ids until ctx ends, recording each call into the
// history (a send of producer) and into r.ct.
func (r *run) caller(ctx context.Context, w *client.World, bucket jetstream.Stream, producer string) {
	for n := 1; ; n++ {
		if !sleepCtx(ctx, time.Duration(50+rand.IntN(100))*time.Millisecond) {
			return
		}
		id := r.ids[rand.IntN(len(r.ids))]
		key := fmt.Sprintf("%s-%d", producer, n)
		h := r.rec.SendInvoked(producer, id, key)
		c := CallRecord{Caller: producer, ID: id, Key: key, Invoked: time.Now()}
		cctx, cancel := context.WithTimeout(context.Background(), r.callTimeout(n))
		unhook := context.AfterFunc(ctx, func() {
			t := time.NewTimer(callGrace)
			defer t.Stop()
			select {
			case <-t.C:
				cancel()
			case <-cctx.Done():
			}
		})
		a, err := w.Call(cctx, id, []byte(key), queue.WithMsgID(key))
		c.Returned = time.Now()
		unhook()
		cancel()
		var failed *client.CallFailedError
		var timeout *client.CallTimeoutError
		switch {
		case err == nil:
			c.Outcome, c.Seq, c.Answer = CallReplied, a.Seq, string(a.Body)
		case errors.As(err, &failed):
			c.Outcome, c.Seq, c.Answer = CallFailed, failed.Seq, failed.Err
		case errors.As(err, &timeout) && timeout.Posted:
			c.Outcome, c.Seq = CallTimeout, timeout.Seq
		case errors.As(err, &timeout):
			c.Outcome = CallUnknown
		default:
			c.Outcome = CallRefused // Send's refusals: nothing was stored
		}
		if c.Outcome == CallReplied || c.Outcome == CallFailed {
			c.BucketSeq = lastSeq(bucket)
		}
		switch c.Outcome {
		case CallUnknown:
			r.rec.SendDone(h, history.Unknown, 0)
		case CallRefused:
			r.rec.SendDone(h, history.Refused, 0)
		default:
			r.rec.SendDone(h, history.Posted, c.Seq)
		}
		r.ct.addCall(c)
	}
}

// lastSeq is the last sequence of stream s, as its leader answers now; 0
// if it does not answer.
func lastSeq(s jetstream.Stream) uint64 {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := s.Info(ctx)
	if err != nil {
		return 0
	}
	return info.State.LastSeq
}

// answerFor is the answer of a handler call of m entered at at (unix ns):
// what the checker matches with the delivery the owner reported.
func answerFor(m drain.Message, at int64) []byte {
	return fmt.Appendf(nil, "%s %d %s %d %d", m.Body, m.Seq, m.Fence.Node, m.Fence.Epoch, at)
}

// answerOf is an answer of answerFor read back.
type answerOf struct {
	key   string
	seq   uint64
	node  string
	epoch uint64
	at    int64
}

func parseAnswer(s string) (answerOf, bool) {
	f := strings.Fields(s)
	if len(f) != 5 {
		return answerOf{}, false
	}
	seq, err1 := strconv.ParseUint(f[1], 10, 64)
	epoch, err2 := strconv.ParseUint(f[3], 10, 64)
	at, err3 := strconv.ParseInt(f[4], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return answerOf{}, false
	}
	return answerOf{key: f[0], seq: seq, node: f[2], epoch: epoch, at: at}, true
}
