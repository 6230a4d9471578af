package main_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// TestCLI_Call: fencepost call against a running `work --exec` answers
// with the command's stdout (replied, exit 0; --json too); a command that
// fails every delivery gives failed with its error (exit 18) once the call
// is dead-lettered; an id nobody serves gives timeout (exit 17), the call
// stored and waiting; bad arguments are a usage error.
func TestCLI_Call(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{MaxDeliveries: 2})
	url, wn := env.URL, w.Name
	script := `b=$(cat); if [ "$b" = bad ]; then echo "no good" >&2; exit 3; fi; printf 'got:%s call=%s' "$b" "$FENCEPOST_CALL"`
	p := &workProc{cmd: exec.Command(bin, "work", "--node", "w1", "--ttl", "1s", "--ids", "a,b", "--exec", script), stderr: newSyncBuffer(), done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), "NATS_URL="+url, "FENCEPOST_WORLD="+wn)
	p.cmd.Stderr = p.stderr
	p.start(t)

	r := cli(t, url, wn, "call", "a", "hello", "--timeout", "30s")
	require.Equal(t, 0, r.code, "%+v\n%s", r, p.stderr.String())
	require.Regexp(t, `^replied seq=1 answer="got:hello call=1"\n$`, r.out)

	require.Equal(t, 0, cli(t, url, wn, "send", "a", "plain").code)
	r = cli(t, url, wn, "call", "a", "x", "--json", "--timeout", "30s")
	require.Equal(t, 0, r.code, "%+v", r)
	var out map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.out), &out))
	require.Equal(t, map[string]any{"outcome": "replied", "seq": 3.0, "duplicate": false, "answer": "got:x call=1"}, out)

	r = cli(t, url, wn, "call", "b", "bad", "--timeout", "30s")
	require.Equal(t, 18, r.code, "%+v", r)
	require.Regexp(t, `^failed seq=4 error=".*exit status 3"\n$`, r.out)

	r = cli(t, url, wn, "call", "c", "q", "--msg-id", "k1", "--timeout", "300ms")
	require.Equal(t, 17, r.code, "%+v", r)
	require.Equal(t, "timeout seq=6 posted\n", r.out, "seq 5 is the dead letter")
	require.Contains(t, r.err, `call again with the same message id "k1"`)
	r = cli(t, url, wn, "call", "c", "q", "--msg-id", "k1", "--timeout", "300ms", "--json")
	require.Equal(t, 17, r.code, "%+v", r)
	require.Regexp(t, regexp.MustCompile(`^\{"outcome":"timeout","seq":6,"posted":true,"duplicate":true,"error":".*"\}\n$`), r.out)
	r = cli(t, url, wn, "stat", "c")
	require.Regexp(t, `^stat depth=1 `, r.out, "the call waits in the mailbox")

	require.Equal(t, 2, cli(t, url, wn, "call", "a").code)
	require.Equal(t, 2, cli(t, url, wn, "call").code)
}
