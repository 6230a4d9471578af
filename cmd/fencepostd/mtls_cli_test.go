package main_test

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/server/servertest"
	"github.com/fencepost/fencepost/testkit/testutil"
)

// TestDaemon_MutualTLSWithTheCLI runs fencepostd with a nats-server config
// file that requires mutual TLS, and the real `fencepost` CLI with
// --tlscert, --tlskey and --tlsca: with the client certificate it posts,
// claims and drains; without one, or without the CA, it is refused.
func TestDaemon_MutualTLSWithTheCLI(t *testing.T) {
	cli := buildCLI(t)
	dir := t.TempDir()
	p := testutil.WritePKI(t, dir)
	port := freePort(t)
	d := startProc(t, "fencepostd", "--nats-config", p.MTLSConf(t, dir), "--port", fmt.Sprint(port), "--http-port", "0", "--data", t.TempDir(), "--log-level", "warn")
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	run := func(args ...string) (int, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, cli, append(args, "--server", url, "--timeout", "2s")...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		_ = cmd.Run()
		t.Logf("fencepost %s: exit %d: %s", strings.Join(args, " "), cmd.ProcessState.ExitCode(), strings.TrimSpace(out.String()))
		return cmd.ProcessState.ExitCode(), out.String()
	}
	mtls := []string{"--tlscert", p.ClientCert, "--tlskey", p.ClientKey, "--tlsca", p.CA}
	servertest.CheckFor(t, 20*time.Second, 100*time.Millisecond, func() error {
		if code, out := run(append([]string{"send", "order-1", "hello"}, mtls...)...); code != 0 {
			return fmt.Errorf("send: exit %d: %s", code, out)
		}
		return nil
	})
	code, out := run(append([]string{"claim", "order-1", "--node", "n1"}, mtls...)...)
	require.Zero(t, code, out)
	require.True(t, strings.HasPrefix(out, "claimed epoch=1"), out)
	code, out = run(append([]string{"drain", "order-1", "--node", "n1", "--epoch", "1"}, mtls...)...)
	require.Zero(t, code, out)
	require.Contains(t, out, "body=hello")
	require.Contains(t, out, "done count=1")

	code, out = run("send", "order-1", "x", "--tlsca", p.CA)
	require.NotZero(t, code, "no client certificate: %s", out)
	require.Contains(t, out, "tls") // the alert, or the connection closed after it (TLS 1.3)
	code, out = run("send", "order-1", "x", "--tlscert", p.ClientCert, "--tlskey", p.ClientKey)
	require.NotZero(t, code, "the server's CA not given: %s", out)
	require.Contains(t, out, "certificate")
	code, out = run("send", "order-1", "x")
	require.NotZero(t, code, "neither: %s", out)
	code, out = run(append([]string{"stat", "order-1"}, mtls...)...)
	require.Zero(t, code, out)
	require.Contains(t, out, "depth=0", "the refused sends posted nothing")
	require.Zero(t, d.stop(t, syscall.SIGTERM))
}
