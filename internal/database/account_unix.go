//go:build unix

package database

import (
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
)

// account is the unprivileged user the embedded server runs as when Sluice
// runs as root; nil when Sluice is not root and the server runs as Sluice's
// own user.
type account struct {
	name     string
	uid, gid uint32
}

// serverAccountName is the account used under root. "nobody" exists on every
// Unix-like system and owns nothing else, so giving it the cluster files
// grants it nothing it could misuse.
const serverAccountName = "nobody"

// serverAccount returns the account postgres must run as, checking that it
// can reach dataDir.
func serverAccount(dataDir string) (*account, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup(serverAccountName)
	if err != nil {
		return nil, fmt.Errorf("embedded postgres refuses to run as root and user %q does not exist to run it: create it, run the portal as a normal user, or set DATABASE_URL", serverAccountName)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("embedded postgres: user %q has a non-numeric uid or gid", serverAccountName)
	}
	a := &account{name: serverAccountName, uid: uint32(uid), gid: uint32(gid)}
	if err := a.checkReachable(dataDir); err != nil {
		return nil, err
	}
	// The data directory itself is root's and private; let the server pass
	// through it (search only, no listing) to its own cluster directory.
	if err := os.Chmod(dataDir, 0o711); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrDataDir, err)
	}
	return a, nil
}

// checkReachable verifies every parent of dir is searchable by the account,
// which otherwise fails deep inside postgres with "permission denied".
func (a *account) checkReachable(dir string) error {
	for p := filepath.Dir(dir); ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrDataDir, err)
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		mode := fi.Mode().Perm()
		searchable := mode&0o001 != 0 ||
			(ok && st.Uid == a.uid && mode&0o100 != 0) ||
			(ok && st.Gid == a.gid && mode&0o010 != 0)
		if !searchable {
			return fmt.Errorf("%w: running as root, the embedded postgres runs as user %q, which cannot enter %s (mode %v); choose a PORTAL_DATA_DIR outside it, e.g. /var/lib/sluice",
				ErrDataDir, a.name, p, mode)
		}
		if p == filepath.Dir(p) {
			return nil
		}
	}
}

// own gives the account the listed paths; a no-op when not root.
func (a *account) own(paths ...string) error {
	if a == nil {
		return nil
	}
	for _, p := range paths {
		if err := os.Chown(p, int(a.uid), int(a.gid)); err != nil {
			return fmt.Errorf("%w: give %s to user %s: %v", ErrDataDir, p, a.name, err)
		}
	}
	return nil
}

// sysProcAttr returns the process attributes that run a child as the
// account (or as ourselves when a is nil).
func (a *account) sysProcAttr() *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{}
	if a != nil {
		attr.Credential = &syscall.Credential{Uid: a.uid, Gid: a.gid, Groups: []uint32{}}
	}
	return attr
}
