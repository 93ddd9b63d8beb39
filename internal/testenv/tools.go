package testenv

import (
	"os"
	"os/exec"
	"testing"
)

// Tool returns the path of a program a test drives (redis-server,
// redis-sentinel, chromium), named as Debian's package pkg provides it.
// Where it is missing the test fails under TEST_REQUIRE_SERVICES=1 or CI,
// so CI cannot pass by not running it, and is skipped elsewhere, saying how
// to get the program: `go test ./...` passes on a machine with only Go.
func Tool(t testing.TB, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	if requireServices() || os.Getenv("CI") != "" {
		t.Fatalf("testenv: no %s on this machine (apt-get install -y %s), and TEST_REQUIRE_SERVICES or CI is set", name, pkg)
	}
	t.Skipf("testenv: no %s on this machine (apt-get install -y %s); test skipped", name, pkg)
	return ""
}
