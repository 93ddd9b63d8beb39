//go:build !linux

package database

import (
	"os"
	"syscall"
)

// setParentDeathSignal is Linux-only; elsewhere Stop must be called.
func setParentDeathSignal(*syscall.SysProcAttr) {}

// isPostgresProcess reports whether pid is alive; without /proc it cannot
// tell a postgres from an unrelated process, so it errs on the safe side.
func isPostgresProcess(pid int) bool {
	p, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	return p.Signal(syscall.Signal(0)) == nil
}
