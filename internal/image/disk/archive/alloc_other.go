//go:build !linux

package archive

import "io/fs"

// allocated is the space a file takes on disk (its size, where holes are
// not reported).
func allocated(fi fs.FileInfo) int64 { return fi.Size() }
