package worker

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestLaterClaims: every claim scheduled comes back, earliest first, however
// many are scheduled at once (the bounded channel it replaces dropped the
// claims past 16,384, and those ids were never claimed by that worker).
func TestLaterClaims(t *testing.T) {
	var l laterClaims
	base := time.Now()
	const n = 100_000
	earliest := time.Duration(1<<63 - 1)
	for i := range n {
		d := time.Duration(rand.Int64N(int64(time.Minute)))
		earliest = min(earliest, d)
		if l.add(strconv.Itoa(i), base.Add(d)) {
			require.Equal(t, base.Add(d), l.next(), "add says the new claim is the earliest only if it is")
		}
		require.Equal(t, base.Add(earliest), l.next())
	}
	seen := make(map[string]bool, n)
	last := base
	for l.Len() > 0 {
		at := l.next()
		require.False(t, at.Before(last), "out of order")
		last = at
		id := l.take()
		require.False(t, seen[id], "%s came back twice", id)
		seen[id] = true
	}
	require.Len(t, seen, n)
}
