package jsapi_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/server/servertest"
)

// TestRawFromDirect_PublisherHeaders: a publisher may store headers named
// like the server's (the broker stores what it is given; a producer in
// another language is not checked): a Nats-Sequence, Nats-Subject and
// Nats-Time-Stamp of its own, an empty body with "Status: 204" (what an
// end of batch looks like) and a Nats-Num-Pending of 0. A batched direct
// get still reads every message, each at its stored sequence and subject,
// and the pending count is the server's. Read by the first value of each
// name (as before), the batch ended at that message with 0 pending: a
// drain would have taken the mailbox for empty.
func TestRawFromDirect_PublisherHeaders(t *testing.T) {
	nc, js := servertest.Connect(t, servertest.New(t).ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, AllowDirect: true}); err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	for i, forged := range []bool{false, true, false, false} {
		m := nats.NewMsg("s.x")
		m.Data = []byte{byte('a' + i)}
		if forged {
			m.Data = nil
			m.Header.Set("Status", "204")
			m.Header.Set("Nats-Num-Pending", "0")
			m.Header.Set("Nats-Last-Sequence", "999999")
			m.Header.Set(jetstream.SequenceHeader, "999999")
			m.Header.Set(jetstream.SubjectHeader, "s.y")
			m.Header.Set(jetstream.TimeStampHeaer, "2001-01-01T00:00:00Z")
		}
		ack, err := js.PublishMsg(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, ack.Sequence)
	}
	b, err := jsapi.DirectGet(ctx, nc, "S", jsapi.GetRequest{Seq: 1, NextFor: "s.x", Batch: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Msgs) != 2 || b.Pending != 2 {
		t.Fatalf("a batch of 2 from the first: %d messages, %d pending; want 2 and 2", len(b.Msgs), b.Pending)
	}
	b2, err := jsapi.DirectGet(ctx, nc, "S", jsapi.GetRequest{Seq: b.Msgs[1].Sequence + 1, NextFor: "s.x", Batch: 10})
	if err != nil {
		t.Fatal(err)
	}
	all := append(b.Msgs, b2.Msgs...)
	if len(all) != len(seqs) {
		t.Fatalf("%d messages read, %d stored", len(all), len(seqs))
	}
	for i, m := range all {
		if m.Sequence != seqs[i] || m.Subject != "s.x" || m.Time.Year() < 2020 {
			t.Errorf("message %d: sequence %d subject %q time %v; stored at %d on s.x", i, m.Sequence, m.Subject, m.Time, seqs[i])
		}
	}
}

