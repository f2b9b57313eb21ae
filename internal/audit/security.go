package audit

import (
	"errors"
	"fmt"
	"strings"

	"github.com/amilint/amilint/internal/image/rootfs"
	"github.com/amilint/amilint/internal/systemd/boot"
	"github.com/amilint/amilint/internal/systemd/security"
	"github.com/amilint/amilint/internal/systemd/unit"
)

// assess scores every service of the inventory (instances included,
// templates and masked units not) as `systemd-analyze security
// --offline=true` of the modelled systemd scores it, into the units'
// Security; a service systemd would not load gets SecurityError.
func (inv *Inventory) assess(fsys *rootfs.FS, opts ModelOptions) error {
	t, err := security.TablesFor(inv.Systemd.Major)
	if err != nil {
		return err
	}
	p := opts.SecurityPolicy
	if p == nil {
		if p, _, err = security.ImagePolicy(fsys); err != nil {
			return err
		}
	}
	s := security.NewScorer(fsys, inv.Graph, t, p)
	var scored []int
	for i := range inv.Units {
		in := &inv.Units[i]
		// A masked unit does not run; a "bad" one systemd cannot load
		// (list-unit-files says so, and why, already).
		if unit.Type(in.Name) != "service" || unit.IsTemplate(in.Name) || in.State == "masked" || in.State == "bad" {
			continue
		}
		if u := inv.Graph.Unit(in.Name); u == nil || u.State == boot.Masked {
			continue
		}
		scored = append(scored, i)
	}
	// Every unit scored is loaded (above, in order): scoring reads the
	// loaded units and the image, independently per unit.
	errs := make([]error, len(scored))
	rootfs.ForEach(len(scored), func(k int) {
		in := &inv.Units[scored[k]]
		a, err := s.Score(in.Name)
		switch {
		case err == nil:
			in.Security = a
		case errors.Is(err, security.ErrNotLoaded):
			in.SecurityError = strings.TrimPrefix(err.Error(), in.Name+": ")
		default:
			errs[k] = fmt.Errorf("assess %s: %w", in.Name, err)
		}
	})
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
