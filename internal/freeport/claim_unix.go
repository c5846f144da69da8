//go:build unix

package freeport

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// claim takes port's lock file without waiting: ok is false when another
// process holds it. The lock goes with the process, however it ends.
func claim(port int) (f *os.File, ok bool, err error) {
	d, err := dir()
	if err != nil {
		return nil, false, err
	}
	f, err = os.OpenFile(filepath.Join(d, strconv.Itoa(port)), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, false, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, false, nil
		}
		return nil, false, err
	}
	return f, true, nil
}

// release gives a claim up.
func release(f *os.File) { f.Close() }
