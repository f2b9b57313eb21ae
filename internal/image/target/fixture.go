//go:build !amilint_guest

package target

import (
	"fmt"
	"strings"

	"github.com/amilint/amilint/fixtures"
	"github.com/amilint/amilint/internal/image/rootfs"
)

// openFixture opens spec ("fixture:NAME") as an in-memory image. It is
// read-only (Dir is empty), so fix refuses it; use fixtures.Materialize for
// a writable copy.
func openFixture(spec string) (*Image, bool, error) {
	name, ok := strings.CutPrefix(spec, FixturePrefix)
	if !ok {
		return nil, false, nil
	}
	src, err := fixtures.Source(name)
	if err != nil {
		return nil, true, fmt.Errorf("open target %s: %w", spec, err)
	}
	return &Image{Name: spec, Kind: "fixture", FS: rootfs.New(src)}, true, nil
}
