//go:build unix

package regfile

import "syscall"

// nonBlock makes the open of a named pipe return at once rather than wait
// for a writer; on a regular file it changes nothing.
const nonBlock = syscall.O_NONBLOCK
