package mailbox

// SetStatListMax sets the most subjects WorldStat lists, for the test's
// duration.
func SetStatListMax(t interface{ Cleanup(func()) }, n int) {
	old := statListMax
	statListMax = n
	t.Cleanup(func() { statListMax = old })
}
