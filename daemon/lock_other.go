//go:build !unix

package daemon

import "os"

// lockDataDir does nothing where flock is not available: run one
// fencepostd per data dir.
func lockDataDir(string) (func(), error) { return func() {}, nil }

// lockAuth does nothing where flock is not available: run one creds
// command at a time.
func lockAuth(dataDir string) (func(), error) {
	return func() {}, os.MkdirAll(authDir(dataDir), 0o700)
}
