package queue

import (
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// The broker's error answers to a post, and what each means for the
// message: the table "Limits and errors" of docs/wire.md, which
// TestAnswers_AsTheWireContractSays checks against this file.

// refusedCodes are the API errors that the broker answers before it
// stores a post, or instead of storing it: after each, nothing was
// stored. ErrCodeFull (10077) is here too, except for "store is closed"
// (storeClosedText).
var refusedCodes = map[jetstream.ErrorCode]bool{
	// Limits: the world's, the server's, the account's.
	ErrCodeFull:        true, // store failed: a full mailbox or world, a message too large to store
	errCodeMsgTooLarge: true, // over the stream's max_msg_size
	errCodeHdrTooLarge: true, // headers over 64 KiB, whatever max_msg_size allows
	10002:              true, // resource limits exceeded for account
	10023:              true, // insufficient resources (the server's)
	10047:              true, // insufficient storage resources available
	10120:              true, // no JetStream limit for the account
	10109:              true, // sealed stream: a reset of the world in progress
	// Reserved Nats- headers the broker acts on, which the Go client never
	// sends: expected stream, last sequence, last message id.
	10060: true, 10070: true, 10071: true, 10163: true, 10164: true, 10193: true,
	// Per-message TTL, rollup, counters, schedules, source.
	10165: true, 10166: true, 10111: true,
	10168: true, 10169: true, 10170: true, 10171: true, 10172: true,
	10188: true, 10189: true, 10190: true, 10191: true, 10192: true, 10203: true, 10212: true, 10223: true,
	10227: true,
	// Batches (Nats-Batch-*): an atomic batch is stored whole or not at all.
	10174: true, 10175: true, 10176: true, 10177: true, 10179: true, 10199: true, 10200: true, 10201: true,
	10205: true, 10206: true, 10207: true, 10208: true, 10210: true, 10211: true,
}

// The API errors of a post too large for the broker.
const (
	errCodeMsgTooLarge                     = jetstream.JSErrCodeStreamMessageExceedsMaximum // 10054
	errCodeHdrTooLarge jetstream.ErrorCode = 10097
)

// The descriptions of ErrCodeFull that are not refusals of a full
// mailbox: a record too large for the file store (refused), and a store
// that is closing (a restart, a stream leader stepping down: the other
// replicas of a replicated world may store the post, so unknown).
const (
	msgTooLargeText = "message too large"
	storeClosedText = "store is closed"
)

// NothingStored says whether apiErr, the broker's error answer to a
// publish into a mailbox, means that the broker stored nothing
// (docs/wire.md "Limits and errors"): a full mailbox or world, a message
// too large, a world being reset, a resource limit, a reserved header
// refused. It is false for every other answer, named or not: "duplicate
// message id is in process" (10158: a post with the same message id is
// being stored), "expected stream sequence does not match" (10063), a
// store that is closing, or an error this version does not know; their
// outcome is unknown, and a retry with the same message id is answered
// as a duplicate if the post was stored.
func NothingStored(apiErr *jetstream.APIError) bool {
	if apiErr.ErrorCode == ErrCodeFull && strings.Contains(apiErr.Description, storeClosedText) {
		return false
	}
	return refusedCodes[apiErr.ErrorCode]
}

// tooLarge: the broker refused the post for its size.
func tooLarge(apiErr *jetstream.APIError) bool {
	switch apiErr.ErrorCode {
	case errCodeMsgTooLarge, errCodeHdrTooLarge:
		return true
	case ErrCodeFull:
		return strings.Contains(apiErr.Description, msgTooLargeText)
	}
	return false
}
