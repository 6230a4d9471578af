package testkit_test

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestMakeFuzzListsEveryTarget: `make fuzz` (docs/fuzzing.md) runs every
// fuzz target of the repository, each from the package that has it. Its
// list is written by hand, and a target named in the wrong package is
// fuzzed by nobody without an error: go test -fuzz in a package where the
// name matches nothing passes. Two targets moved out of drain with issue
// 13's moves and stayed listed there until 3 Dec, and three were never
// listed.
func TestMakeFuzzListsEveryTarget(t *testing.T) {
	root, err := filepath.Abs("..")
	require.NoError(t, err)

	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	require.NoError(t, err)
	m := regexp.MustCompile(`(?s)FUZZ_TARGETS :=(.*?)\n\n`).FindSubmatch(mk)
	require.NotNil(t, m, "no FUZZ_TARGETS list in the Makefile")
	listed := strings.Fields(strings.ReplaceAll(string(m[1]), "\\", " "))

	fuzzFunc := regexp.MustCompile(`^func (Fuzz\w+)\(`)
	var found []string
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		pkg, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if m := fuzzFunc.FindStringSubmatch(sc.Text()); m != nil {
				found = append(found, filepath.ToSlash(pkg)+":"+m[1])
			}
		}
		return sc.Err()
	})
	require.NoError(t, err)
	require.NotEmpty(t, found)

	for _, f := range found {
		if !slices.Contains(listed, f) {
			t.Errorf("fuzz target %s is not in the Makefile's FUZZ_TARGETS", f)
		}
	}
	for _, l := range listed {
		if !slices.Contains(found, l) {
			t.Errorf("the Makefile's FUZZ_TARGETS names %s, which no test file of that package has", l)
		}
	}
}
