package failover

import (
	"errors"
	"syscall"
)

// isRefused reports whether err is a refused or reset connection: a Redis
// that is down, as opposed to one that is slow.
func isRefused(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET)
}
