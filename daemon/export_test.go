package daemon

import "time"

// SetRetireLate delays fencepostd's retire of lapsed node leases by d
// (see retireLate) until the test ends.
func SetRetireLate(t interface{ Cleanup(func()) }, d time.Duration) {
	retireLate = d
	t.Cleanup(func() { retireLate = 0 })
}
