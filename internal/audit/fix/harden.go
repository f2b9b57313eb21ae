package fix

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"

	"github.com/amilint/amilint/internal/image/rootfs"
	"github.com/amilint/amilint/internal/systemd/boot"
	"github.com/amilint/amilint/internal/systemd/install"
	"github.com/amilint/amilint/internal/systemd/unit"
	"github.com/amilint/amilint/rules"
)

// DropIn is a hardening drop-in a plan writes:
// /etc/systemd/system/UNIT.d/NAME.
type DropIn struct {
	// Unit is the service it hardens: a service, or a template
	// (postfix@.service) whose drop-in systemd merges into every instance.
	Unit string `json:"unit"`
	// Instances are, for a template, its instances the boot starts or
	// activates (postfix@-.service), sorted; the drop-in applies to each.
	Instances []string `json:"instances,omitempty"`
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
// entry, the first of its units the image has and either enables, or the
// boot starts (a static rpc-statd.service the enabled nfs-server.service
// wants), or has activated by a trigger unit the boot starts (the boot's
// ActivatedBy: a static dpkg-db-backup.service its enabled timer runs
// daily) — a unit and its alias are one service — unless skip names it (a
// unit the same fix disables or masks), or names every trigger that
// activates it. A template of the catalog (postfix@.service) applies when
// the image has it and enables it, or when the boot starts or activates an instance of it that skip does not name and
// whose triggers, if it is only activated, are not all in skip: the
// instances a generator makes at boot (postfix@-.service,
// postgresql@15-main.service) have no unit file of their own. Its drop-in
// goes to the template's directory, which systemd reads for every
// instance. The drop-ins are in catalog order.
func HardeningFor(files []install.UnitFile, b *boot.Boot, catalog []rules.Hardening, skip []string) []DropIn {
	var activatedBy map[string][]string
	var started []string
	if b != nil {
		activatedBy, started = b.ActivatedBy, b.Start
	}
	state := make(map[string]install.State, len(files))
	for _, f := range files {
		state[f.Name] = f.State
	}
	byTrigger := func(u string) bool {
		return slices.ContainsFunc(activatedBy[u], func(t string) bool { return !slices.Contains(skip, t) })
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
		return slices.Contains(started, u) || byTrigger(u)
	}
	// instances are the template's instances the boot runs and the fix
	// leaves alone.
	instances := func(tmpl string) []string {
		var out []string
		for _, i := range started {
			if unit.Template(i) == tmpl && i != tmpl && !slices.Contains(skip, i) {
				out = append(out, i)
			}
		}
		for i := range activatedBy {
			if unit.Template(i) == tmpl && i != tmpl && !slices.Contains(skip, i) && byTrigger(i) {
				out = append(out, i)
			}
		}
		slices.Sort(out)
		return slices.Compact(out)
	}
	var out []DropIn
	for _, h := range catalog {
		for _, u := range h.Units {
			var inst []string
			if unit.IsTemplate(u) {
				if _, ok := state[u]; !ok || slices.Contains(skip, u) {
					continue
				}
				if inst = instances(u); len(inst) == 0 && !slices.Contains(enabledForHarden, state[u]) {
					continue
				}
			} else if !runs(u) {
				continue
			}
			out = append(out, DropIn{Unit: u, Instances: inst, Entry: h.ID, Path: install.PersistentConfig + "/" + u + ".d/" + rules.DropInName, Content: dropInText(h)})
			break
		}
	}
	return out
}

// Scored is the unit whose exposure stands for the drop-in's: the service,
// or a template's first instance the boot runs (a template alone cannot be
// scored).
func (d DropIn) Scored() string {
	if len(d.Instances) > 0 {
		return d.Instances[0]
	}
	return d.Unit
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
