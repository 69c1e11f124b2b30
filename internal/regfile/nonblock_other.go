//go:build !unix

package regfile

// nonBlock: elsewhere the type is checked once the file is open.
const nonBlock = 0
