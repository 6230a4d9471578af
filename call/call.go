// Package call is the wire of calls (docs/wire.md "Calls"; docs/contract.md
// section 11): a message posted to an id's mailbox like any other, that
// names where its answer goes, and the answer its holder sends there once
// the commit covering the message was accepted.
//
// A call is an ordinary post with one more header, HeaderReplyTo: a
// subject under the caller's own inbox prefix ("_INBOX.", or under
// fencepostd --auth "_INBOX.<user public key>."). The engine that hands
// the message out (drain's holdings and drains for per-id worlds, shard's
// holders for sharded ones) sends the answer with Answer, a core NATS
// publish to that subject, after the broker accepted the commit that
// covers the message: an answer means handled and committed. A message
// dead-lettered after the world's max_deliveries is answered failed, with
// the last handler error. Answers are at least once: the caller takes the
// first.
//
// The reply subject of a call with a message id is derived from the
// world, the id and the key (Subject), so that a retry with the same key,
// which the mailbox stores no second time, waits where the first post's
// answer goes.
package call

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"

	"github.com/nats-io/nats.go"
)

// Headers of calls and answers (docs/wire.md "Calls").
const (
	// HeaderReplyTo, on a post, makes it a call: the subject its answer
	// is published to. It must start with InboxPrefix and be a literal
	// subject (ReplyTo); any other value is no call (the message is
	// handled, nobody is answered).
	HeaderReplyTo = "Fencepost-Reply-To"
	// HeaderOutcome, on an answer: OutcomeReplied or OutcomeFailed.
	HeaderOutcome = "Fencepost-Call"
	// HeaderSeq, on an answer: the call's sequence in the mailbox stream.
	HeaderSeq = "Fencepost-Call-Seq"
)

// Outcomes an answer carries in HeaderOutcome.
const (
	// OutcomeReplied: the message was handled and its commit accepted;
	// the body is the handler's answer (empty when it gave none).
	OutcomeReplied = "replied"
	// OutcomeFailed: the message was dead-lettered after the world's
	// max_deliveries; the body is the last handler error (at most 1,024
	// bytes, one line).
	OutcomeFailed = "failed"
)

// InboxPrefix begins every reply subject: a worker answers only inbox
// subjects, so that no post can make it publish anywhere else (its
// connection may write keys and mailboxes: a reply subject naming one
// would have it write there).
const InboxPrefix = "_INBOX."

// MaxSubject is the longest reply subject, in bytes.
const MaxSubject = 512

// subjectToken is the token between the caller's inbox prefix and the
// call's own token in Subject: nats.go's request inboxes under the
// prefix are <prefix>.<nuid>.<token>, whose second token is never
// "call".
const subjectToken = "call"

// ErrInvalidReplyTo: a reply subject that no answer is sent to.
var ErrInvalidReplyTo = errors.New("call: invalid reply subject")

// CheckSubject says whether s is a subject an answer may be published to:
// at most MaxSubject bytes, starting with InboxPrefix, tokens that are not
// empty and not wildcards, no white space or control characters.
func CheckSubject(s string) error {
	switch {
	case len(s) > MaxSubject:
		return fmt.Errorf("%w: %d bytes, the limit is %d", ErrInvalidReplyTo, len(s), MaxSubject)
	case !strings.HasPrefix(s, InboxPrefix):
		return fmt.Errorf("%w: %q does not start with %q", ErrInvalidReplyTo, s, InboxPrefix)
	case strings.ContainsFunc(s, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) || r == unicode.ReplacementChar }):
		return fmt.Errorf("%w: %q holds white space or a control character", ErrInvalidReplyTo, s)
	}
	for _, tok := range strings.Split(s, ".") {
		if tok == "" || tok == "*" || tok == ">" {
			return fmt.Errorf("%w: %q is not a literal subject", ErrInvalidReplyTo, s)
		}
	}
	return nil
}

// ReplyTo is the reply subject a stored message names, and whether it is
// a call: its header HeaderReplyTo (any case of the name, as
// Fencepost-From) holding a subject CheckSubject accepts. A message whose
// header is there but holds no such subject is no call; err says why.
func ReplyTo(h nats.Header) (subject string, ok bool, err error) {
	v := headerValue(h, HeaderReplyTo)
	if v == "" {
		return "", false, nil
	}
	if err := CheckSubject(v); err != nil {
		return "", false, err
	}
	return v, true, nil
}

