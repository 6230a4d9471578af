package wire

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Limits of the names the layout accepts.
const (
	MaxIDBytes    = 256 // an id is 1..256 bytes of UTF-8
	MaxNodeBytes  = 256 // a node name, likewise
	MaxWorldBytes = 32  // a world name is 1..32 of [A-Za-z0-9_-]
)

// Errors returned by the validators. Each is wrapped with the offending
// value and what to do about it.
var (
	ErrInvalidID    = errors.New("invalid id")
	ErrInvalidNode  = errors.New("invalid node")
	ErrInvalidWorld = errors.New("invalid world name")
)

// idCodec is unpadded base64url that refuses non-zero trailing bits: each
// id has exactly one token, so no two subjects name one mailbox.
var idCodec = base64.RawURLEncoding.Strict()

// ValidateID checks that id is a non-empty UTF-8 string of at most
// MaxIDBytes bytes without a NUL byte.
//
// NUL is the one character an id may not hold: no process environment
// or command-line argument can carry it, so `fencepost work --exec` could
// never hand such an id to its command (FENCEPOST_ID), and no command
// line could name it. A token that decodes to an id with a NUL is
// therefore no id's, and its messages are unroutable (docs/wire.md).
func ValidateID(id string) error {
	if err := validateName(ErrInvalidID, "id", id, MaxIDBytes); err != nil {
		return err
	}
	if strings.IndexByte(id, 0) >= 0 {
		return fmt.Errorf("%w: the id %q holds a NUL byte (0x00), which no environment variable or command-line argument can carry (fencepost work --exec passes the id in FENCEPOST_ID): use another character", ErrInvalidID, id)
	}
	return nil
}

// ValidateNode checks a node name with the rules of an id but one: a
// node name may hold a NUL byte (ownership records written with one stay
// readable).
func ValidateNode(node string) error {
	return validateName(ErrInvalidNode, "node", node, MaxNodeBytes)
}

func validateName(kind error, what, s string, max int) error {
	switch {
	case s == "":
		return fmt.Errorf("%w: the %s is empty; give 1 to %d bytes of UTF-8", kind, what, max)
	case len(s) > max:
		return fmt.Errorf("%w: the %s is %d bytes, the limit is %d", kind, what, len(s), max)
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: the %s %q is not valid UTF-8", kind, what, s)
	}
	return nil
}

// ValidateWorld checks a world name: 1 to 32 characters of A-Z, a-z, 0-9,
// '_' and '-', so that it can be part of a stream and bucket name.
func ValidateWorld(world string) error {
	if world == "" {
		return fmt.Errorf("%w: the world name is empty", ErrInvalidWorld)
	}
	if len(world) > MaxWorldBytes {
		return fmt.Errorf("%w: %q is %d bytes, the limit is %d", ErrInvalidWorld, world, len(world), MaxWorldBytes)
	}
	for i, c := range world {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' {
			continue
		}
		// The character as the user typed it ('é', not the 'Ã' of its
		// first byte); a byte that is not UTF-8, as a byte.
		what := fmt.Sprintf("%q", c)
		if c == utf8.RuneError {
			if _, n := utf8.DecodeRuneInString(world[i:]); n == 1 {
				what = fmt.Sprintf("the byte 0x%02x (not UTF-8)", world[i])
			}
		}
		return fmt.Errorf("%w: %q has %s at byte %d; use only A-Z, a-z, 0-9, '_' and '-'", ErrInvalidWorld, world, what, i)
	}
	return nil
}

// EncodeID turns an id into a token that is valid both as a KV key part and
// as a subject token: unpadded base64url (RFC 4648 section 5). It does not
// validate; call ValidateID first.
func EncodeID(id string) string {
	var buf [maxIDToken]byte
	return string(encodeIDTo(&buf, id))
}

// maxIDToken is the length of the longest token EncodeID makes (of an id,
// or a node, of MaxIDBytes).
const maxIDToken = (MaxIDBytes*8 + 5) / 6

// encodeIDTo is EncodeID into buf, without allocating for an id of at most
// MaxIDBytes (the longer ones, invalid, are encoded on the heap). Subjects
// and keys concatenate it (string(b) in a concatenation is not copied
// twice): they are built on every message and commit.
func encodeIDTo(buf *[maxIDToken]byte, id string) []byte {
	if len(id) > MaxIDBytes {
		return []byte(idCodec.EncodeToString([]byte(id)))
	}
	var src [MaxIDBytes]byte
	return encodeBytesTo(buf, src[:copy(src[:], id)])
}

