package queue_test

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/queue"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// wireAnswer is one broker error of docs/wire.md's table "Limits and
// errors": its code, its description where the table gives one, and
// whether the table says nothing was stored.
type wireAnswer struct {
	code    jetstream.ErrorCode
	desc    string
	nothing bool
	row     string
}

var (
	codeRe = regexp.MustCompile(`\b(10\d{3})(?:-(10\d{3}))?\b`)
	descRe = regexp.MustCompile(`"([^"]+)"`)
)

// wireAnswers reads the API errors of the table from docs/wire.md.
func wireAnswers(t *testing.T) []wireAnswer {
	b, err := os.ReadFile("../docs/wire.md")
	require.NoError(t, err)
	var out []wireAnswer
	for _, line := range strings.Split(string(b), "\n") {
		cols := strings.Split(line, " | ")
		if len(cols) < 5 || !strings.Contains(cols[1], "API error") {
			continue
		}
		stored := strings.TrimSpace(cols[2])
		require.True(t, strings.HasPrefix(stored, "nothing") || strings.HasPrefix(stored, "unknown"), "row %q: stored is %q", cols[0], stored)
		var desc string
		if m := descRe.FindStringSubmatch(cols[1]); m != nil {
			desc = m[1]
		}
		for _, m := range codeRe.FindAllStringSubmatch(cols[1], -1) {
			lo, _ := strconv.Atoi(m[1])
			hi := lo
			if m[2] != "" {
				hi, _ = strconv.Atoi(m[2])
			}
			for c := lo; c <= hi; c++ {
				out = append(out, wireAnswer{code: jetstream.ErrorCode(c), desc: desc, nothing: strings.HasPrefix(stored, "nothing"), row: strings.TrimPrefix(cols[0], "| ")})
			}
		}
	}
	require.NotEmpty(t, out)
	return out
}

// TestAnswers_AsTheWireContractSays: every broker error of docs/wire.md's
// table is what Send reports: a refusal where the table says nothing was
// stored, ErrUnknown where it says unknown (a newcomer's report: 10158
// "duplicate message id is in process" read "refused by the server"); an
// answer the table does not name is unknown; and every refusal the code
// knows is in the table.
func TestAnswers_AsTheWireContractSays(t *testing.T) {
	named := map[jetstream.ErrorCode]bool{}
	for _, a := range wireAnswers(t) {
		named[a.code] = true
		apiErr := &jetstream.APIError{Code: 400, ErrorCode: a.code, Description: a.desc}
		err := queue.Outcome(fmt.Errorf("nats: %w", apiErr))
		require.Error(t, err)
		require.Equal(t, a.nothing, queue.NothingStored(apiErr), "%d %q (%s)", a.code, a.desc, a.row)
		if a.nothing {
			require.NotErrorIs(t, err, queue.ErrUnknown, "%d %q (%s)", a.code, a.desc, a.row)
		} else {
			require.ErrorIs(t, err, queue.ErrUnknown, "%d %q (%s)", a.code, a.desc, a.row)
			require.ErrorContains(t, err, "may be stored")
		}
	}
	for _, c := range []jetstream.ErrorCode{10158, 10063, 10077, 10097, 10054} {
		require.True(t, named[c], "the table names %d", c)
	}
	for c := jetstream.ErrorCode(10000); c < 10400; c++ {
		apiErr := &jetstream.APIError{Code: 400, ErrorCode: c, Description: "x"}
		if queue.NothingStored(apiErr) {
			require.True(t, named[c], "%d is a refusal the table does not name", c)
		}
	}
	err := queue.Outcome(fmt.Errorf("nats: %w", &jetstream.APIError{Code: 400, ErrorCode: 10999, Description: "new"}))
	require.ErrorIs(t, err, queue.ErrUnknown, "an answer nobody named is unknown, not a refusal")
	require.ErrorContains(t, err, `same message id "k"`)
	for _, tc := range []struct {
		desc string
		is   error
	}{
		{"maximum messages per subject exceeded", queue.ErrFull},
		{"maximum bytes exceeded", queue.ErrFull},
		{"message too large", queue.ErrTooLarge},
		{"store is closed", queue.ErrUnknown},
	} {
		err := queue.Outcome(&jetstream.APIError{Code: 503, ErrorCode: queue.ErrCodeFull, Description: tc.desc})
		require.ErrorIs(t, err, tc.is, tc.desc)
	}
	require.ErrorIs(t, queue.Outcome(&jetstream.APIError{Code: 400, ErrorCode: 10097, Description: "header size exceeds maximum allowed of 64k"}), queue.ErrTooLarge)
}

// TestSend_KeyInFlight: on a replicated world, a post whose idempotency
// key is posted again while the first post is being replicated is
// answered 10158 "duplicate message id is in process" by the broker;
// Send reports it as unknown (the first post is stored), never as a
// refusal, and the retry with the same key is answered as a duplicate
// of the stored one.
func TestSend_KeyInFlight(t *testing.T) {
	tg := testutil.Targets()
	if len(tg) < 2 {
		t.Skip("no cluster (FENCEPOST_TEST_CLUSTER=0)")
	}
	env := testutil.Start(t, tg[1])
	w := env.World(t, world.Config{})
	ctx := testutil.Ctx(t, time.Minute)
	seen := 0
	for round := 0; round < 50 && seen == 0; round++ {
		key := fmt.Sprintf("k%d", round)
		ps := make([]*queue.Pending, 4)
		for i := range ps {
			p, err := w.Queue.SendAsync("a", []byte("x"), queue.WithMsgID(key))
			require.NoError(t, err)
			ps[i] = p
		}
		first, err := ps[0].Wait(ctx)
		require.NoError(t, err)
		require.False(t, first.Duplicate)
		for _, p := range ps[1:] {
			got, err := p.Wait(ctx)
			if err == nil {
				require.True(t, got.Duplicate)
				require.Equal(t, first.Seq, got.Seq)
				continue
			}
			var apiErr *jetstream.APIError
			require.ErrorAs(t, err, &apiErr, "%v", err)
			require.Equal(t, jetstream.ErrorCode(10158), apiErr.ErrorCode, "%v", err)
			require.ErrorIs(t, err, queue.ErrUnknown, "a key in flight is an unknown outcome, not a refusal: %v", err)
			seen++
		}
		again, err := w.Queue.Send(ctx, "a", []byte("x"), queue.WithMsgID(key))
		require.NoError(t, err)
		require.True(t, again.Duplicate, "the retry with the same key finds the stored post")
		require.Equal(t, first.Seq, again.Seq)
	}
	require.NotZero(t, seen, "no post of a key in flight was answered 10158 in 50 rounds")
}
