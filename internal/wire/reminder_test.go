package wire_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/internal/wire"
)

// FuzzDecodeReminder: a reminder intent (docs/wire.md "Reminders") is
// read whole or refused with ErrCorruptRecord or ErrUnknownVersion; what
// is read has a valid id and given key, a time in UTC, no Nats- header
// and no header value a NATS header could not carry as it is, and
// encodes back to the same bytes.
func FuzzDecodeReminder(f *testing.F) {
	f.Add([]byte("{\"v\":1,\"id\":\"order.42\",\"key\":\"pay\",\"at\":\"2026-05-01T09:00:00.25Z\",\"h\":{\"Fencepost-From\":[\"billing\"]}}\nbody"))
	f.Add([]byte("{\"v\":1,\"id\":\"a\",\"key\":\"r\",\"at\":\"2026-05-01T09:00:00Z\"}\n"))
	f.Add([]byte("{\"v\":1,\"id\":\"a\",\"key\":\"r\",\"at\":\"2026-05-01T09:00:00Z\",\"h\":{\"Nats-Rollup\":[\"all\"]}}\n"))
	f.Add([]byte("{\"v\":1,\"id\":\"a\",\"key\":\"_r\",\"at\":\"2026-05-01T09:00:00Z\"}\n"))
	f.Add([]byte("{\"v\":1,\"id\":\"a\",\"key\":\"r\",\"at\":\"2026-05-01T10:00:00+01:00\"}\n"))
	f.Add([]byte("{\"v\":2,\"id\":\"a\",\"key\":\"r\",\"at\":\"2026-05-01T09:00:00Z\"}\n"))
	f.Add([]byte("{\"v\":1,\"id\":\"a\",\"key\":\"r\",\"at\":\"2026-05-01T09:00:00Z\",\"x\":1}\n"))
	f.Add([]byte("{\"v\":1,\"id\":\"a\",\"key\":\"r\",\"at\":\"2026-05-01T09:00:00Z\",\"h\":{\"A\":[\"1\\r\\nNats-Rollup: all\"]}}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := wire.DecodeReminder(data)
		if err != nil {
			require.True(t, refused(err), "%v", err)
			return
		}
		require.NoError(t, wire.ValidateID(r.ID))
		require.NoError(t, wire.ValidateTimerKey(r.Key))
		require.Equal(t, time.UTC, r.At.Location())
		for k, vs := range r.Header {
			require.False(t, strings.HasPrefix(strings.ToLower(k), "nats-"), "%q", k)
			require.NotContains(t, k, ":")
			for _, v := range vs {
				require.NotContains(t, v, "\n")
				require.NotContains(t, v, "\r")
			}
		}
		require.True(t, bytes.HasSuffix(data, r.Body))
		b, err := wire.EncodeReminder(r)
		require.NoError(t, err)
		again, err := wire.DecodeReminder(b)
		require.NoError(t, err)
		require.Equal(t, r.ID, again.ID)
		require.Equal(t, r.Key, again.Key)
		require.True(t, r.At.Equal(again.At))
		require.Equal(t, len(r.Header), len(again.Header))
		require.Equal(t, r.Body, again.Body)
	})
}

// TestReminder_Names: an intent key names its id and key, and nothing
// else is read as one.
func TestReminder_Names(t *testing.T) {
	k := wire.ReminderKey("order.42", "pay")
	require.True(t, strings.HasPrefix(k, wire.ReminderPrefix))
	id, key, err := wire.ReminderOf(k)
	require.NoError(t, err)
	require.Equal(t, "order.42", id)
	require.Equal(t, "pay", key)
	for _, bad := range []string{"r.x", "s.YQ.pay", "r.YQ._own", "r.YQ=.pay", "r.YQ.pay.more", wire.RecordKey("a")} {
		_, _, err := wire.ReminderOf(bad)
		require.Error(t, err, bad)
	}
	require.NotEqual(t, wire.ReminderMsgID("a", "k", 1), wire.ReminderMsgID("a", "k", 2))
	require.Less(t, len(wire.ReminderMsgID("a", "k", 1<<64-1))+len("Nats-Msg-Id: \r\n"), wire.ReminderOverhead("a", "k"))
}

// TestReminder_RoundTrip: an intent reads back as written; one the
// decoder would refuse is not written.
func TestReminder_RoundTrip(t *testing.T) {
	at := time.Date(2026, 5, 1, 9, 0, 0, 250_000_000, time.FixedZone("x", 3600))
	r := wire.Reminder{ID: "a", Key: "k", At: at, Header: map[string][]string{"Fencepost-From": {"b"}, "X": {"<&>", "2"}}, Body: []byte("line\nnext")}
	b, err := wire.EncodeReminder(r)
	require.NoError(t, err)
	got, err := wire.DecodeReminder(b)
	require.NoError(t, err)
	require.True(t, at.Equal(got.At))
	require.Equal(t, r.Header, got.Header)
	require.Equal(t, r.Body, got.Body)
	for _, bad := range []wire.Reminder{
		{ID: "", Key: "k", At: at},
		{ID: "a", Key: "_k", At: at},
		{ID: "a", Key: "k", At: at, Header: map[string][]string{"nats-rollup": {"all"}}},
		{ID: "a", Key: "k", At: at, Header: map[string][]string{"X": {"a\r\nb"}}},
		{ID: "a", Key: "k", At: at, Header: map[string][]string{"X Y": {"a"}}},
	} {
		_, err := wire.EncodeReminder(bad)
		require.ErrorIs(t, err, wire.ErrCorruptRecord, "%+v", bad)
	}
}