// encodeBytesTo encodes b, at most MaxIDBytes, into buf.
func encodeBytesTo(buf *[maxIDToken]byte, b []byte) []byte {
	dst := buf[:idCodec.EncodedLen(len(b))]
	idCodec.Encode(dst, b)
	return dst
}

// DecodeID reverses EncodeID and validates the result. It accepts only
// canonical tokens, the ones EncodeID makes: unpadded base64url whose
// unused trailing bits are zero, decoding to a valid id. A padded token
// ("b3JkZXIuNDI="), one with another alphabet ("w7w+Pw"), with non-zero
// trailing bits ("b3JkZXIuNDK", which a lenient decoder reads as
// "order.42"), a wildcard ("*"), or one that decodes to invalid UTF-8 or
// more than MaxIDBytes is refused with ErrInvalidID: no id's mailbox
// has that subject, so its messages are unroutable (docs/wire.md).
func DecodeID(token string) (string, error) {
	if token == "" {
		return "", fmt.Errorf("%w: empty token", ErrInvalidID)
	}
	if len(token) > maxIDToken {
		return "", fmt.Errorf("%w: token of %d bytes encodes more than %d bytes", ErrInvalidID, len(token), MaxIDBytes)
	}
	// Decoded and checked on the stack: the feed of every worker decodes
	// the subject of every message posted to the world. One allocation,
	// the id.
	var src [maxIDToken]byte
	var dst [MaxIDBytes + 2]byte // DecodeString's room for maxIDToken bytes (CR and LF skipped)
	b := dst[:idCodec.DecodedLen(copy(src[:], token))]
	n, err := idCodec.Decode(b, src[:len(token)])
	if err != nil {
		return "", fmt.Errorf("%w: token %q is not canonical unpadded base64url: %v", ErrInvalidID, token, err)
	}
	id := string(b[:n])
	if err := ValidateID(id); err != nil {
		return "", err
	}
	var enc [maxIDToken]byte
	if string(encodeBytesTo(&enc, b[:n])) != token { // the codec skips CR and LF; the round trip does not
		return "", fmt.Errorf("%w: token %q is not the canonical encoding of its id", ErrInvalidID, token)
	}
	return id, nil
}

// Bucket is the name of the world's KV bucket. It holds the ownership
// records, the delivery cursors, the drain locks and the node leases, so that
// a mailbox commit can be checked against an ownership record in one write
// (both are subjects of the same stream).
func Bucket(world string) string { return bucketPrefix + world }

// bucketPrefix begins the name of every world's bucket (Bucket).
const bucketPrefix = "fp_"

// BucketStream is the JetStream stream behind Bucket.
func BucketStream(world string) string { return "KV_" + Bucket(world) }

// Keys of the bucket. Each key is a prefix and an encoded id or node.
const (
	RecordPrefix = "o." // ownership record of an id
	CursorPrefix = "c." // delivery cursor of an id (mailbox issue)
	LockPrefix   = "l." // drain lock of an id (mailbox issue)
	NodePrefix   = "n." // node lease (lease issue)
	// ForcePrefix keys the last forced seize of an id: written before the
	// record by every forced seize, and a key only the operator role may
	// write, so the server refuses a forced seize to anyone else
	// (docs/security.md).
	ForcePrefix = "f."
)

// WorldKey is the bucket key of the world's settings entry: the world's
// settings as the bucket's metadata holds them, written by whoever creates
// or resets the world (and by fencepostd at start), for a client that may
// not read the world's streams' info: a producer under fencepostd --auth
// reads it with one direct get of this key alone (docs/wire.md, "Settings
// entry"; docs/security.md). It has no '.', so no prefix of the keys above
// matches it.
const WorldKey = "world"

// ResetKey is the bucket key a reset writes after it purged the bucket
// (the time, RFC 3339): a purge leaves no marker per key, so watchers learn
// from it that every record is gone (ownership.Watch reports each as
// deleted). No '.' in it either.
const ResetKey = "reset"

