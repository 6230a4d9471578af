package worker

// ForceFeedAsData makes a worker of a replicated world take its consumer's
// messages as data (Deliver, Start, the sweep), as single-replica worlds
// do: the investigation of the cluster losses (docs/design.md 3.10,
// "Replicated worlds") runs the pipeline path on a cluster with it.
func ForceFeedAsData(wk *Worker) {
	wk.feedIsData = true
	if wk.ids == nil {
		wk.sweep = wk.dr.NewSweeper()
	}
	wk.kept = newKept(wk.sweep != nil)
}

// Unread is Worker.unread.
func Unread(wk *Worker, id string) bool { return wk.unread(id) }
