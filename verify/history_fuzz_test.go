package verify

import (
	"bytes"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencepost/fencepost/testkit/history"
)

// FuzzReadHistory: `fencepost verify --check FILE` reads a file the user
// hands it. Whatever is in it, ReadHistory refuses it with the number of
// the line at fault or returns a history that Check judges without a
// panic, and that history survives being written and read again with the
// same verdict.
//
//	go test -run '^$' -fuzz FuzzReadHistory -fuzztime 60s ./verify/
func FuzzReadHistory(f *testing.F) {
	good := sound()
	good.History.Ops = []history.OwnOp{{
		In:  history.OwnInput{ID: "v-0", Node: "a", TTL: time.Second, Kind: history.OpClaim, Call: 1, Return: 2},
		Out: history.OwnOutput{Res: history.ResClaimed, Node: "a", Epoch: 1, Revision: 5},
	}}
	bad := sound()
	bad.History.Deliveries = bad.History.Deliveries[:1]
	bad.Unfenced = []CursorWrite{{ID: "v-0", Seq: 11, Cursor: 3}}
	bad.FaultEvents = []FaultEvent{{Kind: FaultCut}}
	for _, rec := range []*Recorded{good, bad, withCallsTimers()} {
		var buf bytes.Buffer
		if err := WriteHistory(&buf, rec); err != nil {
			f.Fatal(err)
		}
		f.Add(buf.Bytes())
	}
	f.Add([]byte(`{"t":"send","outcome":"posted","seq":18446744073709551615}` + "\n"))
	f.Add([]byte(`{"t":"commit","cursor":3,"stream_seq":1}` + "\n" + `{"t":"delivery","seq":0}` + "\n"))

	outcomes := []string{Passed, Violated, Inconclusive}
	f.Fuzz(func(t *testing.T, data []byte) {
		rec, err := ReadHistory(bytes.NewReader(data))
		if err != nil {
			if !strings.HasPrefix(err.Error(), "verify: ") {
				t.Fatalf("an error that does not say where: %v", err)
			}
			return
		}
		v := Check(rec)
		if !slices.Contains(outcomes, v.Outcome) {
			t.Fatalf("outcome %q", v.Outcome)
		}
		var buf bytes.Buffer
		if err := WriteHistory(&buf, rec); err != nil {
			t.Fatalf("a history read back cannot be written: %v", err)
		}
		back, err := ReadHistory(&buf)
		if err != nil {
			t.Fatalf("a history written cannot be read back: %v\n%s", err, buf.Bytes())
		}
		if w := Check(back); w.Outcome != v.Outcome || !maps.Equal(counts(w), counts(v)) {
			t.Fatalf("the verdict changed through the file: %s %v, then %s %v", v.Outcome, counts(v), w.Outcome, counts(w))
		}
	})
}
