package inbox_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/internal/inbox"
	"github.com/fencepost/fencepost/testkit/testutil"
)

// TestFromJWT: the prefix is the one "_INBOX...>" subscribe permission of
// a user confined to it, and "" for a user that may use the default inbox.
func TestFromJWT(t *testing.T) {
	acc, err := nkeys.CreateAccount()
	require.NoError(t, err)
	user, err := nkeys.CreateUser()
	require.NoError(t, err)
	pub, err := user.PublicKey()
	require.NoError(t, err)
	for _, tc := range []struct {
		name  string
		allow []string
		want  string
	}{
		{"fencepostd's producer", []string{inbox.ForUser(pub) + ".>"}, inbox.ForUser(pub)},
		{"no subscribe permissions", nil, ""},
		{"everything", []string{">"}, ""},
		{"the default inbox", []string{"_INBOX.>", inbox.ForUser(pub) + ".>"}, ""},
		{"two prefixes", []string{"_INBOX_a.>", "_INBOX_b.>"}, ""},
		{"another prefix", []string{"foo.>", "_INBOX_app.>"}, "_INBOX_app"},
		{"a wildcard in the prefix", []string{"_INBOX.*.>"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			uc := jwt.NewUserClaims(pub)
			uc.Sub.Allow.Add(tc.allow...)
			tok, err := uc.Encode(acc)
			require.NoError(t, err)
			got, err := inbox.FromJWT(tok)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
	_, err = inbox.FromJWT("not a jwt")
	require.Error(t, err)
}

// TestFromCredsFile: the prefix of the user in a credentials file; a file
// that is missing or holds no user JWT is an error that names it.
func TestFromCredsFile(t *testing.T) {
	acc, err := nkeys.CreateAccount()
	require.NoError(t, err)
	good, pub := testutil.UserCreds(t, acc, func(pub string, uc *jwt.UserClaims) {
		uc.Sub.Allow.Add(inbox.ForUser(pub) + ".>")
	})
	got, err := inbox.FromCredsFile(good)
	require.NoError(t, err)
	require.Equal(t, inbox.ForUser(pub), got)

	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.creds")
	require.NoError(t, os.WriteFile(garbage, []byte("not a credentials file"), 0o600))
	for _, path := range []string{garbage, filepath.Join(dir, "missing.creds")} {
		_, err := inbox.FromCredsFile(path)
		require.ErrorContains(t, err, path)
	}
}
