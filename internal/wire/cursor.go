package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// MaxErrorBytes bounds the last error kept in a cursor or dead letter.
const MaxErrorBytes = 1024

// Cursor is the delivery cursor of one id, stored as JSON under
// CursorKey(id) and written only with the owner's fence:
//
//	{"v":1,"seq":1041}
//	{"v":1,"seq":1041,"head":1042,"failures":2,"error":"timeout"}
//
// Seq is the last mailbox stream sequence whose message left the mailbox
// (acknowledged or dead-lettered): delivery resumes after it. Head, when
// set, is the next message, which failed Failures deliveries, the last
// with Error; the count survives a takeover and a restart.
type Cursor struct {
	V        int    `json:"v"`
	Seq      uint64 `json:"seq"`
	Head     uint64 `json:"head,omitempty"`
	Failures int    `json:"failures,omitempty"`
	Error    string `json:"error,omitempty"`
}

// EncodeCursor validates c and returns its JSON form.
func EncodeCursor(c Cursor) ([]byte, error) {
	c.V = RecordVersion
	if err := c.validate(); err != nil {
		return nil, err
	}
	if c.Head == 0 && c.Failures == 0 && c.Error == "" {
		// The form nearly every commit writes, {"v":1,"seq":N}, the bytes
		// json.Marshal makes, in one allocation (every commit encodes one).
		b := make([]byte, 0, len(`{"v":,"seq":}`)+3+20)
		b = append(b, `{"v":`...)
		b = strconv.AppendInt(b, int64(c.V), 10)
		b = append(b, `,"seq":`...)
		b = strconv.AppendUint(b, c.Seq, 10)
		return append(b, '}'), nil
	}
	return json.Marshal(c)
}

// DecodeCursor parses a stored cursor, refusing unknown versions and
// anything malformed with ErrCorruptRecord.
func DecodeCursor(data []byte) (Cursor, error) {
	if c, ok := decodePlainCursor(data); ok {
		return c, nil
	}
	return decodeCursorStrict(data)
}

func decodeCursorStrict(data []byte) (Cursor, error) {
	var c Cursor
	if err := decodeStrict(data, "cursor", &c); err != nil {
		return Cursor{}, err
	}
	if err := c.validate(); err != nil {
		return Cursor{}, err
	}
	return c, nil
}

// decodePlainCursor reads the form nearly every cursor has, exactly as
// EncodeCursor writes it: {"v":1,"seq":N}, N in canonical decimal. Anything
// else is left to the strict decoder. Every worker's sweep reads every
// commit, and the JSON decoder cost a fifth of a worker's CPU there.
func decodePlainCursor(data []byte) (Cursor, bool) {
	const prefix, suffix = `{"v":1,"seq":`, `}`
	digits, ok := bytes.CutPrefix(data, []byte(prefix))
	if !ok {
		return Cursor{}, false
	}
	if digits, ok = bytes.CutSuffix(digits, []byte(suffix)); !ok || len(digits) == 0 || len(digits) > 20 || digits[0] == '0' && len(digits) > 1 {
		return Cursor{}, false
	}
	var n uint64
	for _, b := range digits {
		if b < '0' || b > '9' {
			return Cursor{}, false
		}
		d := uint64(b - '0')
		if n > (1<<64-1-d)/10 {
			return Cursor{}, false // overflow: the strict decoder refuses it
		}
		n = n*10 + d
	}
	return Cursor{V: RecordVersion, Seq: n}, true
}

func (c Cursor) validate() error {
	switch {
	case c.Failures < 0:
		return fmt.Errorf("%w: cursor with negative failures", ErrCorruptRecord)
	case (c.Head == 0) != (c.Failures == 0):
		return fmt.Errorf("%w: cursor head %d with %d failures (both or neither)", ErrCorruptRecord, c.Head, c.Failures)
	case c.Head != 0 && c.Head <= c.Seq:
		return fmt.Errorf("%w: cursor head %d is not after seq %d", ErrCorruptRecord, c.Head, c.Seq)
	case c.Failures == 0 && c.Error != "":
		return fmt.Errorf("%w: cursor error without failures", ErrCorruptRecord)
	case len(c.Error) > MaxErrorBytes:
		return fmt.Errorf("%w: cursor error is %d bytes, the limit is %d", ErrCorruptRecord, len(c.Error), MaxErrorBytes)
	}
	return nil
}

// FailuresOf is how many deliveries of the message at seq failed before.
func (c Cursor) FailuresOf(seq uint64) int {
	if c.Head == seq {
		return c.Failures
	}
	return 0
}

