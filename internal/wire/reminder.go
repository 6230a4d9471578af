package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Reminders (docs/contract.md section 11; docs/wire.md "Reminders"): a
// holder's timer for its own id. The holder first writes the reminder's
// intent as a key of the world's bucket, in one write fenced on its
// ownership record (Nats-Expected-Last-Subject-Sequence with -Subject
// naming the record): the broker stores it only while the record is at the
// holder's revision. The intent is then materialised, by the holder or, if
// it stopped first, by fencepostd: the broker schedule is written to the
// timer stream with the intent's revision (HeaderReminderRev), and the
// intent is deleted.
//
//	r.<eid>.<key>   the pending intent of id's reminder key
//
// Its value (EncodeReminder) is one line of JSON and the body:
//
//	{"v":1,"id":"order.42","key":"pay","at":"2026-05-01T09:00:00.25Z","h":{"Fencepost-From":["billing"]}}\n<body>
const ReminderPrefix = "r."

// ReminderKeys matches every reminder intent key of a world's bucket (a
// KV watch's or a filter's key pattern).
const ReminderKeys = ReminderPrefix + ">"

// HeaderReminderRev is on a reminder's schedule (and so on its fired copy):
// the bucket revision of the intent it materialises, in decimal. A
// materialisation never replaces a schedule that carries the same or a
// higher one.
const HeaderReminderRev = "Fencepost-Reminder-Rev"

// ReminderKey is the bucket key of the intent of id's reminder key. It
// does not validate.
func ReminderKey(id, key string) string { return ReminderPrefix + EncodeID(id) + "." + key }

// ReminderSubject is the bucket subject of the intent of id's reminder
// key: where it is written, fenced on the holder's record, and deleted once
// materialised.
func ReminderSubject(world, id, key string) string { return KeySubject(world, ReminderKey(id, key)) }

// ReminderOf is the id and reminder key of a bucket key made by
// ReminderKey, and an error for any other key.
func ReminderOf(bucketKey string) (id, key string, err error) {
	rest, ok := strings.CutPrefix(bucketKey, ReminderPrefix)
	var tok string
	if ok {
		tok, key, ok = strings.Cut(rest, ".")
	}
	if !ok {
		return "", "", fmt.Errorf("%w: %q is not a reminder key", ErrInvalidID, bucketKey)
	}
	if err := ValidateTimerKey(key); err != nil {
		return "", "", err
	}
	id, err = DecodeID(tok)
	return id, key, err
}

// ReminderMsgID is the Nats-Msg-Id of the schedule that materialises the
// intent of id's reminder key stored at revision rev: unique per intent,
// so that a second materialisation inside the dedupe window (the holder's
// and fencepostd's) is answered as a duplicate even after the first one
// fired. '=' never starts an id's token, so no producer's id is the same.
func ReminderMsgID(id, key string, rev uint64) string {
	return "=rm:" + EncodeID(id) + ":" + key + ":" + strconv.FormatUint(rev, 10)
}

// ReminderOverhead bounds the header bytes a reminder's schedule carries
// beyond a timer's (HeaderReminderRev and its Nats-Msg-Id), as the broker
// counts them; the rev header stays on the fired copy, the message id does
// not.
func ReminderOverhead(id, key string) int {
	return len(HeaderReminderRev) + 2 + 20 + 2 + len("Nats-Msg-Id") + 2 + len(ReminderMsgID(id, key, 1<<64-1)) + 2
}

// Reminder is a reminder's intent: everything its schedule needs.
type Reminder struct {
	ID     string
	Key    string
	At     time.Time           // when it fires (UTC, nanoseconds kept)
	Header map[string][]string // the schedule's own headers: the sender's, the caller's; no Nats-* one
	Body   []byte
}

// reminderHead is the JSON line in front of an intent's body.
type reminderHead struct {
	V      int                 `json:"v"`
	ID     string              `json:"id"`
	Key    string              `json:"key"`
	At     string              `json:"at"`
	Header map[string][]string `json:"h,omitempty"`
}

