package queue

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
)

// Headers of a mailbox message (docs/wire.md "Headers"). Only
// HeaderFrom is fencepost's own; the message id is JetStream's dedupe
// header.
const (
	HeaderFrom  = "Fencepost-From" // the sender, optional
	HeaderMsgID = "Nats-Msg-Id"    // dedupe key, optional
)

// Reserved header prefixes: a caller's own headers may not use them.
const (
	reservedFencepost = "Fencepost-"
	reservedNats      = "Nats-"
)

// Limits of the header values Send accepts.
const (
	MaxFromBytes   = 256
	MaxMsgIDBytes  = 256
	maxHeaderBytes = 4096 // one caller header, key and value
)

// ValidateFrom checks a sender name: at most MaxFromBytes of UTF-8 without
// control characters (it travels in a header). Empty means anonymous.
func ValidateFrom(from string) error {
	return validateValue("sender", from, MaxFromBytes)
}

// ValidateMsgID checks a message id: 1 to MaxMsgIDBytes of UTF-8 without
// control characters or spaces.
func ValidateMsgID(id string) error {
	if id == "" {
		return fmt.Errorf("%w: the message id is empty", ErrInvalidMessage)
	}
	if strings.ContainsFunc(id, unicode.IsSpace) {
		return fmt.Errorf("%w: the message id %q contains white space", ErrInvalidMessage, id)
	}
	return validateValue("message id", id, MaxMsgIDBytes)
}

func validateValue(what, v string, max int) error {
	switch {
	case len(v) > max:
		return fmt.Errorf("%w: the %s is %d bytes, the limit is %d", ErrInvalidMessage, what, len(v), max)
	case !utf8.ValidString(v):
		return fmt.Errorf("%w: the %s %q is not valid UTF-8", ErrInvalidMessage, what, v)
	case strings.ContainsFunc(v, unicode.IsControl):
		return fmt.Errorf("%w: the %s %q contains a control character", ErrInvalidMessage, what, v)
	}
	return nil
}

// ValidateHeader checks one caller header: a key of printable ASCII
// without ':' or spaces that does not start with "Nats-" or "Fencepost-"
// (those are reserved), and a value without control characters.
func ValidateHeader(key, value string) error {
	if key == "" {
		return fmt.Errorf("%w: empty header name", ErrInvalidMessage)
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c <= ' ' || c >= 0x7f || c == ':' {
			return fmt.Errorf("%w: header name %q has %q at byte %d; use printable ASCII without ':' or spaces", ErrInvalidMessage, key, c, i)
		}
	}
	if reserved(key) {
		return fmt.Errorf("%w: header name %q uses a reserved prefix (%q, %q)", ErrInvalidMessage, key, reservedNats, reservedFencepost)
	}
	if key == "Status" || key == "Description" {
		// NATS's own status headers: a handler would never see them.
		return fmt.Errorf("%w: header name %q is reserved by NATS", ErrInvalidMessage, key)
	}
	if len(key)+len(value) > maxHeaderBytes {
		return fmt.Errorf("%w: header %q is %d bytes, the limit is %d", ErrInvalidMessage, key, len(key)+len(value), maxHeaderBytes)
	}
	return validateValue("value of header "+key, value, maxHeaderBytes)
}

// UserHeaders returns the caller's own headers of a stored message: every
// header except the reserved ones and the status line. It never returns
// nil.
func UserHeaders(h nats.Header) nats.Header {
	out := nats.Header{}
	for k, v := range h {
		if reserved(k) || k == "Status" || k == "Description" {
			continue
		}
		out[k] = append([]string(nil), v...)
	}
	return out
}

// reserved says whether header name k starts with a reserved prefix, in
// any case. It compares ASCII letters only, without allocating (a worker
// asks for every header of every message it delivers): that is the same
// answer as strings.HasPrefix(strings.ToLower(k), lower prefix), since the
// only runes outside ASCII whose lower case is ASCII are the Kelvin sign
// (k) and the dotted capital I (i), and neither prefix has a k or an i
// (TestReservedFold).
func reserved(k string) bool {
	return hasPrefixFold(k, reservedNats) || hasPrefixFold(k, reservedFencepost)
}

// hasPrefixFold: s starts with prefix, ASCII letters compared in any case.
func hasPrefixFold(s, prefix string) bool {
	if len(s) < len(prefix) {
		return false
	}
	for i := 0; i < len(prefix); i++ {
		if lowerASCII(s[i]) != lowerASCII(prefix[i]) {
			return false
		}
	}
	return true
}

func lowerASCII(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// HeaderValue is the first value of header key in h, whatever the case of
// its name on the wire: NATS keeps header names as sent, so a producer in
// another language may well send "fencepost-from" (docs/wire.md).
func HeaderValue(h nats.Header, key string) string {
	if v := h.Get(key); v != "" {
		return v
	}
	for k, vs := range h {
		if len(vs) > 0 && strings.EqualFold(k, key) {
			return vs[0]
		}
	}
	return ""
}

// Sender is the sender a stored message names (HeaderFrom, in any case),
// and whether it keeps the rule of ValidateFrom. The Go client refuses to
// send a sender that breaks it; a producer in another language is not
// checked by the broker, so readers check: a sender that breaks the rule
// is not handed on as a sender (docs/wire.md "Headers").
func Sender(h nats.Header) (from string, ok bool) {
	from = HeaderValue(h, HeaderFrom)
	if ValidateFrom(from) != nil {
		return "", false
	}
	return from, true
}

// HeaderSize is the size of h on the wire, as the server counts it against
// a stream's max message size.
func HeaderSize(h nats.Header) int {
	if len(h) == 0 {
		return 0
	}
	n := len("NATS/1.0\r\n\r\n")
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(": ") + len(v) + len("\r\n")
		}
	}
	return n
}
