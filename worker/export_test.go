package worker

// Unread is Worker.unread.
func Unread(wk *Worker, id string) bool { return wk.unread(id) }

// Scans says how many scans wk made, and how many of them a miss asked for.
func Scans(wk *Worker) (all, afterMiss int64) { return wk.scans.Load(), wk.scansAfterMiss.Load() }

// MarkMissed notes a missed candidate, as a full candidate channel does.
func MarkMissed(wk *Worker) { wk.missed.Store(true) }
