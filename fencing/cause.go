package fencing

// Cause says why a holder stopped acting: the self-fence causes of
// docs/contract.md section 5. It is an error so that it can close a lease's Done channel and
// travel through errors.Is.
type Cause string

// The self-fence causes.
const (
	// CauseWatchdog: the lease ran out before a renewal was confirmed.
	CauseWatchdog Cause = "lease_watchdog_fence"
	// CauseRecordMissing: the ownership record is gone.
	CauseRecordMissing Cause = "lease_record_missing_fence"
	// CauseRecordMismatch: another writer replaced the record. The author
	// cannot be proven, so none is named.
	CauseRecordMismatch Cause = "lease_record_mismatch_fence"
)

func (c Cause) Error() string { return "fencing: self-fence: " + string(c) }
