package ownership

// SetBeforeWrite installs a hook that runs between the read an operation
// decides on and its conditional write. Tests use it to make a race happen
// deterministically (a fault injection the real server cannot time for us).
func SetBeforeWrite(s *Store, fn func(op, id string)) { s.beforeWrite = fn }

// NodeReads is how many node lease records s read.
func NodeReads(s *Store) int64 { return s.nodeReads.Load() }
