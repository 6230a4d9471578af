package wire

import (
	"errors"
	"fmt"
	"strings"
)

// Per-id state (docs/design.md 3.12): keys of the world's bucket, next to the id's
// ownership record and cursor, so that a holder's state writes and its
// cursor commit can be one atomic batch fenced on the record
// (docs/design.md 3.12).
//
//	s.<eid>.<key>   the value of key in id's state
//
// A state key is 1..MaxStateKeyBytes of [A-Za-z0-9_-]: one token, valid in a
// subject and a KV key as it is, so that `s.<eid>.>` matches exactly the
// id's state and the key reads back unchanged.
const (
	StatePrefix = "s."

	MaxStateKeyBytes   = 64        // a key's length
	MaxStateKeys       = 64        // keys of one id
	MaxStateValueBytes = 16 << 10  // one value
	MaxStateBytes      = 256 << 10 // keys and values of one id, together
	// MaxStateSubjects bounds the keys an id's state has used: set ones,
	// and deleted ones whose delete marker is still in the bucket (an
	// operator's `fencepost state ID --delete` purges the markers). With
	// the cursor, a batch that writes them all and one read of them all
	// stay within JetStream's 1,000 messages.
	MaxStateSubjects = 999
)

// ErrInvalidState wraps every refusal of a state key or size.
var ErrInvalidState = errors.New("invalid state")

// ValidateStateKey checks a state key: 1 to MaxStateKeyBytes bytes of
// A-Z, a-z, 0-9, '_' and '-'.
func ValidateStateKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: the key is empty; give 1 to %d characters of A-Z, a-z, 0-9, '_' and '-'", ErrInvalidState, MaxStateKeyBytes)
	}
	if len(key) > MaxStateKeyBytes {
		return fmt.Errorf("%w: the key %.20q... is %d bytes, the limit is %d", ErrInvalidState, key, len(key), MaxStateKeyBytes)
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' {
			continue
		}
		return fmt.Errorf("%w: the key %q has %q at byte %d; use only A-Z, a-z, 0-9, '_' and '-'", ErrInvalidState, key, c, i)
	}
	return nil
}

// ValidateStateValue checks the size of one value of key.
func ValidateStateValue(key string, value []byte) error {
	if len(value) > MaxStateValueBytes {
		return fmt.Errorf("%w: the value of %q is %d bytes, the limit is %d", ErrInvalidState, key, len(value), MaxStateValueBytes)
	}
	return nil
}

// StateSize is what one entry counts towards MaxStateBytes.
func StateSize(key string, value []byte) int { return len(key) + len(value) }

// StateKey is the bucket key of key in id's state. It does not validate.
func StateKey(id, key string) string { return StatePrefix + EncodeID(id) + "." + key }

// StateFilter matches the subjects of every key of id's state.
func StateFilter(world, id string) string {
	return KeySubject(world, StatePrefix+EncodeID(id)+".>")
}

// StateKeyOf is the state key of a subject of id's state in the world's
// bucket, and an error for any other subject or an invalid key.
func StateKeyOf(world, id, subject string) (string, error) {
	key, ok := strings.CutPrefix(subject, KeySubject(world, StatePrefix+EncodeID(id)+"."))
	if !ok {
		return "", fmt.Errorf("%w: %q is not a state subject of %q in world %q", ErrInvalidState, subject, id, world)
	}
	if err := ValidateStateKey(key); err != nil {
		return "", err
	}
	return key, nil
}
