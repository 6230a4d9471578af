package ownership

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// errNoMsg: the subject holds no message.
var errNoMsg = errors.New("no message")

// storedMsg is one message as the stream leader returned it.
type storedMsg struct {
	Seq    uint64
	Header nats.Header
	Data   []byte
}

// getLast asks the stream leader for the last message on subject. Unlike a
// KV Get (a direct get, which any replica may answer, slightly stale on R3),
// the leader answers from the state every conditional write is checked
// against, so a decision and its refusal are based on the latest record.
func getLast(ctx context.Context, js jetstream.JetStream, stream, subject string) (storedMsg, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
	}
	req, _ := json.Marshal(struct {
		LastFor string `json:"last_by_subj"`
	}{subject})
	resp, err := js.Conn().RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+stream, req)
	if err != nil {
		return storedMsg{}, err
	}
	var r struct {
		Error *struct {
			Code        int    `json:"code"`
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
		Message *struct {
			Seq  uint64 `json:"seq"`
			Hdrs []byte `json:"hdrs"`
			Data []byte `json:"data"`
		} `json:"message"`
	}
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		return storedMsg{}, fmt.Errorf("bad reply to a message get: %w", err)
	}
	if r.Error != nil {
		if r.Error.ErrCode == int(jetstream.JSErrCodeMessageNotFound) {
			return storedMsg{}, errNoMsg
		}
		return storedMsg{}, fmt.Errorf("message get: %s (code %d/%d)", r.Error.Description, r.Error.Code, r.Error.ErrCode)
	}
	if r.Message == nil {
		return storedMsg{}, errors.New("message get: empty reply")
	}
	m := storedMsg{Seq: r.Message.Seq, Data: r.Message.Data}
	if len(r.Message.Hdrs) > 0 {
		if m.Header, err = nats.DecodeHeadersMsg(r.Message.Hdrs); err != nil {
			return storedMsg{}, fmt.Errorf("message get: headers: %w", err)
		}
	}
	return m, nil
}
