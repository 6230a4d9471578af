package daemon_test

import (
	"os"
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
