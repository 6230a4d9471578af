// Package fencing defines the fence: the value that proves, inside a write
// the broker checks, that its author still holds an id's ownership.
//
// A Fence names an id's ownership record and the record's revision when the
// holder last read or wrote it. A write that carries the fence's expectation
// (Expect) is stored by JetStream only if the record is still at that
// revision, checked by the stream leader in the same write. Clocks play no
// part in that decision. A handler passes the fence on to anything it writes
// into the same world's bucket stream; for writes elsewhere, Epoch is the
// token to compare (it never repeats for an id).
package fencing
