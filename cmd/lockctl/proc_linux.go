package main

import "syscall"

// setParentDeathSignal has the kernel send the command SIGTERM should
// lockctl die first (killed with SIGKILL, say), as nothing would then
// refresh the lock: the command must not go on unprotected. SIGTERM rather
// than SIGKILL leaves it time to clean up within what is left of the TTL.
func setParentDeathSignal(attr *syscall.SysProcAttr) {
	attr.Pdeathsig = syscall.SIGTERM
}
