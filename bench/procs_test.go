package bench

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
)

// TestStrike_VictimThatExitedOnItsOwn: a fault's victim that exited on its
// own after it was picked (a self-fence) is skipped once exited has
// replaced it (it is gone from the set), and struck, not an error, when
// it is still in the set though its process is done: the run goes on
// either way (it used to stop on "process already finished").
func TestStrike_VictimThatExitedOnItsOwn(t *testing.T) {
	done := func() *proc {
		cmd := exec.Command(os.Args[0], "-test.run=^$") // this test binary, running no test
		if err := cmd.Run(); err != nil {
			t.Fatal(err)
		}
		return &proc{node: "owner-1", cmd: cmd}
	}
	ps := &procSet{procs: map[string]*proc{}}
	p := done()
	struck, err := ps.strike(p, syscall.SIGKILL)
	if err != nil || struck || p.planned.Load() {
		t.Fatalf("replaced already: struck %v, err %v, planned %v; want skipped, unmarked", struck, err, p.planned.Load())
	}
	ps.procs[p.node] = p
	struck, err = ps.strike(p, syscall.SIGKILL)
	if err != nil || !struck || !p.planned.Load() {
		t.Fatalf("still in the set: struck %v, err %v, planned %v; want struck, marked", struck, err, p.planned.Load())
	}
}
