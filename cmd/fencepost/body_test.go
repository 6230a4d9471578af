package main_test

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// TestCLI_DrainJSON_BinaryBody: a body that is not valid UTF-8 comes out
// of drain --json whole, as body_b64 beside the lossy body text; a text
// body has no body_b64 (docs/contract.md section 6's fields, extended).
func TestCLI_DrainJSON_BinaryBody(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{MinTTL: time.Second})
	ctx := testutil.Ctx(t, time.Minute)
	binary := []byte("a\xff\x00b")
	_, err := w.Send(ctx, "bin", binary)
	require.NoError(t, err)
	_, err = w.Send(ctx, "bin", []byte("plain"))
	require.NoError(t, err)
	require.Equal(t, 0, cli(t, env.URL, w.Name, "claim", "bin", "--node", "n1").code)
	r := cli(t, env.URL, w.Name, "drain", "bin", "--node", "n1", "--epoch", "1", "--json")
	require.Equal(t, 0, r.code, r.err)
	lines := strings.Split(strings.TrimSpace(r.out), "\n")
	require.Len(t, lines, 3)
	var first, second map[string]any
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &first))
	require.NoError(t, json.Unmarshal([]byte(lines[1]), &second))
	got, err := base64.StdEncoding.DecodeString(first["body_b64"].(string))
	require.NoError(t, err)
	require.Equal(t, binary, got, "body_b64 is the exact body")
	require.Equal(t, "plain", second["body"])
	require.NotContains(t, second, "body_b64")
}
