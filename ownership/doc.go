// Package ownership implements the ownership operations of docs/contract.md
// section 2 -
// claim, owner, release, guard, renew and seize - on a world's KV bucket.
//
// Every change to a record is a conditional write on the record's revision
// (create when absent, compare-and-swap when present); a decision made from
// a read is only ever carried out by a write conditioned on that read. Every
// claim and seize writes epoch+1 in the same write that names the new
// holder, so epochs never repeat. Outcomes other than success are typed
// errors that match sentinel errors with errors.Is:
//
//	claim   -> *Lease | *HeldError (ErrHeld)
//	owner   -> Status (Held or not)
//	release -> nil | *NotOwnerError (ErrNotOwner) | *FreeError (ErrFree)
//	guard   -> Status | *FencedError (ErrFenced) | *FreeError (ErrFree)
//	renew   -> *Lease | *HeldError (ErrHeld) | *FreeError (ErrFree) | *BackedError (ErrBacked)
//	seize   -> *Lease | *FreeError (ErrFree) | *LiveError (ErrLive) | ErrContended
//
// A write whose reply was lost returns an *UnknownError (ErrUnknown): it may
// or may not have happened; read with Owner to find out.
//
// Leases that take care of themselves (docs/contract.md section 5): Keep renews a held
// lease at ttl/3 and self-fences (Keeper.Done, Keeper.Cause) when its
// authority is lost; OpenSession takes a node lease that backs every id
// claimed through it, so a node pays one renewal per period whatever it
// holds; Watch streams ownership changes. See docs/design.md section 4.
package ownership
