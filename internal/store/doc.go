// Package store holds what delivery (drain), mailbox administration
// (mailbox) and fencepostd's purger (purge) share of a world's stored
// per-id data, so that each exists once: the read of an id's cursor
// (ReadCursor), the read of its state and the fenced batch that stores
// state writes with a cursor (LoadState, StateMsgs, PublishCommit), the
// once-only write of a dead letter (WriteDead), and the small helpers
// they all use (Clip, CloneHeader, WrongLastSequence, Parallel, Sleep).
//
// It sits above queue and world and below drain, mailbox and purge, none
// of which imports another. The names it reads and writes are
// internal/wire's.
package store