// EncodeReminder is the value of r's intent key. It refuses what
// DecodeReminder would.
func EncodeReminder(r Reminder) ([]byte, error) {
	h := reminderHead{V: RecordVersion, ID: r.ID, Key: r.Key, At: r.At.UTC().Format(time.RFC3339Nano), Header: r.Header}
	if len(h.Header) == 0 {
		h.Header = nil
	}
	if err := h.validate(); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf) // one line, and '\n' after it
	enc.SetEscapeHTML(false)
	if err := enc.Encode(h); err != nil {
		return nil, fmt.Errorf("%w: reminder intent: %v", ErrCorruptRecord, err)
	}
	buf.Write(r.Body)
	return buf.Bytes(), nil
}

// DecodeReminder reads the value of an intent key: a JSON line of version
// 1 with exactly the fields EncodeReminder writes, a valid id, a given
// timer key, a time in RFC 3339 UTC, headers whose names are NATS header
// tokens outside the Nats- prefix and whose values are one line of UTF-8;
// then the body. Anything else is ErrCorruptRecord (ErrUnknownVersion for
// another version).
func DecodeReminder(data []byte) (Reminder, error) {
	line, body, ok := bytes.Cut(data, []byte("\n"))
	if !ok {
		return Reminder{}, fmt.Errorf("%w: reminder intent without its header line", ErrCorruptRecord)
	}
	var h reminderHead
	if err := decodeStrict(line, "reminder intent", &h); err != nil {
		return Reminder{}, err
	}
	if err := h.validate(); err != nil {
		return Reminder{}, err
	}
	at, _ := time.Parse(time.RFC3339Nano, h.At) // validate parsed it
	if body == nil {
		body = []byte{}
	}
	return Reminder{ID: h.ID, Key: h.Key, At: at, Header: h.Header, Body: body}, nil
}

func (h reminderHead) validate() error {
	if err := ValidateID(h.ID); err != nil {
		return fmt.Errorf("%w: reminder intent: %w", ErrCorruptRecord, err)
	}
	if err := ValidateTimerKey(h.Key); err != nil {
		return fmt.Errorf("%w: reminder intent: %w", ErrCorruptRecord, err)
	}
	at, err := time.Parse(time.RFC3339Nano, h.At)
	if err != nil || at.Location() != time.UTC || at.Format(time.RFC3339Nano) != h.At {
		return fmt.Errorf("%w: reminder intent: time %q is not RFC 3339 in UTC as written", ErrCorruptRecord, h.At)
	}
	for k, vs := range h.Header {
		if err := reminderHeaderName(k); err != nil {
			return err
		}
		if len(vs) == 0 {
			return fmt.Errorf("%w: reminder intent: header %q without a value", ErrCorruptRecord, k)
		}
		for _, v := range vs {
			if !utf8.ValidString(v) || strings.ContainsAny(v, "\r\n\x00") {
				return fmt.Errorf("%w: reminder intent: header %q has a value that is not one line of UTF-8", ErrCorruptRecord, k)
			}
		}
	}
	return nil
}

// reminderHeaderName refuses a header name that would not go through the
// NATS header encoding as it is, or that starts with Nats- in any case: an
// intent never makes its schedule carry one of the broker's headers (a
// Nats-Rollup would wipe the timer stream).
func reminderHeaderName(k string) error {
	if k == "" {
		return fmt.Errorf("%w: reminder intent: empty header name", ErrCorruptRecord)
	}
	for i := 0; i < len(k); i++ {
		if c := k[i]; c <= ' ' || c >= 0x7f || c == ':' {
			return fmt.Errorf("%w: reminder intent: header name %q has byte 0x%02x", ErrCorruptRecord, k, c)
		}
	}
	if len(k) >= 5 && strings.EqualFold(k[:5], "Nats-") {
		return fmt.Errorf("%w: reminder intent: header %q is the broker's", ErrCorruptRecord, k)
	}
	return nil
}
