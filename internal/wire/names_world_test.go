package wire_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/internal/wire"
)

// TestValidateWorld_ReportsTheCharacter: a refused world name names the
// character as typed (a rune, not the first byte of its UTF-8) and its
// byte offset; a byte that is not UTF-8 is named as a byte.
func TestValidateWorld_ReportsTheCharacter(t *testing.T) {
	for name, want := range map[string]string{
		"é":       `"é" has 'é' at byte 0;`,
		"ab日本":    `"ab日本" has '日' at byte 2;`,
		"a.b":     `"a.b" has '.' at byte 1;`,
		"x\xffy":  `"x\xffy" has the byte 0xff (not UTF-8) at byte 1;`,
		"a\uFFFD": "\"a\uFFFD\" has '\uFFFD' at byte 1;",
	} {
		err := wire.ValidateWorld(name)
		require.ErrorIs(t, err, wire.ErrInvalidWorld, name)
		require.Contains(t, err.Error(), want, name)
		require.NotContains(t, err.Error(), "Ã", name)
	}
}
