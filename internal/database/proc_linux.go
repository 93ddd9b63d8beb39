package database

import (
	"os"
	"strconv"
	"strings"
	"syscall"
)

// setParentDeathSignal asks Linux to send the server SIGINT (fast shutdown)
// when Sluice dies, even by SIGKILL, so no orphaned postgres keeps the data
// directory locked.
func setParentDeathSignal(attr *syscall.SysProcAttr) {
	attr.Pdeathsig = syscall.SIGINT
}

// isPostgresProcess reports whether pid is a running postgres server.
func isPostgresProcess(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	if err != nil {
		return false
	}
	return strings.TrimSpace(string(b)) == "postgres"
}
