package daemon_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/daemon"
)

// TestAuth_SecurityDocMirrorsThePermissions: every subject of
// daemon.Permissions is in docs/security.md, in the section of each role
// that has it, so that the table and the page cannot drift apart.
func TestAuth_SecurityDocMirrorsThePermissions(t *testing.T) {
	b, err := os.ReadFile("../docs/security.md")
	require.NoError(t, err)
	doc := string(b)
	prod, rest, ok := strings.Cut(doc[strings.Index(doc, "### Producer"):], "### Owner")
	require.True(t, ok, "docs/security.md has a Producer and an Owner section")
	owner, _, _ := strings.Cut(rest, "\n## ")
	for _, g := range daemon.Permissions {
		for _, role := range g.Roles {
			section := map[string]string{daemon.RoleProducer: prod, daemon.RoleOwner: prod + owner, daemon.RoleNodeOwner: prod + owner}[role]
			require.Contains(t, section, "`"+g.Subject+"`", "%s of role %s is missing from docs/security.md", g.Subject, role)
		}
	}
}

// TestAuth_TrustModelNamesItsTests: every test docs/security.md's trust
// model names exists (in daemon, cmd/fencepostd, drain or ownership), and every attack test
// (TestAttack_*) is named there: the table and the attack suite match.
func TestAuth_TrustModelNamesItsTests(t *testing.T) {
	b, err := os.ReadFile("../docs/security.md")
	require.NoError(t, err)
	doc := string(b)
	start := strings.Index(doc, "## Trust model")
	require.GreaterOrEqual(t, start, 0)
	model, _, _ := strings.Cut(doc[start:], "### The attacks the roles were built against")
	named := map[string]bool{}
	for _, m := range regexp.MustCompile("`(Test[A-Za-z0-9_]*[A-Za-z0-9])`").FindAllStringSubmatch(model, -1) {
		named[m[1]] = true
	}
	defined := map[string]bool{}
	for _, glob := range []string{"*_test.go", "../cmd/fencepostd/*_test.go", "../drain/*_test.go", "../ownership/*_test.go"} {
		files, err := filepath.Glob(glob)
		require.NoError(t, err)
		for _, f := range files {
			src, err := os.ReadFile(f)
			require.NoError(t, err)
			for _, m := range regexp.MustCompile(`(?m)^func (Test[A-Za-z0-9_]+)\(`).FindAllStringSubmatch(string(src), -1) {
				defined[m[1]] = true
			}
		}
	}
	for name := range named {
		require.True(t, defined[name], "docs/security.md's trust model names %s, which does not exist", name)
	}
	for name := range defined {
		if strings.HasPrefix(name, "TestAttack_") {
			require.True(t, named[name], "%s is not in docs/security.md's trust model", name)
		}
	}
}