// BarrierKey is the bucket key of the read barrier of a replicated world:
// one key for the whole world, never read, whose writes are conditional on
// another key's last revision (Nats-Expected-Last-Subject-Sequence with
// Nats-Expected-Last-Subject-Sequence-Subject naming that key's subject).
// Only a bucket stream leader with a quorum stores such a write, and only
// if that key is still at the revision a read showed, so a stored barrier
// proves the read current when it was stored (ownership: a refusal or an
// owner answer decided on a read; docs/design.md, invariant 8). Its body
// is empty and it is never a record: the bucket keeps its last write only
// (history 1), so nothing per id is kept by it. No '.' in it, so no
// prefix of the keys above matches it and no watcher of them sees it.
const BarrierKey = "barrier"

// BarrierSubject is the subject of the world's read barrier (BarrierKey).
func BarrierSubject(world string) string { return KeySubject(world, BarrierKey) }

// RecordKey is the bucket key of id's ownership record.
func RecordKey(id string) string { return prefixed(RecordPrefix, id) }

// CursorKey is the bucket key of id's delivery cursor.
func CursorKey(id string) string { return prefixed(CursorPrefix, id) }

// LockKey is the bucket key of id's drain lock.
func LockKey(id string) string { return prefixed(LockPrefix, id) }

// ForceKey is the bucket key of id's last forced seize.
func ForceKey(id string) string { return prefixed(ForcePrefix, id) }

// NodeKey is the bucket key of a node lease.
func NodeKey(node string) string { return prefixed(NodePrefix, node) }

// prefixed is prefix + EncodeID(id), in one allocation.
func prefixed(prefix, id string) string {
	var buf [maxIDToken]byte
	return prefix + string(encodeIDTo(&buf, id))
}

// KeySubject is the subject a bucket key is stored under.
func KeySubject(world, key string) string { return "$KV." + bucketPrefix + world + "." + key }

// RecordSubject is the subject of id's ownership record: the subject a fenced
// write names in Nats-Expected-Last-Subject-Sequence-Subject.
func RecordSubject(world, id string) string {
	// KeySubject(world, RecordKey(id)) in one allocation: every commit
	// names it (fencing.Fence.Expect).
	var buf [maxIDToken]byte
	return "$KV." + bucketPrefix + world + "." + RecordPrefix + string(encodeIDTo(&buf, id))
}

// MailboxStream is the name of the world's mailbox stream.
func MailboxStream(world string) string { return "FP_MB_" + world }

// MailboxSubject is the subject of id's mailbox.
func MailboxSubject(world, id string) string {
	var buf [maxIDToken]byte
	return "fp." + world + ".mb." + string(encodeIDTo(&buf, id))
}

// MailboxFilter matches every mailbox of a world.
func MailboxFilter(world string) string { return "fp." + world + ".mb.*" }

// MailboxSweepFilter matches every subject stored on the world's mailbox
// subjects, as a consumer's filter: MailboxFilter's, and also those whose
// last token is a literal wildcard. The stream takes a post to the literal
// subject fp.<world>.mb.> (its "fp.<world>.mb.*" matches any one token),
// but a consumer filtered on "fp.<world>.mb.*" is never given it: the
// server does not take a stored ">" for a token the filter's "*" matches.
// The stream holds no longer subject under fp.<world>.mb., so this filter
// matches nothing more.
func MailboxSweepFilter(world string) string { return "fp." + world + ".mb.>" }

// DeadLetterSubject is the subject of id's dead letters.
func DeadLetterSubject(world, id string) string { return "fp." + world + ".dl." + EncodeID(id) }

// DeadLetterFilter matches every dead-letter store of a world.
func DeadLetterFilter(world string) string { return "fp." + world + ".dl.*" }

// UnroutableToken is the dead-letter token of a world's unroutable
// messages: those stored on a mailbox subject whose token is not the
// canonical encoding of any id, so no id's drain reads them. '=' never
// occurs in unpadded base64url, so no id's dead letters share the subject.
const UnroutableToken = "=unroutable"

// UnroutableSubject is where a world keeps its unroutable messages, with
// the reason each was moved (docs/wire.md "Unroutable messages").
func UnroutableSubject(world string) string { return "fp." + world + ".dl." + UnroutableToken }

// PartSuffix ends the token of the subject that holds the body parts of
// a dead-letter store (PartSubject).
const PartSuffix = "="

