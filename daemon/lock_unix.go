//go:build unix

package daemon

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ErrDataDirInUse: another fencepostd runs on the same --data-dir.
var ErrDataDirInUse = errors.New("fencepostd: data dir in use")

// lockFileName is the lock of a data dir, holding the owner's pid.
const lockFileName = "fencepostd.lock"

// lockDataDir takes an exclusive lock on dir (flock on dir/fencepostd.lock,
// which the kernel drops when the process dies, however it dies) and
// writes this process's pid and start time into it. A second fencepostd
// on the same store would corrupt it: JetStream's file store does not
// lock itself. It fails at once with ErrDataDirInUse, naming the pid that
// holds it.
func lockDataDir(dir string) (release func(), err error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("fencepostd: data dir %s: %w", dir, err)
	}
	path := filepath.Join(dir, lockFileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("fencepostd: lock data dir: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			abs, _ := filepath.Abs(dir)
			return nil, fmt.Errorf("%w: %s is used by another fencepostd (%s); stop it, or give this one another --data-dir", ErrDataDirInUse, abs, strings.TrimSpace(string(holder)))
		}
		return nil, fmt.Errorf("fencepostd: lock data dir %s: %w", dir, err)
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte("pid "+strconv.Itoa(os.Getpid())+", since "+time.Now().UTC().Format(time.RFC3339)+"\n"), 0)
	return func() { f.Close() }, nil // closing drops the lock
}

// lockAuth serialises the creds commands and fencepostd's start on the
// data dir's auth directory (flock, dropped when the process dies).
func lockAuth(dataDir string) (unlock func(), err error) {
	dir := authDir(dataDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}
