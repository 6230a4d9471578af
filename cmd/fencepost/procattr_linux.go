package main

import "syscall"

// handlerProcAttr puts a --exec handler in a process group of its own
// (stopGroup signals the whole group) and has the kernel kill its shell
// if the worker dies without stopping it (SIGKILL of the worker: nothing
// of ours runs to signal the group), so that no handler runs on after its
// worker.
func handlerProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
