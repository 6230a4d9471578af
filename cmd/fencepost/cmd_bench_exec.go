//go:build !bench

package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// benchBinary is the CLI built with the benchmark harness (-tags bench).
const benchBinary = "fencepost-bench"

func init() {
	benchExec = runBenchBinary
	register("bench", &command{
		usage: "bench [--scenario S] [--size smoke|full] ... (runs " + benchBinary + ")",
		short: "the benchmark harness, beside raw JetStream; in the " + benchBinary + " binary, which links an embedded server",
		examples: []string{
			"fencepost bench --scenario takeover --size smoke   # runs " + benchBinary + " bench ...: fencepost beside raw JetStream",
			"fencepost bench --help                              # the harness's flags (" + benchBinary + ")",
		},
	})
}

// runBenchBinary runs `fencepost-bench bench ...` (next to this executable,
// else on PATH) with this process's standard streams and returns its exit
// code. The client CLI does not link nats-server; the harness does.
func runBenchBinary(argv []string) int {
	path, err := findBenchBinary()
	if err != nil {
		fmt.Fprintf(os.Stderr, "error: fencepost bench: %v\n"+
			"This fencepost is built without the benchmark harness (it links an embedded nats-server).\n"+
			"Build it beside this binary: go build -tags bench -o %s ./cmd/fencepost (make build does),\n"+
			"or run it from the source: go run -tags bench ./cmd/fencepost bench ...\n",
			err, filepath.Join(filepath.Dir(self()), benchBinary))
		return exitError
	}
	cmd := exec.Command(path, argv...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	err = cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee) && ee.ExitCode() >= 0:
		return ee.ExitCode()
	case err != nil:
		fmt.Fprintf(os.Stderr, "error: fencepost bench: %v\n", err)
		return exitError
	}
	return exitOK
}

func findBenchBinary() (string, error) {
	if p := filepath.Join(filepath.Dir(self()), benchBinary); isExecutable(p) {
		return p, nil
	}
	return exec.LookPath(benchBinary)
}

func self() string {
	p, err := os.Executable()
	if err != nil {
		return benchBinary
	}
	return p
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}
