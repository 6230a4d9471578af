package wire

// Headers a dead letter carries besides the original's Fencepost-From and
// the sender's own headers (docs/wire.md "Dead letters"). A drain writes
// them when a message runs out of deliveries, fencepostd's purger when it
// moves an unroutable message aside, and the mailbox administration reads
// them back.
const (
	HeaderDeadSeq        = "Fencepost-Dead-Seq"        // the message's mailbox sequence
	HeaderDeadPosted     = "Fencepost-Dead-Posted"     // its posting time, RFC 3339
	HeaderDeadDeliveries = "Fencepost-Dead-Deliveries" // deliveries made
	HeaderDeadError      = "Fencepost-Dead-Error"      // the last handler error
	HeaderDeadNode       = "Fencepost-Dead-Node"       // the holder that gave up
	HeaderDeadEpoch      = "Fencepost-Dead-Epoch"      // and its epoch
	HeaderDeadBody       = "Fencepost-Dead-Body"       // the body part's sequence, if stored in two parts
	HeaderDeadSubject    = "Fencepost-Dead-Subject"    // an unroutable message's subject
	// HeaderDeadPart marks a body part (PartSubject) with the mailbox
	// sequence of its message, when it fits: a dead-lettering tried again
	// takes up the part it stored before instead of storing another.
	HeaderDeadPart = "Fencepost-Dead-Part"
)
