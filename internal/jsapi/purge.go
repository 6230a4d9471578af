package jsapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// APIPurge is the stream purge subject prefix (default API prefix).
const APIPurge = "$JS.API.STREAM.PURGE."

// purged is how the server begins its answer to a purge that succeeded
// (JSApiStreamPurgeResponse: the type, then "success":true, then the count).
const purged = `{"type":"io.nats.jetstream.api.v1.stream_purge_response","success":true,`

// Purge removes stream's messages on subject (a filter) below sequence
// below, as jetstream.Stream.Purge does with WithPurgeSubject and
// WithPurgeSequence, and returns the server's *jetstream.APIError when it
// refuses. The request is written and a success read without encoding/json:
// a worker purges what each id committed, and the jetstream package's JSON
// (with reflection, both ways) was 2% of a zipf owner's CPU. A context
// without a deadline gets Timeout.
func Purge(ctx context.Context, nc *nats.Conn, stream, subject string, below uint64) error {
	ctx, cancel := WithTimeout(ctx)
	defer cancel()
	body, err := purgeRequest(subject, below)
	if err != nil {
		return err
	}
	resp, err := nc.RequestWithContext(ctx, APIPurge+stream, body)
	if err != nil {
		return fmt.Errorf("purge stream %s: %w", stream, err)
	}
	if bytes.HasPrefix(resp.Data, []byte(purged)) {
		return nil
	}
	var r struct {
		Error *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		return fmt.Errorf("purge stream %s: bad response: %w", stream, err)
	}
	if r.Error != nil {
		return fmt.Errorf("purge stream %s: %w", stream, r.Error)
	}
	return nil
}

// purgeRequest is JetStream's purge request, {"seq":below,"filter":subject}
// (a zero below is left out, as jetstream.StreamPurgeRequest does).
func purgeRequest(subject string, below uint64) ([]byte, error) {
	plain := subject != ""
	for i := 0; i < len(subject) && plain; i++ {
		c := subject[i]
		plain = c > 0x20 && c < 0x7f && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	if !plain {
		return json.Marshal(jetstream.StreamPurgeRequest{Sequence: below, Subject: subject})
	}
	b := make([]byte, 0, len(`{"seq":,"filter":""}`)+20+len(subject))
	b = append(b, '{')
	if below != 0 {
		b = append(b, `"seq":`...)
		b = strconv.AppendUint(b, below, 10)
		b = append(b, ',')
	}
	b = append(b, `"filter":"`...)
	b = append(b, subject...)
	return append(b, `"}`...), nil
}