// PartSubject is the subject of the body parts of the dead letters stored
// on deadSubject (an id's, or the unroutable messages'): the dead letters
// too big to carry their metadata in one message keep the message there
// and a record on deadSubject (docs/wire.md "Two-part form"). So a
// dead-letter subject counts dead letters only, one message each. '='
// never occurs in unpadded base64url and never ends UnroutableToken, so
// no store's letters share a body-part subject.
func PartSubject(deadSubject string) string { return deadSubject + PartSuffix }

// IsPartToken says whether a dead-letter token (DeadLetterToken) is that
// of a body-part subject (PartSubject).
func IsPartToken(token string) bool { return strings.HasSuffix(token, PartSuffix) }

// RepostMsgID is the Nats-Msg-Id a repost of dead letter deadSeq of id
// carries (mailbox.Admin.Repost): "=re:<eid>:<deadSeq>:<died>", died the
// dead letter's stored time in Unix nanoseconds. No producer that follows
// docs/wire.md sends it: its keys are "<eid>:<key>", and no token holds
// '='. And none can send it first: it names the server's timestamp of a
// message in the dead letters, which a producer cannot read (fencepostd
// --auth gives producers no read of the mailbox stream). So a duplicate
// answer to it is an earlier post of this repost, never a producer's.
func RepostMsgID(id string, deadSeq uint64, died int64) string {
	return "=re:" + EncodeID(id) + ":" + strconv.FormatUint(deadSeq, 10) + ":" + strconv.FormatInt(died, 10)
}

// MailboxToken returns the token of a subject of the world's mailboxes
// (fp.<world>.mb.<token>), and false for any other subject.
func MailboxToken(world, subject string) (string, bool) {
	// Prefix by prefix: no subject built for each message of the feed.
	rest, ok := strings.CutPrefix(subject, "fp.")
	if ok {
		rest, ok = strings.CutPrefix(rest, world)
	}
	if ok {
		rest, ok = strings.CutPrefix(rest, ".mb.")
	}
	if !ok {
		return subject, false // as strings.CutPrefix
	}
	return rest, true
}

// ScopedMsgID is the Nats-Msg-Id a post to id's mailbox carries for the
// producer's idempotency key: "<eid>:<key>". JetStream deduplicates on the
// whole header across the world's stream; the encoded id in front makes
// the key's scope one mailbox (no '.' or ':' occurs in an encoded id, so
// the prefix is unambiguous).
func ScopedMsgID(id, key string) string { return EncodeID(id) + ":" + key }

// MsgIDKey returns the producer's key of a Nats-Msg-Id stored in id's
// mailbox, and false when the header does not carry id's scope (a producer
// that does not follow docs/wire.md, or one of fencepost's own).
func MsgIDKey(id, msgID string) (string, bool) {
	return strings.CutPrefix(msgID, EncodeID(id)+":")
}

// WorldFilter matches every subject of a world's mailbox stream: its
// mailboxes, dead letters and unroutable messages.
func WorldFilter(world string) string { return "fp." + world + ".>" }

// MailboxID is the id whose mailbox subject is subject. It fails with
// ErrInvalidID for another subject, or a mailbox subject whose token is
// not the canonical encoding of an id (an unroutable one).
func MailboxID(world, subject string) (string, error) {
	tok, ok := MailboxToken(world, subject)
	if !ok {
		return "", fmt.Errorf("%w: %q is not a mailbox subject of world %q", ErrInvalidID, subject, world)
	}
	return DecodeID(tok)
}

// DeadLetterToken returns the token of a dead-letter subject of the world
// (fp.<world>.dl.<token>: an id's, or UnroutableToken), and false for any
// other subject.
func DeadLetterToken(world, subject string) (string, bool) {
	return strings.CutPrefix(subject, "fp."+world+".dl.")
}

// KeyID is the id (or node) of a bucket subject $KV.fp_<world>.<prefix><eid>
// (RecordPrefix, CursorPrefix, LockPrefix, ForcePrefix, NodePrefix); it
// fails with ErrInvalidID for another subject or a non-canonical token.
func KeyID(world, prefix, subject string) (string, error) {
	tok, ok := strings.CutPrefix(subject, KeySubject(world, prefix))
	if !ok {
		return "", fmt.Errorf("%w: %q is not a %q key of world %q", ErrInvalidID, subject, prefix, world)
	}
	return DecodeID(tok)
}
