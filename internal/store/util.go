package store

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/internal/wire"
)

// Clip makes an error text fit a header and a cursor: one line, control
// characters replaced, at most wire.MaxErrorBytes on a rune boundary.
func Clip(s string) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(s, "?"))
	if len(s) <= wire.MaxErrorBytes {
		return s
	}
	cut := wire.MaxErrorBytes
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// CloneHeader is a deep copy of h.
func CloneHeader(h nats.Header) nats.Header {
	out := make(nats.Header, len(h))
	for k, vs := range h {
		out[k] = append([]string(nil), vs...)
	}
	return out
}

// WrongLastSequence says whether err is JetStream's refusal of a
// conditional publish whose subject moved on: a fence's expectation
// failed (10071; 10164 on a replicated stream while another write to the
// subject is in flight).
func WrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// Parallel runs fn(0..n-1) on at most width goroutines and waits.
func Parallel(width, n int, fn func(i int)) {
	var wg sync.WaitGroup
	next := make(chan int)
	for range min(width, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				fn(i)
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}

// Sleep waits for d, or until ctx ends (its cause).
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}
