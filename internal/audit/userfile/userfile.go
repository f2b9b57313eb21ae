// Package userfile reads the files a user names on the command line —
// policies, --data files, waivers, a security policy, reports to roll up —
// whole, up to a bound. Such a path can name anything: a report uploaded by
// a host, a device, a file of gigabytes. Past the bound the read stops with
// a clear error, instead of growing the process until the kernel kills it.
package userfile

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/amilint/amilint/internal/audit/bytesize"
)

// Max is the most a file a user names may hold: 64 MiB, some hundred times
// the largest report, policy or waivers file amilint's tests read.
const Max = 64 << 20

// ErrTooLarge is returned for a file over Max bytes.
var ErrTooLarge = errors.New("file too large")

// limit is Max, lowered by tests.
var limit int64 = Max

// Read reads the file name whole, or fails with ErrTooLarge having read
// one byte past the bound at most.
func Read(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, &os.PathError{Op: "read", Path: name, Err: fmt.Errorf("%w: over %s", ErrTooLarge, bytesize.Format(uint64(limit)))}
	}
	return b, nil
}
