package audit

import (
	"errors"
	"fmt"
	"strings"

	"github.com/amilint/amilint/internal/audit/facts"
	"github.com/amilint/amilint/internal/image/rootfs"
	"github.com/amilint/amilint/internal/systemd/boot"
	"github.com/amilint/amilint/internal/systemd/security"
	"github.com/amilint/amilint/internal/systemd/unit"
)

// scorer scores the services of the inventory (instances included,
// templates and masked units not) as `systemd-analyze security
// --offline=true` of the modelled systemd scores them.
func (inv *Inventory) scorer(fsys *rootfs.FS, opts ModelOptions) (*security.Scorer, error) {
	t, err := security.TablesFor(inv.Systemd.Major)
	if err != nil {
		return nil, err
	}
	p := opts.SecurityPolicy
	if p == nil {
		if p, _, err = security.ImagePolicy(fsys); err != nil {
			return nil, err
		}
	}
	return security.NewScorer(fsys, inv.Graph, t, p), nil
}

// assess scores the unit in, loaded as u, into its Security; a service
// systemd would not load gets SecurityError. Other units are left alone:
// a masked unit does not run, and a "bad" one systemd cannot load
// (list-unit-files says so, and why, already).
func assess(s *security.Scorer, in *facts.UnitInput, u *boot.Unit) error {
	if unit.Type(in.Name) != "service" || unit.IsTemplate(in.Name) || in.State == "masked" || in.State == "bad" ||
		u == nil || u.State == boot.Masked {
		return nil
	}
	a, err := s.ScoreLoaded(in.Name, u)
	switch {
	case err == nil:
		in.Security = a
	case errors.Is(err, security.ErrNotLoaded):
		in.SecurityError = strings.TrimPrefix(err.Error(), in.Name+": ")
	default:
		return fmt.Errorf("assess %s: %w", in.Name, err)
	}
	return nil
}
