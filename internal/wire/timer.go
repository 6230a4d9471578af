package wire

import (
	"errors"
	"fmt"
	"strings"
)

// Timers (docs/contract.md section 11; docs/wire.md "Timers"). A timer is
// a message that enters an id's mailbox at a time: the broker's message
// schedule (ADR-51, nats-server 2.12+) stored in the world's timer stream,
// one subject per timer, which the server publishes at its time to the
// id's fired subject in the same stream; the mailbox stream sources the
// fired subjects into the mailboxes.
//
// Why a stream of its own: a stream with message schedules may not
// discard new messages (the server refuses the setting: "message
// scheduling cannot use discard new"), and it must allow rollups, while
// the mailbox stream discards new ones per subject (a full mailbox
// refuses a post) and refuses rollups (a "Nats-Rollup: all" would wipe
// every mailbox). A schedule's target must be a subject of its own stream.
// So the schedules and their fired copies live in the timer stream, and
// the mailbox stream takes the fired copies in by sourcing, with the
// subject transform fp.<w>.tf.<eid> -> fp.<w>.mb.<eid>: from there on the
// message is stored as a post to the id's mailbox (a sharded world's
// input transform stores it under the id's shard).

// TimerStream is the name of the world's timer stream.
func TimerStream(world string) string { return "FP_TM_" + world }

// TimerSubject is the subject of id's timer key: the timer's identity.
// A new schedule on it replaces the pending one (the server rolls the
// subject up), a purge of it cancels it. It does not validate key.
func TimerSubject(world, id, key string) string {
	var buf [maxIDToken]byte
	return "fp." + world + ".tm." + string(encodeIDTo(&buf, id)) + "." + key
}

// TimerFilter matches every timer of a world.
func TimerFilter(world string) string { return "fp." + world + ".tm.*.*" }

// TimerIDFilter matches every timer of id.
func TimerIDFilter(world, id string) string { return "fp." + world + ".tm." + EncodeID(id) + ".*" }

// FiredSubject is where the server publishes id's timers when they fire
// (Nats-Schedule-Target), in the timer stream; the mailbox stream sources
// it into id's mailbox.
func FiredSubject(world, id string) string { return "fp." + world + ".tf." + EncodeID(id) }

// FiredFilter matches every fired subject of a world: the timer stream's
// subjects that the mailbox stream sources.
func FiredFilter(world string) string { return "fp." + world + ".tf.*" }

// FiredDestination is where the mailbox stream's source stores a fired
// timer: the mailbox of the fired subject's id.
func FiredDestination(world string) string { return "fp." + world + ".mb.{{wildcard(1)}}" }

// Headers of a timer (the broker's, ADR-51).
const (
	HeaderSchedule       = "Nats-Schedule"        // "@at <RFC 3339 time>"
	HeaderScheduleTarget = "Nats-Schedule-Target" // FiredSubject
	// HeaderScheduler is on a fired copy: the timer subject it came from.
	HeaderScheduler = "Nats-Scheduler"
	// HeaderStreamSource is on a message the mailbox stream sourced.
	HeaderStreamSource = "Nats-Stream-Source"
)

// ScheduleAt is the value of HeaderSchedule that fires at t: "@at" and
// t in UTC, RFC 3339 with nanoseconds. The server reads the fraction (Go's
// RFC 3339 parser takes it), so the timer fires at t, not at t cut to its
// second, which could be before t.
func ScheduleAt(t string) string { return "@at " + t }

// MaxTimerKeyBytes bounds a timer key.
const MaxTimerKeyBytes = 64

// ValidateTimerKey checks a timer key: 1 to 64 bytes of A-Z, a-z, 0-9,
// '-' and '_', not starting with '_' (those are fencepost's own: the keys
// it makes when none is given), so that it is one subject token.
func ValidateTimerKey(key string) error {
	if err := validateKeyChars(key); err != nil {
		return err
	}
	if key[0] == '_' {
		return fmt.Errorf("%w: timer key %q starts with '_', which fencepost's own keys do", ErrInvalidTimerKey, key)
	}
	return nil
}

// ValidateAnyTimerKey checks a timer key that names an existing timer:
// a given one (ValidateTimerKey) or one fencepost made (starting '_').
func ValidateAnyTimerKey(key string) error { return validateKeyChars(key) }

// validateKeyChars checks the length and alphabet of a timer key, own or
// given.
func validateKeyChars(key string) error {
	if key == "" || len(key) > MaxTimerKeyBytes {
		return fmt.Errorf("%w: timer key %q: give 1 to %d bytes", ErrInvalidTimerKey, key, MaxTimerKeyBytes)
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' {
			continue
		}
		return fmt.Errorf("%w: timer key %q has %q at byte %d; use only A-Z, a-z, 0-9, '-' and '_'", ErrInvalidTimerKey, key, c, i)
	}
	return nil
}

// ErrInvalidTimerKey: a timer key the layout does not take.
var ErrInvalidTimerKey = errors.New("invalid timer key")

// TimerOf is the id and key of a timer subject of world, and an error
// for any other subject (or a token that encodes no id, or a key that is
// not one).
func TimerOf(world, subject string) (id, key string, err error) {
	rest, ok := strings.CutPrefix(subject, "fp."+world+".tm.")
	var tok string
	if ok {
		tok, key, ok = strings.Cut(rest, ".")
	}
	if !ok {
		return "", "", fmt.Errorf("%w: %q is not a timer subject of world %q", ErrInvalidID, subject, world)
	}
	if err := validateKeyChars(key); err != nil {
		return "", "", err
	}
	id, err = DecodeID(tok)
	return id, key, err
}

// FiredOverhead is an upper bound of the header bytes a timer of id with
// key gains on its way into the mailbox, as the broker counts headers
// ("Name: value\r\n" each): the scheduler's Nats-Scheduler and
// Nats-Schedule-Next, and the source's Nats-Stream-Source (the timer
// stream's name, a sequence, the source's filter and destination, the
// fired subject and the stream's identity). A timer's own headers leave
// that much of max_headers free, so that the fired copy fits the
// mailbox: a copy the mailbox refused for its size would hold back every
// fired timer of the world (the source retries it).
func FiredOverhead(world, id, key string) int {
	scheduler := len(HeaderScheduler) + 2 + len(TimerSubject(world, id, key)) + 2
	next := len("Nats-Schedule-Next: purge\r\n")
	source := len(HeaderStreamSource) + 2 + len(TimerStream(world)) + 1 + 20 + 1 +
		len(FiredFilter(world)) + 1 + len(FiredDestination(world)) + 1 + len(FiredSubject(world, id)) + 1 + 64 + 2
	return scheduler + next + source
}

// ScheduleOverhead is an upper bound of the header bytes the schedule
// message of a timer of id carries besides the timer's own headers:
// Nats-Schedule, Nats-Schedule-Target, and the Nats-Rollup the server
// adds when it stores it.
func ScheduleOverhead(world, id string) int {
	at := len(HeaderSchedule) + 2 + len(ScheduleAt("2006-01-02T15:04:05.999999999Z")) + 2
	target := len(HeaderScheduleTarget) + 2 + len(FiredSubject(world, id)) + 2
	return at + target + len("Nats-Rollup: sub\r\n")
}

// TimerReserve is the header room a timer of id with key leaves free of
// max_headers: the larger of FiredOverhead and ScheduleOverhead, so that
// both the schedule and the fired copy fit.
func TimerReserve(world, id, key string) int {
	return max(FiredOverhead(world, id, key), ScheduleOverhead(world, id))
}