// headerValue is the first value of key in h, whatever the case of its
// name on the wire (queue.HeaderValue, without importing queue).
func headerValue(h nats.Header, key string) string {
	if v, ok := h[key]; ok && len(v) > 0 {
		return v[0]
	}
	for k, v := range h {
		if len(v) > 0 && strings.EqualFold(k, key) {
			return v[0]
		}
	}
	return ""
}

// Subject is the reply subject of a call to id in world from a connection
// whose inbox prefix is prefix (without its trailing '.'; "_INBOX" unless
// the connection sets its own). With a message id (msgID != "") it is
// derived from world, id and msgID, the same for every retry with that
// key: <prefix>.call.<22 characters of base64url SHA-256>. Without one it
// is a new random subject, <prefix>.call.<nuid>.
func Subject(prefix, world, id, msgID string) string {
	if msgID == "" {
		// nats.NewInbox is "_INBOX." and a new nuid.
		return prefix + "." + subjectToken + "." + strings.TrimPrefix(nats.NewInbox(), nats.InboxPrefix)
	}
	sum := sha256.Sum256([]byte(world + "\x00" + id + "\x00" + msgID))
	return prefix + "." + subjectToken + "." + base64.RawURLEncoding.EncodeToString(sum[:])[:22]
}

// Overhead is room, in bytes, that an answer's headers and subject take
// on the wire beside its body (an answer is at most the connection's max
// payload less this).
const Overhead = MaxSubject + 128

// Answer answers the message whose stored headers are hdr (a call when
// ReplyTo says so; nothing is sent for any other message) at sequence seq:
// OutcomeReplied with answer when herr is nil, else OutcomeFailed with
// herr's text. It publishes once, with core NATS, and returns the
// publish's error (an answer that cannot be sent leaves the caller to its
// timeout, an unknown outcome). The engine calls it only once the commit
// covering the message was accepted (or, failed, once the message is in
// the dead letters and the commit that moves past it was accepted).
func Answer(nc *nats.Conn, hdr nats.Header, seq uint64, answer []byte, herr error) error {
	subj, ok, _ := ReplyTo(hdr)
	if !ok {
		return nil
	}
	return nc.PublishMsg(Message(subj, seq, answer, herr))
}

// Message is the answer Answer publishes to subj.
func Message(subj string, seq uint64, answer []byte, herr error) *nats.Msg {
	m := &nats.Msg{Subject: subj, Header: nats.Header{}}
	m.Header.Set(HeaderSeq, strconv.FormatUint(seq, 10))
	if herr != nil {
		m.Header.Set(HeaderOutcome, OutcomeFailed)
		m.Data = []byte(clip(herr.Error()))
		return m
	}
	m.Header.Set(HeaderOutcome, OutcomeReplied)
	m.Data = answer
	return m
}

// maxError is the most bytes of a failed answer's error (as a dead
// letter's Fencepost-Dead-Error).
const maxError = 1024

// clip is s on one line, valid UTF-8, at most maxError bytes.
func clip(s string) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(s, "?"))
	if len(s) <= maxError {
		return s
	}
	cut := maxError
	for cut > 0 && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut]
}

// Reply is an answer as the caller reads it (Parse).
type Reply struct {
	Seq    uint64 // the call's sequence in the mailbox stream
	Failed bool   // dead-lettered: Body is the last handler error
	Body   []byte
}

// Parse reads an answer message. An answer without a known outcome is an
// error: not from a fencepost engine.
func Parse(m *nats.Msg) (Reply, error) {
	seq, err := strconv.ParseUint(headerValue(m.Header, HeaderSeq), 10, 64)
	if err != nil {
		return Reply{}, fmt.Errorf("call: an answer without a valid %s: %w", HeaderSeq, err)
	}
	body := m.Data
	if len(body) == 0 {
		body = nil
	}
	switch o := headerValue(m.Header, HeaderOutcome); o {
	case OutcomeReplied:
		return Reply{Seq: seq, Body: body}, nil
	case OutcomeFailed:
		return Reply{Seq: seq, Failed: true, Body: body}, nil
	default:
		return Reply{}, fmt.Errorf("call: an answer with %s %q, neither %q nor %q", HeaderOutcome, o, OutcomeReplied, OutcomeFailed)
	}
}
