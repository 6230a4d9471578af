// Command rawproducer posts into a fencepost mailbox with plain nats.go and
// nothing of fencepost: what a producer in any language does by
// docs/wire.md alone ("The producer contract"). Its test is the wire
// conformance test: everything it stores is delivered, dead-lettered or
// surfaced.
//
//	go run ./examples/rawproducer --id order-42 --key k1 --from shop 'pay 10 EUR'
package main

import (
	"context"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Post is one message to post.
type Post struct {
	World string
	ID    string // the id, as the user knows it (1..256 bytes of UTF-8)
	Body  []byte
	From  string // Fencepost-From, optional
	Key   string // idempotency key, optional: scoped to the mailbox
	// Headers are the sender's own (names not starting Nats- or
	// Fencepost-); sent exactly as given.
	Headers map[string]string
}

// encodeID is the mailbox token of an id: unpadded base64url (RFC 4648
// section 5). Go's encoder writes zero trailing bits, the canonical form.
func encodeID(id string) string { return base64.RawURLEncoding.EncodeToString([]byte(id)) }

// subject is the mailbox subject of p's id.
func (p Post) subject() string { return "fp." + p.World + ".mb." + encodeID(p.ID) }

// msg builds the NATS message of p.
func (p Post) msg() *nats.Msg {
	m := nats.NewMsg(p.subject())
	m.Data = p.Body
	if p.From != "" {
		m.Header.Set("Fencepost-From", p.From)
	}
	if p.Key != "" {
		// The key's scope is the mailbox: its token, a colon, the key.
		m.Header.Set("Nats-Msg-Id", encodeID(p.ID)+":"+p.Key)
	}
	for k, v := range p.Headers {
		m.Header[k] = []string{v}
	}
	return m
}

// Outcome is what the broker said of one post.
type Outcome struct {
	Seq       uint64
	Duplicate bool
}

// Errors of a post, by the broker's answer (docs/wire.md).
var (
	ErrFull         = errors.New("full: the mailbox is at its limit (10077); nothing stored")
	ErrTooLarge     = errors.New("too large: body plus headers over max_msg_size (10054); nothing stored")
	ErrUnknownWorld = errors.New("no stream takes the subject: the world does not exist (or its name is misspelt)")
)

// post sends p and waits for the broker's acknowledgement: the message is
// posted once this returns without an error.
func post(ctx context.Context, js jetstream.JetStream, p Post) (Outcome, error) {
	ack, err := js.PublishMsg(ctx, p.msg())
	if err != nil {
		var apiErr *jetstream.APIError
		switch {
		case errors.As(err, &apiErr) && apiErr.ErrorCode == 10077:
			return Outcome{}, fmt.Errorf("%w: %v", ErrFull, err)
		case errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum,
			errors.Is(err, nats.ErrMaxPayload):
			return Outcome{}, fmt.Errorf("%w: %v", ErrTooLarge, err)
		case errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, nats.ErrNoResponders):
			return Outcome{}, fmt.Errorf("%w: %v", ErrUnknownWorld, err)
		}
		return Outcome{}, err // unknown: it may or may not be stored; post again with the same key
	}
	return Outcome{Seq: ack.Sequence, Duplicate: ack.Duplicate}, nil
}

func main() {
	var p Post
	flag.StringVar(&p.World, "world", "default", "world")
	flag.StringVar(&p.ID, "id", "", "the id whose mailbox gets the message")
	flag.StringVar(&p.From, "from", "", "sender (Fencepost-From)")
	flag.StringVar(&p.Key, "key", "", "idempotency key, scoped to the mailbox")
	flag.Parse()
	if p.ID == "" || flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: rawproducer --id ID [--key K] [--from F] BODY")
		os.Exit(2)
	}
	p.Body = []byte(flag.Arg(0))
	url := os.Getenv("NATS_URL")
	if url == "" {
		url = nats.DefaultURL
	}
	nc, err := nats.Connect(url)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := post(ctx, js, p)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("posted seq=%d%s\n", out.Seq, strings.Repeat(" duplicate", btoi(out.Duplicate)))
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
