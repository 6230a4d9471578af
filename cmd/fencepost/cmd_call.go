package main

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/fencepost/fencepost/client"
)

// The flags of the call command.
var callFlags struct {
	From  string `name:"from" placeholder:"F" help:"the sender, shown to the handler"`
	MsgID string `name:"msg-id" placeholder:"K" help:"dedupe key: a retry inside the world's window is stored once, runs no handler again, and waits for the first post's answer"`
}

func init() {
	register("call", &command{
		usage: "call ID [--from F] [--msg-id K] BODY",
		short: `post a call and wait for the holder's answer (BODY "-" reads stdin; --timeout, 5s): replied answer=... | failed error=... | timeout`,
		long: `The call is posted into the id's mailbox like any message (durable, in order
with the id's other mail, delivered only to its holder), naming a reply subject
under this connection's inbox. The holder's handler answers (work --exec: the
command's stdout), and the answer is sent once the message's commit was
accepted. --timeout bounds the whole call.
  replied seq=N answer=A   handled and committed; A is the answer (--json:
                           "answer", and "answer_b64" when it is not UTF-8)
  failed seq=N error=E     exit 18: dead-lettered after the world's
                           max_deliveries; E is the last handler error
  timeout [seq=N]          exit 17: no answer in time, an unknown outcome: the
                           call stays in the mailbox and may still be handled.
                           Retry with the same --msg-id: it is not stored or
                           run again, and waits for the first post's answer
Answers are at least once: the first one is taken.
`,
		examples: []string{
			`fencepost call order-42 "status?"                 # replied seq=N answer=... (exit 0) once a worker handled it`,
			`fencepost call order-42 --msg-id k1 "pay 10 EUR"   # timeout (exit 17)? run it again as is: it runs once`,
			`fencepost work --node w1 --all --exec 'echo "got $(cat)"'   # a worker whose stdout answers calls`,
		},
		flags: &callFlags,
		run:   runCall,
	})
}

func runCall(e *env, args []string) int {
	id, body, opts, code := e.postArgs("call", args, callFlags.From, callFlags.MsgID)
	if code != exitOK {
		return code
	}
	// A producer may call: it posts, and its answer comes to its inbox.
	return e.worldOpWith(e.openWorldToPost, func(ctx context.Context, w *client.World) int {
		a, err := w.Call(ctx, id, body, opts...)
		var (
			failed  *client.CallFailedError
			timeout *client.CallTimeoutError
		)
		switch {
		case err == nil:
			fields := []field{f("seq", a.Seq), f("duplicate", a.Duplicate), f("answer", string(a.Body))}
			if !utf8.Valid(a.Body) {
				fields = append(fields, f("answer_b64", base64.StdEncoding.EncodeToString(a.Body)))
			}
			e.emit("replied", fields...)
			return exitOK
		case errors.As(err, &failed):
			e.emit("failed", f("seq", failed.Seq), f("error", failed.Err))
			return exitCallFailed
		case errors.As(err, &timeout):
			var fields []field
			if timeout.Posted {
				fields = append(fields, f("seq", timeout.Seq))
			}
			fields = append(fields, f("posted", timeout.Posted), f("duplicate", timeout.Duplicate))
			if e.json {
				fields = append(fields, f("error", err.Error()))
			}
			e.emit("timeout", fields...)
			if !e.json {
				fmt.Fprintf(e.err, "timeout: %v\n", err)
			}
			return exitCallTimeout
		}
		return e.sendFailed(err)
	})
}
