//go:build !linux

package main

import "syscall"

// handlerProcAttr puts a --exec handler in a process group of its own
// (stopGroup signals the whole group). Without Linux's parent-death
// signal, a handler whose worker was SIGKILLed runs to its end.
func handlerProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
