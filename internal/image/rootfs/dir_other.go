//go:build !linux

package rootfs

import (
	"errors"
	"io/fs"
)

// dirFDs is the openat2 implementation of Dir, which only Linux has.
type dirFDs struct{}

var errNoOpenat2 = errors.New("openat2 is Linux only")

func openFDs(string) (*dirFDs, error) { return nil, errNoOpenat2 }

func (*dirFDs) close()                                {}
func (*dirFDs) open(string) (fs.File, error)          { return nil, errNoOpenat2 }
func (*dirFDs) readDir(string) ([]fs.DirEntry, error) { return nil, errNoOpenat2 }
func (*dirFDs) readFile(string) ([]byte, error)       { return nil, errNoOpenat2 }
func (*dirFDs) lstat(string) (fs.FileInfo, error)     { return nil, errNoOpenat2 }
func (*dirFDs) readLink(string) (string, error)       { return "", errNoOpenat2 }