// Lock is the drain lock of one id, stored as JSON under LockKey(id):
//
//	{"v":1,"token":"Xb9...","node":"n1","epoch":7,"expires":"2026-11-29T21:00:30Z"}
//
// Token is unique per drain. Expires is the holder's wall clock plus the
// lock term; the holder renews it at a third of the term.
type Lock struct {
	V       int       `json:"v"`
	Token   string    `json:"token"`
	Node    string    `json:"node"`
	Epoch   uint64    `json:"epoch"`
	Expires time.Time `json:"expires"`
}

// EncodeLock validates l and returns its JSON form.
func EncodeLock(l Lock) ([]byte, error) {
	l.V = RecordVersion
	l.Expires = l.Expires.UTC()
	if err := l.validate(); err != nil {
		return nil, err
	}
	return json.Marshal(l)
}

// DecodeLock parses a stored lock.
func DecodeLock(data []byte) (Lock, error) {
	var l Lock
	if err := decodeStrict(data, "lock", &l); err != nil {
		return Lock{}, err
	}
	if err := l.validate(); err != nil {
		return Lock{}, err
	}
	return l, nil
}

func (l Lock) validate() error {
	switch {
	case l.Token == "" || len(l.Token) > 64:
		return fmt.Errorf("%w: lock token must be 1 to 64 bytes", ErrCorruptRecord)
	case ValidateNode(l.Node) != nil:
		return fmt.Errorf("%w: lock node: %v", ErrCorruptRecord, ValidateNode(l.Node))
	case l.Epoch == 0:
		return fmt.Errorf("%w: lock epoch 0", ErrCorruptRecord)
	case l.Expires.IsZero():
		return fmt.Errorf("%w: lock without expiry", ErrCorruptRecord)
	case !InJSONRange(l.Expires):
		return fmt.Errorf("%w: lock expiry %v is outside years 0..9999 in UTC", ErrCorruptRecord, l.Expires)
	}
	return nil
}

// decodeStrict decodes one JSON object of this version with no unknown
// fields or trailing data: another version is ErrUnknownVersion, anything
// malformed ErrCorruptRecord. what names the record in the error.
func decodeStrict(data []byte, what string, into any) error {
	var probe struct {
		V *int `json:"v"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		return fmt.Errorf("%w: %s is not JSON: %v", ErrCorruptRecord, what, err)
	}
	if probe.V == nil {
		return fmt.Errorf("%w: %s has no version field \"v\"", ErrCorruptRecord, what)
	}
	if *probe.V != RecordVersion {
		return fmt.Errorf("%w: %s v=%d, this reader knows v=%d; upgrade fencepost", ErrUnknownVersion, what, *probe.V, RecordVersion)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrCorruptRecord, what, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: %s: trailing data", ErrCorruptRecord, what)
	}
	return nil
}

// decodeOnce is decodeStrict's decode alone: it says whether data is one
// JSON value, with nothing but white space after it, that decodes into
// into without unknown fields. Where it is true and into's version is
// RecordVersion, decodeStrict gives the same value and no error (its probe
// of the version reads the same value of the same whole-valid JSON);
// anywhere else the caller asks decodeStrict, for its error.
func decodeOnce(data []byte, into any) bool {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		return false
	}
	for _, c := range data[dec.InputOffset():] {
		if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			return false
		}
	}
	return true
}

// Force is the force key of an id (ForceKey): the last forced seize, JSON
// {"v":1,"node":...,"at":<RFC 3339>,"ttl":<Go duration>}. Written by every
// forced seize before the record; readers of the record ignore it.
type Force struct {
	V    int       `json:"v"`
	Node string    `json:"node"`
	At   time.Time `json:"at"`
	TTL  string    `json:"ttl"`
}

// EncodeForce returns the JSON form of the force key of a seize by node
// at at for ttl.
func EncodeForce(node string, at time.Time, ttl time.Duration) ([]byte, error) {
	f := Force{V: RecordVersion, Node: node, At: at.UTC(), TTL: ttl.String()}
	if err := ValidateNode(node); err != nil {
		return nil, fmt.Errorf("%w: force key: %v", ErrCorruptRecord, err)
	}
	return json.Marshal(f)
}

// DecodeForce parses a stored force key.
func DecodeForce(data []byte) (Force, error) {
	var f Force
	if err := decodeStrict(data, "force key", &f); err != nil {
		return Force{}, err
	}
	if err := ValidateNode(f.Node); err != nil {
		return Force{}, fmt.Errorf("%w: force key: %v", ErrCorruptRecord, err)
	}
	if _, err := time.ParseDuration(f.TTL); err != nil {
		return Force{}, fmt.Errorf("%w: force key ttl %q: %v", ErrCorruptRecord, f.TTL, err)
	}
	return f, nil
}
