package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"
)

// RecordVersion is the only version of the bucket's records (ownership
// records, node leases, cursors, locks, force keys) this code reads and
// writes. A reader that meets another version refuses: it never guesses.
const RecordVersion = 1

// States of an ownership record.
const (
	StateHeld = "held" // a node holds the id until Expires
	StateFree = "free" // released; the epoch stays for fencing
)

// Errors of the record decoders. Each is wrapped with the record's kind
// (ownership record, cursor, lock) and what is wrong.
var (
	ErrCorruptRecord  = errors.New("corrupt record")
	ErrUnknownVersion = errors.New("unknown record version")
)

// Record is the ownership record of one id, stored as JSON under
// RecordKey(id). Version 1:
//
//	{"v":1,"node":"n1","epoch":7,"state":"held","ttl_ms":10000,
//	 "acquired":"2026-11-29T21:00:00.123Z","expires":"2026-11-29T21:00:10.123Z"}
//
// A held record may name the node lease that backs it ("node_lease": the
// epoch of the node lease record under NodeKey(node) it was claimed with).
// Such a record is live iff that node lease record is live and still at that
// epoch (LiveBacked); its own "expires" is then only the node lease's expiry
// when the id was written. A node lease record has the same format, at
// NodeKey(node), and never names a node lease itself.
type Record struct {
	V         int       `json:"v"`
	Node      string    `json:"node"`
	Epoch     uint64    `json:"epoch"`
	State     string    `json:"state"`
	TTLms     int64     `json:"ttl_ms"`
	Acquired  time.Time `json:"acquired"`
	Expires   time.Time `json:"expires"`
	NodeLease uint64    `json:"node_lease,omitempty"`
}

// Live reports whether the record names a holder whose lease has not lapsed
// at now. Exact expiry is lapsed: now >= Expires. For a record backed by a
// node lease it is not the whole rule: use LiveBacked.
func (r *Record) Live(now time.Time) bool {
	return r.State == StateHeld && now.Before(r.Expires)
}

// Backed reports whether a held record is backed by a node lease.
func (r *Record) Backed() bool { return r.State == StateHeld && r.NodeLease != 0 }

// BackedBy reports whether node lease record nl (nil: absent or deleted) is
// the session that backs r: held, by r's node, at epoch r.NodeLease. Once
// false for a record it stays false: node lease epochs never repeat.
func (r *Record) BackedBy(nl *Record) bool {
	return r.Backed() && nl != nil && nl.State == StateHeld && nl.Node == r.Node && nl.Epoch == r.NodeLease
}

// LiveBacked is the liveness rule of every record: a record without a node
// lease is live per Live; a record backed by a node lease is live iff the
// node lease record nl (nil: absent or deleted) is held by the same node at
// the epoch the record names, and is itself live at now.
func (r *Record) LiveBacked(nl *Record, now time.Time) bool {
	if !r.Backed() {
		return r.Live(now)
	}
	return r.BackedBy(nl) && nl.Live(now)
}

// EncodeRecord validates r and returns its JSON form.
func EncodeRecord(r Record) ([]byte, error) {
	r.V = RecordVersion
	r.Acquired = r.Acquired.UTC()
	r.Expires = r.Expires.UTC()
	if err := r.validate(); err != nil {
		return nil, err
	}
	if b, ok := appendPlainRecord(make([]byte, 0, 192), &r); ok {
		return b, nil
	}
	return json.Marshal(r)
}

// DecodeRecord parses a stored record. It refuses unknown versions with
// ErrUnknownVersion and anything malformed with ErrCorruptRecord.
func DecodeRecord(data []byte) (Record, error) {
	if r, ok := decodePlainRecord(data); ok {
		// Nearly every record: what EncodeRecord writes (plainrecord.go).
		if err := r.validate(); err != nil {
			return Record{}, err
		}
		return r, nil
	}
	var r Record
	if decodeOnce(data, &r) && r.V == RecordVersion {
		// Every record this version writes: one pass, not decodeStrict's
		// two (a probe of the version, then the strict decode). Every
		// read, watch event and claim decodes one.
		if err := r.validate(); err != nil {
			return Record{}, err
		}
		return r, nil
	}
	r = Record{}
	if err := decodeStrict(data, "ownership record", &r); err != nil {
		return Record{}, err
	}
	if err := r.validate(); err != nil {
		return Record{}, err
	}
	return r, nil
}

func (r *Record) validate() error {
	switch {
	case r.State != StateHeld && r.State != StateFree:
		return fmt.Errorf("%w: state %q is neither %q nor %q", ErrCorruptRecord, r.State, StateHeld, StateFree)
	case r.Epoch == 0:
		return fmt.Errorf("%w: epoch 0 (epochs start at 1)", ErrCorruptRecord)
	case r.State == StateHeld && ValidateNode(r.Node) != nil:
		return fmt.Errorf("%w: held record with invalid node: %v", ErrCorruptRecord, ValidateNode(r.Node))
	case !utf8.ValidString(r.Node):
		// JSON cannot carry it: json.Marshal would write U+FFFD instead
		// and the record read back would name another node.
		return fmt.Errorf("%w: node %q is not valid UTF-8", ErrCorruptRecord, r.Node)
	case r.TTLms < 0:
		return fmt.Errorf("%w: negative ttl_ms", ErrCorruptRecord)
	case r.State == StateHeld && r.Expires.IsZero():
		return fmt.Errorf("%w: held record without expiry", ErrCorruptRecord)
	case r.State == StateFree && r.NodeLease != 0:
		return fmt.Errorf("%w: a free record names node lease %d", ErrCorruptRecord, r.NodeLease)
	case !InJSONRange(r.Acquired) || !InJSONRange(r.Expires):
		return fmt.Errorf("%w: acquired %v or expires %v is outside years 0..9999 in UTC", ErrCorruptRecord, r.Acquired, r.Expires)
	}
	return nil
}

// InJSONRange reports whether t, in UTC, is within the years 0..9999 that
// time.Time's JSON form can hold. A time read from JSON with a zone offset
// can fall outside them ("0000-01-01T00:00:00+01:00" is year -1 in UTC),
// and a record holding it could not be written back.
func InJSONRange(t time.Time) bool {
	y := t.UTC().Year()
	return y >= 0 && y <= 9999
}
