package fix

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"

	"github.com/amilint/amilint/internal/image/rootfs"
	"github.com/amilint/amilint/internal/systemd/install"
	"github.com/amilint/amilint/rules"
)

// DropIn is a hardening drop-in a plan writes:
// /etc/systemd/system/UNIT.d/NAME.
type DropIn struct {
	// Unit is the service it hardens.
	Unit string `json:"unit"`
	// Entry is the hardening catalog entry it comes from.
	Entry string `json:"entry"`
	// Path is the image path it is written to.
	Path    string `json:"path"`
	Content string `json:"content"`
	// Unchanged reports a drop-in the image already holds as planned.
	Unchanged bool `json:"unchanged,omitempty"`
}

// enabledForHarden are the list-unit-files states of a service fix
// --harden hardens: enabled ones.
var enabledForHarden = []install.State{install.Enabled, install.EnabledRuntime}

// HardeningFor picks the catalog entries that apply to the image: for each
// entry, the first of its units the image has and either enables or has
// activated by a trigger unit the boot starts (activatedBy, the boot's
// ActivatedBy: a static dpkg-db-backup.service its enabled timer runs
// daily) — a unit and its alias are one service — unless skip names it (a
// unit the same fix disables or masks), or names every trigger that
// activates it. The drop-ins are in catalog order.
func HardeningFor(files []install.UnitFile, activatedBy map[string][]string, catalog []rules.Hardening, skip []string) []DropIn {
	state := make(map[string]install.State, len(files))
	for _, f := range files {
		state[f.Name] = f.State
	}
	runs := func(u string) bool {
		if slices.Contains(skip, u) {
			return false
		}
		if slices.Contains(enabledForHarden, state[u]) {
			return true
		}
		if _, ok := state[u]; !ok {
			return false
		}
		return slices.ContainsFunc(activatedBy[u], func(t string) bool { return !slices.Contains(skip, t) })
	}
	var out []DropIn
	for _, h := range catalog {
		for _, u := range h.Units {
			if !runs(u) {
				continue
			}
			out = append(out, DropIn{Unit: u, Entry: h.ID, Path: install.PersistentConfig + "/" + u + ".d/" + rules.DropInName, Content: dropInText(h)})
			break
		}
	}
	return out
}

// dropInText is the file fix writes for an entry: a header naming the
// entry, then its settings.
func dropInText(h rules.Hardening) string {
	return fmt.Sprintf("# Written by amilint fix --harden from the hardening catalog entry %q:\n# %s.\n# What it sets, why it is safe and what would break it: rules/docs/hardening/%s.md\n%s",
		h.ID, h.Title, h.ID, strings.TrimLeft(h.DropIn, "\n"))
}

// NewPlanHarden plans the systemctl steps, as NewPlanSteps does, then the
// drop-ins, each seeing the tree the steps leave; it returns the plan and
// the image as it will be once the plan is applied (for scoring the
// hardened services before writing anything). A drop-in the image already
// holds with the same content changes nothing (Unchanged).
func NewPlanHarden(fsys *rootfs.FS, steps []Step, dropins []DropIn) (*Plan, *rootfs.FS, error) {
	pl, err := newPlanner(fsys, steps)
	if err != nil {
		return nil, nil, err
	}
	for _, d := range dropins {
		if err := pl.dropIn(&d); err != nil {
			return nil, nil, fmt.Errorf("plan drop-in %s: %w", d.Path, err)
		}
		pl.plan.DropIns = append(pl.plan.DropIns, d)
	}
	return pl.plan, rootfs.New(pl.ov), nil
}

// dropIn plans writing one drop-in: its directory (made when missing) and
// the file (rewritten when it differs).
func (pl *planner) dropIn(d *DropIn) error {
	dir, name := pathDir(d.Path), pathBase(d.Path)
	if !strings.HasPrefix(d.Path, install.PersistentConfig+"/") || !strings.HasSuffix(dir, ".d") || name == "" {
		return fmt.Errorf("%s: %w", d.Path, ErrOutsideConfig)
	}
	resolved, err := pl.mkdirAll(dir)
	if err != nil {
		return err
	}
	full := join(resolved, name)
	fsys := rootfs.New(pl.ov)
	fi, err := pl.ov.Lstat(full)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return err
	case !fi.Mode().IsRegular():
		return fmt.Errorf("%s: %w (not a regular file)", d.Path, fs.ErrExist)
	default:
		if old, err := fsys.ReadFile(full); err == nil && string(old) == d.Content {
			d.Unchanged = true
			return nil
		}
	}
	pl.ov.addFile(full, d.Content)
	pl.plan.Changes = append(pl.plan.Changes, Change{Op: OpWrite, Path: d.Path, Content: d.Content})
	return nil
}

func pathDir(p string) string {
	if i := strings.LastIndexByte(p, '/'); i > 0 {
		return p[:i]
	}
	return "/"
}

func pathBase(p string) string { return p[strings.LastIndexByte(p, '/')+1:] }
