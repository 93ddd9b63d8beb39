//go:build !unix

package database

import (
	"errors"
	"syscall"
)

type account struct{}

func serverAccount(string) (*account, error) {
	return nil, errors.New("embedded postgres needs a Unix-like system; set DATABASE_URL")
}

func (a *account) own(...string) error { return nil }

func (a *account) sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }
