// Package timer administers a world's timers (docs/contract.md section
// 11; docs/wire.md "Timers"): it lists the pending ones (List), cancels
// one before it fires (Cancel), says how many are pending and whether
// fired ones wait to enter their mailboxes (Stat), and removes the fired
// copies the mailbox stream has taken in (Sweep).
//
// Timers are set by package queue: a send with queue.WithAt or
// queue.WithAfter, and queue.Queue.Remind for a holder's reminder fenced
// by its holding. Each is a broker message schedule on a subject of its
// own in the world's timer stream (its id and key); the server publishes
// it at its time into the same stream, and the mailbox stream sources it
// into the id's mailbox (world/timer.go).
package timer
