// Package bytesize reads and writes sizes in bytes as flags and
// configuration give them: 512MiB, 2GiB, Kubernetes' 64Mi. It imports
// nothing of the project, so that the Packer plugin can check a size
// without linking the policy engine.
package bytesize

import (
	"fmt"
	"strconv"
	"strings"
)

var sizeUnits = []struct {
	suffix string
	shift  uint
}{{"GiB", 30}, {"MiB", 20}, {"KiB", 10}, {"Gi", 30}, {"Mi", 20}, {"Ki", 10}, {"B", 0}}

// Parse reads a size in bytes: a whole number, alone or followed by
// B, KiB, MiB or GiB (Kubernetes' Ki, Mi and Gi too).
func Parse(s string) (uint64, error) {
	num, shift := s, uint(0)
	for _, u := range sizeUnits {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			num, shift = n, u.shift
			break
		}
	}
	n, err := strconv.ParseUint(num, 10, 64)
	if err != nil || num != strings.TrimSpace(num) || n > (1<<63)>>shift {
		return 0, fmt.Errorf("size %q: want a whole number of bytes, KiB, MiB or GiB (e.g. 512MiB)", s)
	}
	return n << shift, nil
}

// Format writes n bytes in the largest unit Parse reads that
// divides it.
func Format(n uint64) string {
	for _, u := range sizeUnits[:3] {
		if n != 0 && n%(1<<u.shift) == 0 {
			return strconv.FormatUint(n>>u.shift, 10) + u.suffix
		}
	}
	return strconv.FormatUint(n, 10) + "B"
}
