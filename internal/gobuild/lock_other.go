//go:build !unix

package gobuild

func lock() (unlock func()) { return func() {} }