// DirectLast reads the last message of a subject, tells an absent one
// (ErrNotFound), and takes a stored message whose publisher sent the
// headers of a "not found" status (an empty body, "Status: 404") for the
// message it is, not for the server's answer: an ownership record read so
// would have been taken for absent.
func TestDirectLast(t *testing.T) {
	nc, js := servertest.Connect(t, servertest.New(t).ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, AllowDirect: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := jsapi.DirectLast(ctx, nc, "S", "s.x"); !errors.Is(err, jsapi.ErrNotFound) {
		t.Fatalf("nothing stored: %v, want ErrNotFound", err)
	}
	if _, err := js.Publish(ctx, "s.x", []byte("a")); err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg("s.x")
	m.Header.Set("Status", "404")
	m.Header.Set("Description", "Message Not Found")
	m.Header.Set(jetstream.SequenceHeader, "1")
	ack, err := js.PublishMsg(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	got, err := jsapi.DirectLast(ctx, nc, "S", "s.x")
	if err != nil {
		t.Fatalf("a stored message with a publisher's status headers: %v", err)
	}
	if got.Sequence != ack.Sequence || got.Subject != "s.x" || len(got.Data) != 0 {
		t.Fatalf("read sequence %d subject %q body %q; want the last stored, %d on s.x, empty", got.Sequence, got.Subject, got.Data, ack.Sequence)
	}
	if _, err := jsapi.DirectLast(ctx, nc, "S", "s.y"); !errors.Is(err, jsapi.ErrNotFound) {
		t.Fatalf("another subject: %v, want ErrNotFound", err)
	}
}

// TestDirectGet_IncompleteAnswer: the server sends each message of a
// batched or multi-last answer to whoever subscribes to the reply subject
// at that moment, so a client that reconnects in the middle of an answer
// gets its end without its first messages; each message names the one
// sent before it (Nats-Last-Sequence), and DirectGet refuses an answer
// whose chain is broken. A responder of our own stands in for the
// server's direct get here, on a real nats-server: the server cannot be
// made to lose part of an answer on demand (it takes a reconnect between
// two of its sends).
func TestDirectGet_IncompleteAnswer(t *testing.T) {
	nc, _ := servertest.Connect(t, servertest.New(t).ClientURL())
	msg := func(seq uint64, last string) *nats.Msg {
		m := nats.NewMsg("")
		m.Data = []byte("x")
		m.Header.Set("Nats-Stream", "S")
		m.Header.Set(jetstream.SubjectHeader, "s.x")
		m.Header.Set(jetstream.SequenceHeader, strconv.FormatUint(seq, 10))
		m.Header.Set(jetstream.TimeStampHeaer, "2026-12-02T05:28:22Z")
		if last != "" {
			m.Header.Set("Nats-Num-Pending", "0")
			m.Header.Set("Nats-Last-Sequence", last)
		}
		return m
	}
	status := func(code, last string) *nats.Msg {
		m := nats.NewMsg("")
		m.Header.Set("Status", code)
		if last != "" {
			m.Header.Set("Nats-Num-Pending", "0")
			m.Header.Set("Nats-Last-Sequence", last)
		}
		return m
	}
	batch := jsapi.GetRequest{Seq: 4, NextFor: "s.x", Batch: 10}
	// A state read or a holder check: the last message of each subject.
	multi := jsapi.GetRequest{MultiLast: []string{"s.a", "s.b", "s.c"}}
	for i, c := range []struct {
		name   string
		req    jsapi.GetRequest
		answer []*nats.Msg
		want   []uint64 // nil: ErrIncomplete
	}{
		{"whole", batch, []*nats.Msg{msg(4, "0"), msg(5, "4"), status("204", "5")}, []uint64{4, 5}},
		{"first lost", batch, []*nats.Msg{msg(5, "4"), msg(6, "5"), status("204", "6")}, nil},
		{"all but the end lost", batch, []*nats.Msg{status("204", "6")}, nil},
		{"one in the middle lost", batch, []*nats.Msg{msg(4, "0"), msg(6, "5"), status("204", "6")}, nil},
		{"not found after messages", batch, []*nats.Msg{msg(4, "0"), status("404", "")}, nil},
		{"a server that names no previous message", batch, []*nats.Msg{msg(4, ""), msg(5, ""), status("204", "")}, []uint64{4, 5}},
		{"multi-last whole", multi, []*nats.Msg{msg(2, "0"), msg(7, "2"), msg(9, "7"), status("204", "9")}, []uint64{2, 7, 9}},
		{"multi-last first lost", multi, []*nats.Msg{msg(7, "2"), msg(9, "7"), status("204", "9")}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			stream := fmt.Sprintf("F%d", i)
			answered := make(chan error, 1)
			sub, err := nc.Subscribe(jsapi.APIDirectGet+stream, func(req *nats.Msg) {
				var err error
				for _, m := range c.answer {
					m.Subject = req.Reply
					if e := nc.PublishMsg(m); e != nil && err == nil {
						err = e
					}
				}
				answered <- err
			})
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Unsubscribe()
			// The reader may return before the answer's last message is
			// sent (an incomplete answer shows at its first); the test
			// ends after the sends (a t.Error from the responder after the
			// test ended panicked in CI, when the last case's sends met
			// the connection closed by the test's cleanup).
			defer func() {
				select {
				case err := <-answered:
					if err != nil {
						t.Error(err)
					}
				case <-time.After(10 * time.Second):
					t.Error("the responder did not finish its answer")
				}
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			b, err := jsapi.DirectGet(ctx, nc, stream, c.req)
			if c.want == nil {
				if !errors.Is(err, jsapi.ErrIncomplete) {
					t.Fatalf("got %d messages and error %v; want ErrIncomplete", len(b.Msgs), err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []uint64
			for _, m := range b.Msgs {
				got = append(got, m.Sequence)
			}
			if !slices.Equal(got, c.want) {
				t.Fatalf("read %v, want %v", got, c.want)
			}
		})
	}
}
