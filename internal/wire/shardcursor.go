package wire

import (
	"encoding/json"
	"fmt"
)

// MaxPendingIDs bounds the ids a shard cursor excepts (ShardCursor.Pending):
// a holder with more failing ids at once holds its mark below the oldest of
// the rest instead (head of line, never a loss).
const MaxPendingIDs = 256

// ShardCursor is the delivery cursor of one shard of a sharded world,
// stored as JSON under CursorKey(ShardUnit(q)) and written only with the
// fence of the shard's record:
//
//	{"v":1,"seq":1041}
//	{"v":1,"seq":1041,"pending":{"b3JkZXItNDI":{"seq":1007,"failures":2,"error":"timeout"}}}
//
// Seq is the shard's mark: every message of the shard stored at or below
// it has left the mailbox (handled, or dead-lettered), except the messages
// of each pending id at or above that id's Seq. A pending id is one whose
// handler failed: its first message not yet handled (Seq), the failed
// deliveries of that message so far and the last error, so that the
// count survives a takeover and the other ids of the shard move on.
type ShardCursor struct {
	V       int                  `json:"v"`
	Seq     uint64               `json:"seq"`
	Pending map[string]PendingID `json:"pending,omitempty"`
}

// PendingID is one id's exception in a ShardCursor, keyed by its token.
type PendingID struct {
	Seq      uint64 `json:"seq"`
	Failures int    `json:"failures,omitempty"`
	Error    string `json:"error,omitempty"`
}

// Committed says whether the message of the id with token eid at seq has
// left the mailbox by this cursor.
func (c ShardCursor) Committed(eid string, seq uint64) bool {
	if seq > c.Seq {
		return false
	}
	p, ok := c.Pending[eid]
	return !ok || seq < p.Seq
}

// Low is the shard's removal bound: every message of the shard below it
// has left the mailbox (the mark, or the oldest pending message).
func (c ShardCursor) Low() uint64 {
	low := c.Seq + 1
	for _, p := range c.Pending {
		low = min(low, p.Seq)
	}
	return low
}

// Below is c with its mark moved back to just below seq (seq > 1): the
// exceptions at or above the new mark are dropped with it. Every message
// the result covers, c covered.
func (c ShardCursor) Below(seq uint64) ShardCursor {
	out := ShardCursor{V: c.V, Seq: min(c.Seq, seq-1)}
	for eid, p := range c.Pending {
		if p.Seq <= out.Seq {
			if out.Pending == nil {
				out.Pending = map[string]PendingID{}
			}
			out.Pending[eid] = p
		}
	}
	return out
}

// EncodeShardCursor validates c and returns its JSON form.
func EncodeShardCursor(c ShardCursor) ([]byte, error) {
	c.V = RecordVersion
	if err := c.validate(); err != nil {
		return nil, err
	}
	return json.Marshal(c)
}

// DecodeShardCursor parses a stored shard cursor, refusing unknown versions
// and anything malformed.
func DecodeShardCursor(data []byte) (ShardCursor, error) {
	var c ShardCursor
	if err := decodeStrict(data, "shard cursor", &c); err != nil {
		return ShardCursor{}, err
	}
	if err := c.validate(); err != nil {
		return ShardCursor{}, err
	}
	return c, nil
}

func (c ShardCursor) validate() error {
	if len(c.Pending) > MaxPendingIDs {
		return fmt.Errorf("%w: shard cursor with %d pending ids, the limit is %d", ErrCorruptRecord, len(c.Pending), MaxPendingIDs)
	}
	for eid, p := range c.Pending {
		switch {
		case !validToken(eid):
			return fmt.Errorf("%w: shard cursor pending id %q is not an id's token", ErrCorruptRecord, eid)
		case p.Seq == 0 || p.Seq > c.Seq:
			return fmt.Errorf("%w: shard cursor pending seq %d is not in 1..%d", ErrCorruptRecord, p.Seq, c.Seq)
		case p.Failures < 0:
			return fmt.Errorf("%w: shard cursor with negative failures", ErrCorruptRecord)
		case p.Failures == 0 && p.Error != "":
			return fmt.Errorf("%w: shard cursor error without failures", ErrCorruptRecord)
		case len(p.Error) > MaxErrorBytes:
			return fmt.Errorf("%w: shard cursor error is %d bytes, the limit is %d", ErrCorruptRecord, len(p.Error), MaxErrorBytes)
		}
	}
	return nil
}

// validToken says whether eid is the canonical token of an id.
func validToken(eid string) bool {
	_, err := DecodeID(eid)
	return err == nil
}
