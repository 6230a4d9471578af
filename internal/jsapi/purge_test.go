package jsapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/server/servertest"
)

// TestPurge: a purge removes the filter's messages below the sequence and
// nothing else, as the jetstream package's does; a refusal is the
// server's APIError.
func TestPurge(t *testing.T) {
	nc, js := servertest.Connect(t, servertest.New(t).ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}})
	require.NoError(t, err)
	for i := range 10 {
		for _, subj := range []string{"s.a", "s.b"} {
			_, err := js.Publish(ctx, subj, fmt.Appendf(nil, "%d", i))
			require.NoError(t, err)
		}
	}
	// s.a is at 1, 3, ..., 19: below 7 leaves 7, 9, ..., 19.
	require.NoError(t, jsapi.Purge(ctx, nc, "S", "s.a", 7))
	left := func(subj string) []uint64 {
		var seqs []uint64
		for seq := uint64(1); seq <= 20; seq++ {
			m, err := st.GetMsg(ctx, seq)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				continue
			}
			require.NoError(t, err)
			if m.Subject == subj {
				seqs = append(seqs, seq)
			}
		}
		return seqs
	}
	require.Equal(t, []uint64{7, 9, 11, 13, 15, 17, 19}, left("s.a"))
	require.Len(t, left("s.b"), 10)
	require.NoError(t, jsapi.Purge(ctx, nc, "S", "s.*", 12))
	require.Equal(t, []uint64{13, 15, 17, 19}, left("s.a"))
	require.Equal(t, []uint64{12, 14, 16, 18, 20}, left("s.b"))

	// The server's answer to a success is what Purge reads without
	// encoding/json.
	body, err := jsapi.PurgeRequest("s.b", 14)
	require.NoError(t, err)
	resp, err := nc.RequestWithContext(ctx, jsapi.APIPurge+"S", body)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(resp.Data), jsapi.Purged), "%s", resp.Data)
	require.Equal(t, []uint64{14, 16, 18, 20}, left("s.b"))

	err = jsapi.Purge(ctx, nc, "NONE", "s.a", 5)
	var apiErr *jetstream.APIError
	require.True(t, errors.As(err, &apiErr), "%v", err)
	require.Equal(t, jetstream.JSErrCodeStreamNotFound, apiErr.ErrorCode)
}

// The purge request is the bytes encoding/json writes.
func TestPurgeRequest(t *testing.T) {
	for _, c := range []struct {
		subj  string
		below uint64
	}{
		{"fp.w.mb.b3JkZXItMQ", 42}, {"fp.w.mb.*", 1<<64 - 1}, {"s.a", 0}, {"", 5}, {`s."a"`, 3}, {"s.<a>&", 3}, {"s.é", 3}, {"s.\x01", 3},
	} {
		got, err := jsapi.PurgeRequest(c.subj, c.below)
		require.NoError(t, err)
		want, err := json.Marshal(jetstream.StreamPurgeRequest{Sequence: c.below, Subject: c.subj})
		require.NoError(t, err)
		require.Equal(t, string(want), string(got))
	}
}
