// Package buildinfo says which version of fencepost a binary was built
// from, for the --version of fencepost and fencepostd.
package buildinfo

import "runtime/debug"

// Version is the module's version this binary was built from, as Go
// recorded it (a tag, or a pseudo-version from the VCS), else "devel",
// with the commit when Go recorded one ("devel (0123456789ab, modified)").
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	if bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value[:min(len(s.Value), 12)]
		case "vcs.modified":
			if s.Value == "true" {
				modified = ", modified"
			}
		}
	}
	if rev == "" {
		return "devel"
	}
	return "devel (" + rev + modified + ")"
}
