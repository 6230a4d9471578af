package daemon

import (
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nkeys"
)

// SetRetireLate delays fencepostd's retire of lapsed node leases by d
// (see retireLate) until the test ends.
func SetRetireLate(t interface{ Cleanup(func()) }, d time.Duration) {
	retireLate = d
	t.Cleanup(func() { retireLate = 0 })
}

// SetWatchMisses makes the auditors' watches (each member's, in a
// cluster) skip the writes miss picks by key and value, as if the bucket
// had replaced each before the watch read it, until the test ends. It
// picks writes by what they are, not by their order, so that a write the
// watch really missed (a loaded machine) shifts nothing; it must not pick
// a key's last write, which the bucket keeps.
func SetWatchMisses(t interface{ Cleanup(func()) }, miss func(key string, value []byte) bool) {
	watchMisses.Store(&miss)
	t.Cleanup(func() { watchMisses.Store(nil) })
}

// SetBatchProbe makes fencepostd probe the bucket's batch slots every d
// until the test ends.
func SetBatchProbe(t interface{ Cleanup(func()) }, d time.Duration) {
	old := batchProbe
	batchProbe = d
	t.Cleanup(func() { batchProbe = old })
}

// SingleAccountForTest turns an --auth data dir (stopped) back into the
// layout of the single account of earlier versions: no producers' or owners'
// account, and every role file, node file and producer file issued by
// the store account (account.nk) for world w, as that version issued them.
func SingleAccountForTest(dataDir, w string) error {
	dir := authDir(dataDir)
	for _, a := range clientAccts {
		for _, f := range []string{a.seed, a.file} {
			if err := os.Remove(filepath.Join(dir, f)); err != nil {
				return err
			}
		}
	}
	if err := os.Remove(revocationsFile(dataDir)); err != nil && !os.IsNotExist(err) {
		return err
	}
	store, err := keyPair(filepath.Join(dir, storeAcct.seed), nil)
	if err != nil {
		return err
	}
	files, err := extraCredsFiles(dataDir)
	if err != nil {
		return err
	}
	for _, role := range Roles {
		files = append(files, CredsFile(dataDir, role))
	}
	for _, path := range files {
		c, err := ReadCreds(path)
		if err != nil {
			return err
		}
		is, err := describe(path, c.JWT, revocations{})
		if err != nil {
			return err
		}
		kp, err := nkeys.FromSeed(c.Seed)
		if err != nil {
			return err
		}
		role, name := is.Role, is.Name
		if is.Node != "" {
			role, name = RoleNodeOwner, is.Node
		}
		old, err := issueUser(store, kp, role, name, w, defaultPayload, time.Hour)
		if err != nil {
			return err
		}
		if err := writeCreds(path, old); err != nil {
			return err
		}
	}
	return nil
}
