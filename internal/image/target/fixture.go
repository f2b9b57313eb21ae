package target

import (
	"fmt"
	"strings"

	"github.com/amilint/amilint/fixtures"
	"github.com/amilint/amilint/internal/image/rootfs"
)

// FixturePrefix marks a target that names an embedded fixture tree, as in
// "fixture:dlami".
const FixturePrefix = "fixture:"

// DefaultTarget is what the CLI audits when the user gives no target: the
// DLAMI-like fixture whose ecs.service is the incident of INCIDENT.md.
const DefaultTarget = FixturePrefix + fixtures.Default

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
