package worker

// Unread is Worker.unread.
func Unread(wk *Worker, id string) bool { return wk.unread(id) }
