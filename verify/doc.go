// Package verify runs fencepost against a user's own deployment and checks
// that it kept its promises there: `fencepost verify`.
//
// Run creates a scratch world with a name of its own (verify-<random>),
// starts owner processes (Config.OwnerCommand: the fencepost binary
// itself, in a hidden owner mode), runs producers, callers, a timer setter
// and ownership clients, injects the faults it can cause itself (SIGKILL
// and SIGSTOP of its own owners, forced seizes, connection cuts through a
// local TCP proxy), records the history (sends and calls with their
// outcomes, timers and their cancels, deliveries reported by the owners,
// commits read from the world's bucket stream, ownership operations),
// runs a final full drain, checks the history with testkit/history and
// the checks of calls and timers (checkct.go), writes it to a file (JSON
// lines) and removes its world, also when it fails or is interrupted. It
// touches no other world.
//
// Check re-checks a history file written by Run (ReadHistory).
package verify
