package testutil

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"
)

// UserCreds makes a user signed by account, lets set fill its claims
// (permissions, name) given its public key, and writes its NATS
// credentials file to a temporary directory. It returns the file's path
// and the user's public key.
func UserCreds(t testing.TB, account nkeys.KeyPair, set func(pub string, uc *jwt.UserClaims)) (path, pub string) {
	t.Helper()
	user, err := nkeys.CreateUser()
	require.NoError(t, err)
	pub, err = user.PublicKey()
	require.NoError(t, err)
	uc := jwt.NewUserClaims(pub)
	set(pub, uc)
	tok, err := uc.Encode(account)
	require.NoError(t, err)
	seed, err := user.Seed()
	require.NoError(t, err)
	file, err := jwt.FormatUserConfig(tok, seed)
	require.NoError(t, err)
	path = filepath.Join(t.TempDir(), "user.creds")
	require.NoError(t, os.WriteFile(path, file, 0o600))
	return path, pub
}
