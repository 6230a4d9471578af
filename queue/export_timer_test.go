package queue

// SetRemindIntent makes Remind call f between its intent's write and its
// materialisation, until the returned func is called; f returning true
// makes Remind return there, as a process that stopped would.
func SetRemindIntent(f func() (stop bool)) (undo func()) {
	remindIntent = f
	return func() { remindIntent = nil }
}

// SetRemindWrite makes Remind call f right before it writes, until the
// returned func is called.
func SetRemindWrite(f func()) (undo func()) {
	remindWrite = f
	return func() { remindWrite = nil }
}

// SetRemindScheduled makes a materialisation call f between its schedule
// and its delete of the intent, until the returned func is called; f
// returning true makes it return there, as a process that stopped would.
func SetRemindScheduled(f func() (stop bool)) (undo func()) {
	remindScheduled = f
	return func() { remindScheduled = nil }
}
