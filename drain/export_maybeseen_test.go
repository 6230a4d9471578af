package drain

// ResumeLockRenewal undoes PauseLockRenewal.
func ResumeLockRenewal(d *Drainer) { d.noRenew = false }
