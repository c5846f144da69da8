//go:build unix && !linux

package main

import "syscall"

// setParentDeathSignal does nothing where the kernel has no parent-death
// signal: a command whose lockctl is killed runs on, and its lock expires
// at its TTL.
func setParentDeathSignal(*syscall.SysProcAttr) {}
