package ownership

// SetBeforeWrite installs a hook that runs between the read an operation
// decides on and its conditional write. Tests use it to make a race happen
// deterministically (a fault injection the real server cannot time for us).
func SetBeforeWrite(s *Store, fn func(op, id string)) { s.beforeWrite = fn }

// NodeReads is how many node lease records s read.
func NodeReads(s *Store) int64 { return s.nodeReads.Load() }

// WriteTwice makes s send each record write once more before the real one,
// as a client that resent a publish whose first answer it lost: the first
// is stored, the real one refused (a fault the real server cannot time).
func WriteTwice(s *Store) { s.writeTwice = true }

// Barriers is how many read barriers s sent (confirm).
func Barriers(s *Store) int64 { return s.barriers.Load() }

// SetBeforeConfirm installs a hook that runs between a read and the
// barrier that confirms it, on a replicated world: a test writes the
// record there to make the barrier find it moved.
func SetBeforeConfirm(s *Store, fn func(id string)) { s.beforeConfirm = fn }
