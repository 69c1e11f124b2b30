// Package regfile opens the files sluice reads (the config file, the key
// files, the inbound keys file, the TLS pair, a cloud's credentials, the
// record file) only if they are regular files. Opening a named pipe waits
// for a writer and reading a device may never end: one at a path sluice
// reads, at start or on a reload (SIGHUP), would hold sluice there with no
// word in its log, and a reload so held would hold up its shutdown too.
// The open itself does not wait (O_NONBLOCK where the system has it), and
// anything but a regular file, through any symlinks (as mounted secrets
// are), is refused with an error that names what it is.
package regfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// ErrNotRegular is the error (under errors.Is) for a path that is not a
// regular file.
var ErrNotRegular = errors.New("not a regular file")

// Open opens path for reading if it is a regular file.
func Open(path string) (*os.File, error) { return OpenFile(path, os.O_RDONLY, 0) }

// OpenFile is os.OpenFile for a regular file: a path that names anything
// else (a named pipe, a device, a socket, a directory) is refused, without
// waiting, and with the open's O_CREATE a file is created as usual.
func OpenFile(path string, flag int, perm os.FileMode) (*os.File, error) {
	f, err := os.OpenFile(path, flag|nonBlock, perm)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, &fs.PathError{Op: "open", Path: path, Err: fmt.Errorf("%w (%s): sluice reads only regular files", ErrNotRegular, kind(fi.Mode()))}
	}
	return f, nil
}

// ReadFile reads the regular file at path whole; one larger than limit
// bytes is an error (limit < 0: no bound).
func ReadFile(path string, limit int64) ([]byte, error) {
	f, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := io.Reader(f)
	if limit >= 0 {
		r = io.LimitReader(f, limit+1)
	}
	b, err := io.ReadAll(r)
	if err == nil && limit >= 0 && int64(len(b)) > limit {
		return nil, &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("larger than %d bytes", limit)}
	}
	return b, err
}

// kind names a file's type for the error.
func kind(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m.IsDir():
		return "a directory"
	}
	return "type " + m.Type().String()
}
