package queue

// Outcome is what Send returns for a publish that failed with err (the
// queue's refusal), for the tests.
func Outcome(err error) error { return (&Queue{world: "w"}).refusal("x", "k", err) }
