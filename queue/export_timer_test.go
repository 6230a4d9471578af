package queue

// SetRemindStored makes Remind call f between its store and its second
// fence check, until the returned func is called.
func SetRemindStored(f func()) (undo func()) {
	remindStored = f
	return func() { remindStored = nil }
}
