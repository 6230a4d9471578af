package call_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/call"
)

// TestSubject: a call's reply subject is derived from world, id and
// message id (the same for every retry, another for any other of the
// three), random without a message id, and always one an answer may go
// to.
func TestSubject(t *testing.T) {
	a := call.Subject("_INBOX.U1", "w", "order.42", "k1")
	require.Equal(t, a, call.Subject("_INBOX.U1", "w", "order.42", "k1"))
	require.True(t, strings.HasPrefix(a, "_INBOX.U1.call."), a)
	for _, other := range []string{
		call.Subject("_INBOX.U1", "w", "order.42", "k2"),
		call.Subject("_INBOX.U1", "w", "order.43", "k1"),
		call.Subject("_INBOX.U1", "v", "order.42", "k1"),
		call.Subject("_INBOX.U1", "w", "order.42\x00k", "1"),
		call.Subject("_INBOX.U2", "w", "order.42", "k1"),
	} {
		require.NotEqual(t, a, other)
	}
	r1, r2 := call.Subject("_INBOX", "w", "a", ""), call.Subject("_INBOX", "w", "a", "")
	require.NotEqual(t, r1, r2)
	for _, s := range []string{a, r1} {
		require.NoError(t, call.CheckSubject(s))
	}
}

func TestCheckSubject(t *testing.T) {
	for _, s := range []string{"_INBOX.a", "_INBOX.a.b.c", "_INBOX.UABC.call.xyz"} {
		require.NoError(t, call.CheckSubject(s), s)
	}
	for _, s := range []string{"", "_INBOX", "_INBOX.", "_INBOX..a", "_INBOX.a.", "_INBOX.*", "_INBOX.a.>", "_inbox.a",
		"$KV.fp_w.c.YQ", "fp.w.mb.YQ", "$JS.API.STREAM.PURGE.FP_MB_w", "_INBOX.a b", "_INBOX.a\tb", "_INBOX.a\x00", "_INBOX.\xff",
		"_INBOX." + strings.Repeat("x", call.MaxSubject)} {
		require.ErrorIs(t, call.CheckSubject(s), call.ErrInvalidReplyTo, "%q", s)
	}
}

// TestAnswer: an answer says replied with the body, or failed with the
// error on one line; Parse reads it back; a message that names no valid
// reply subject is answered to nobody.
func TestAnswer(t *testing.T) {
	m := call.Message("_INBOX.a", 7, []byte("yes"), nil)
	require.Equal(t, "_INBOX.a", m.Subject)
	r, err := call.Parse(m)
	require.NoError(t, err)
	require.Equal(t, call.Reply{Seq: 7, Body: []byte("yes")}, r)

	m = call.Message("_INBOX.a", 8, []byte("ignored"), errors.New("no\nstock"))
	r, err = call.Parse(m)
	require.NoError(t, err)
	require.Equal(t, call.Reply{Seq: 8, Failed: true, Body: []byte("no stock")}, r)
	long := call.Message("_INBOX.a", 9, nil, errors.New(strings.Repeat("é", 1000)))
	require.LessOrEqual(t, len(long.Data), 1024)

	_, err = call.Parse(&nats.Msg{Header: nats.Header{call.HeaderSeq: {"1"}, call.HeaderOutcome: {"maybe"}}})
	require.Error(t, err)
	_, err = call.Parse(&nats.Msg{Header: nats.Header{call.HeaderOutcome: {call.OutcomeReplied}}})
	require.Error(t, err)

	h := nats.Header{}
	h.Set("fencepost-reply-to", "_INBOX.x")
	subj, ok, err := call.ReplyTo(h)
	require.NoError(t, err)
	require.True(t, ok, "any case of the name")
	require.Equal(t, "_INBOX.x", subj)
	h.Set("fencepost-reply-to", "$KV.fp_w.c.YQ")
	_, ok, err = call.ReplyTo(h)
	require.False(t, ok)
	require.ErrorIs(t, err, call.ErrInvalidReplyTo)
	require.NoError(t, call.Answer(nil, nats.Header{}, 1, nil, nil), "no call: nothing sent")
	require.NoError(t, call.Answer(nil, h, 1, nil, nil), "no valid reply subject: nothing sent")
}
