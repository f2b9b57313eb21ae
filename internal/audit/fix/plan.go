// Package fix owns changing an image: it applies the remediations of policy
// findings to an unpacked image root offline, exactly as systemd 252's
// `systemctl --root=DIR disable UNIT...` and `mask UNIT...` would change the
// tree (src/shared/install.c: unit_file_disable, unit_file_mask). Planning
// only reads, through rootfs; Apply writes only through an os.Root opened on
// the image directory, never outside it, never through an absolute link.
//
// Paths in plans are image-absolute ("/etc/systemd/system/ecs.service").
package fix

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"

	"github.com/amilint/amilint/internal/image/rootfs"
	"github.com/amilint/amilint/internal/systemd/install"
)

// Actions a plan knows.
const (
	Disable = "disable"
	Mask    = "mask"
)

// Ops of a Change.
const (
	OpUnlink  = "unlink"  // remove the symlink at Path
	OpSymlink = "symlink" // create the symlink Path -> Target
	OpRmdir   = "rmdir"   // remove the directory Path, which the plan has emptied
	OpMkdir   = "mkdir"   // create the directory Path (mask: missing parents)
	OpWrite   = "write"   // make Path a regular file holding Content (drop-ins)
)

// Change is one write to the image.
type Change struct {
	Op     string `json:"op"`
	Path   string `json:"path"`
	Target string `json:"target,omitempty"`
	// Content and Mode are what OpWrite writes (Mode 0 is 0644).
	Content string      `json:"content,omitempty"`
	Mode    fs.FileMode `json:"mode,omitempty"`
}

// String renders the change as the shell command doing it.
func (c Change) String() string {
	switch c.Op {
	case OpUnlink:
		return "rm " + c.Path
	case OpSymlink:
		return "ln -s " + c.Target + " " + c.Path
	case OpRmdir:
		return "rmdir " + c.Path
	case OpMkdir:
		return "mkdir " + c.Path
	case OpWrite:
		return fmt.Sprintf("write %s (%d bytes)", c.Path, len(c.Content))
	}
	return c.Op + " " + c.Path
}

// Note tells what a plan did not do, or did without a unit file.
type Note struct {
	Action string `json:"action"`
	Unit   string `json:"unit"`
	// Kind is "not-found", "masked", "dangling", "refused", "invalid",
	// "sysv" or "error".
	Kind string `json:"kind"`
	Text string `json:"text"`
}

// Step is one systemctl invocation a plan stands for.
type Step struct {
	Action string   `json:"action"`
	Units  []string `json:"units"`
}

// Plan is what fixing an image changes, in order.
type Plan struct {
	Steps   []Step   `json:"steps"`
	Changes []Change `json:"changes"`
	Notes   []Note   `json:"notes,omitempty"`
	// DropIns are the hardening drop-ins of NewPlanHarden.
	DropIns []DropIn `json:"dropins,omitempty"`
}

// Empty reports whether the plan changes nothing.
func (p *Plan) Empty() bool { return len(p.Changes) == 0 }

// Commands returns the systemctl command lines equivalent to the plan's
// steps, for an image at dir.
func (p *Plan) Commands(dir string) []string {
	var out []string
	for _, s := range p.Steps {
		if len(s.Units) > 0 {
			out = append(out, fmt.Sprintf("systemctl --root=%s %s %s", dir, s.Action, strings.Join(s.Units, " ")))
		}
	}
	return out
}

// NewPlan computes what `systemctl --root=DIR ACTION UNITS...` would change
// in the image fsys, without writing. action is Disable or Mask.
func NewPlan(fsys *rootfs.FS, action string, units []string) (*Plan, error) {
	return NewPlanSteps(fsys, []Step{{Action: action, Units: units}})
}

// NewPlanSteps computes the changes of several systemctl invocations run in
// order, each seeing the tree the previous ones left.
func NewPlanSteps(fsys *rootfs.FS, steps []Step) (*Plan, error) {
	pl, err := newPlanner(fsys, steps)
	if err != nil {
		return nil, err
	}
	return pl.plan, nil
}

// newPlanner plans steps and returns the planner, its overlay holding the
// tree they leave.
func newPlanner(fsys *rootfs.FS, steps []Step) (*planner, error) {
	if fsys == nil {
		return nil, errors.New("plan: no image")
	}
	pl := &planner{ov: newOverlay(fsys.Source()), plan: &Plan{}}
	for _, s := range steps {
		if len(s.Units) == 0 {
			continue
		}
		var err error
		switch s.Action {
		case Disable:
			err = pl.disable(s.Units)
		case Mask:
			err = pl.mask(s.Units)
		default:
			err = fmt.Errorf("unknown action %q (want disable or mask)", s.Action)
		}
		if err != nil {
			return nil, fmt.Errorf("plan %s: %w", s.Action, err)
		}
	}
	return pl, nil
}

type planner struct {
	ov   *overlay
	plan *Plan
}

func (pl *planner) note(action, unit, kind, text string) {
	n := Note{Action: action, Unit: unit, Kind: kind, Text: text}
	if !slices.Contains(pl.plan.Notes, n) { // a removal pass may repeat
		pl.plan.Notes = append(pl.plan.Notes, n)
	}
}

// configDir resolves /etc/systemd/system inside the image as it stands.
func (pl *planner) configDir() (string, bool) {
	r, err := rootfs.New(pl.ov).Resolve(rootfs.Clean(install.PersistentConfig))
	if err != nil || r == rootfs.NullName {
		return "", false
	}
	fi, err := pl.ov.Lstat(r)
	if err != nil || !fi.IsDir() {
		return "", false
	}
	return r, true
}

// disable ports unit_file_disable: mark the names, then remove the marked
// symlinks below /etc/systemd/system until nothing more matches.
func (pl *planner) disable(units []string) error {
	var valid []string
	for _, u := range units {
		if !install.ValidName(u) {
			pl.note(Disable, u, "invalid", "not a valid unit name; skipped")
			continue
		}
		valid = append(valid, u)
	}
	if len(valid) == 0 {
		return nil
	}
	pl.plan.Steps = append(pl.plan.Steps, Step{Action: Disable, Units: valid})
	for _, u := range valid {
		// systemctl also runs systemd-sysv-install (update-rc.d) for a
		// service with a SysV script; that is outside install.c and fix.
		if script, ok := strings.CutSuffix(u, ".service"); ok {
			if _, err := rootfs.New(pl.ov).Lstat(rootfs.Clean("/etc/init.d/" + script)); err == nil {
				pl.note(Disable, u, "sysv", fmt.Sprintf("/etc/init.d/%s exists: its /etc/rc?.d links are left as they are (systemctl would also run systemd-sysv-install disable %s)", script, script))
			}
		}
	}
	marked, skips, err := install.MarkForRemoval(rootfs.New(pl.ov), valid)
	if err != nil {
		return err
	}
	for _, s := range skips {
		switch s.Reason {
		case "not-found":
			if !s.Auxiliary {
				pl.note(Disable, s.Name, s.Reason, "no unit file in the image; only links named after it are removed")
			}
		case "masked":
			pl.note(Disable, s.Name, s.Reason, "unit is masked; systemctl leaves its links alone")
		case "dangling":
			pl.note(Disable, s.Name, s.Reason, "alias of a unit that is not in the image; links named after it are removed")
		case "error":
			pl.note(Disable, s.Name, s.Reason, fmt.Sprintf("unit could not be loaded (%v); links named after it are removed", s.Err))
		}
	}
	set := map[string]bool{}
	for _, m := range marked {
		set[m] = true
	}
	if len(set) == 0 {
		return nil
	}
	cfg, ok := pl.configDir()
	if !ok {
		return nil
	}
	for {
		removed, err := pl.removeMarked(set, cfg, install.PersistentConfig)
		if err != nil {
			return err
		}
		if !removed {
			return nil
		}
	}
}

// removeMarked ports one pass of remove_marked_symlinks_fd over the
// directory r (resolved name) shown as display: subdirectories are entered
// (never through a link), and a link with a valid unit name goes when its
// name, its name's template, or the name of what it finally points to is
// marked. It reports whether it removed anything.
func (pl *planner) removeMarked(set map[string]bool, r, display string) (bool, error) {
	ents, err := pl.ov.ReadDir(r)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		return false, fmt.Errorf("read %s: %w", display, err)
	}
	removedAny := false
	for _, e := range ents {
		n := e.Name()
		if install.HiddenOrBackup(n) {
			continue
		}
		child, shown := join(r, n), display+"/"+n
		switch {
		case e.Type().IsDir():
			got, err := pl.removeMarked(set, child, shown)
			if err != nil {
				return false, err
			}
			removedAny = removedAny || got
		case e.Type()&fs.ModeSymlink != 0:
			if !install.ValidName(n) {
				continue
			}
			if _, err := pl.ov.Lstat(child); err != nil {
				continue // already gone
			}
			found := set[n]
			if !found {
				if t, ok := install.TemplateName(n); ok {
					found = set[t]
				}
			}
			if !found {
				dest, err := install.Chase(pl.ov, shown)
				if err != nil {
					if !errors.Is(err, fs.ErrNotExist) {
						pl.note(Disable, n, "error", fmt.Sprintf("cannot resolve %s: %v; left in place", shown, err))
					}
					continue
				}
				// systemd compares the chased path with the root prefix
				// against marked paths without it, so only the name counts.
				found = set[path.Base(dest)]
			}
			if !found {
				continue
			}
			pl.ov.remove(child)
			pl.plan.Changes = append(pl.plan.Changes, Change{Op: OpUnlink, Path: shown})
			pl.rmdirParents(child, shown)
			set[shown] = true
			removedAny = true
		}
	}
	return removedAny, nil
}

// rmdirParents ports rmdir_parents(p, config_path): the emptied parents of
// the removed link, up to but not including /etc/systemd/system.
func (pl *planner) rmdirParents(r, display string) {
	for {
		r, display = path.Dir(r), path.Dir(display)
		if !strings.HasPrefix(display, install.PersistentConfig+"/") {
			return // at /etc/systemd/system or above it
		}
		if _, err := pl.ov.Lstat(r); err != nil {
			continue // ENOENT: systemd goes on upwards
		}
		ents, err := pl.ov.ReadDir(r)
		if err != nil || len(ents) > 0 {
			return
		}
		pl.ov.remove(r)
		pl.plan.Changes = append(pl.plan.Changes, Change{Op: OpRmdir, Path: display})
	}
}

// mask ports unit_file_mask: /etc/systemd/system/NAME -> /dev/null for each
// name, refused when something else is there already. Names with no unit
// file in the image are skipped with a note (systemctl would mask them).
func (pl *planner) mask(units []string) error {
	var todo []string
	for _, u := range units {
		switch {
		case !install.ValidName(u):
			pl.note(Mask, u, "invalid", "not a valid unit name; skipped")
		case !pl.present(u):
			pl.note(Mask, u, "not-found", "no unit file in the image; not masked")
		default:
			todo = append(todo, u)
		}
	}
	if len(todo) == 0 {
		return nil
	}
	pl.plan.Steps = append(pl.plan.Steps, Step{Action: Mask, Units: todo})
	for _, u := range todo {
		if err := pl.maskOne(u); err != nil {
			return err
		}
	}
	return nil
}

// present reports whether the image has a unit file (or link) named u, or
// its template, in a directory of the search path.
func (pl *planner) present(u string) bool {
	fsys := rootfs.New(pl.ov)
	names := []string{u}
	if t, ok := install.TemplateName(u); ok && t != u {
		names = append(names, t)
	}
	for _, n := range names {
		for _, dir := range install.SearchPath {
			fi, err := fsys.Lstat(rootfs.Clean(dir + "/" + n))
			if err == nil && (fi.Mode().IsRegular() || fi.Mode()&fs.ModeSymlink != 0) {
				return true
			}
		}
	}
	return false
}

func (pl *planner) maskOne(u string) error {
	shown := install.PersistentConfig + "/" + u
	// mkdir_parents: create what is missing of /etc/systemd/system.
	dir, err := pl.mkdirAll(install.PersistentConfig)
	if err != nil {
		pl.note(Mask, u, "refused", fmt.Sprintf("cannot create %s: %v", install.PersistentConfig, err))
		return nil
	}
	name := join(dir, u)
	fi, err := pl.ov.Lstat(name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		pl.ov.addLink(name, "/dev/null")
		pl.plan.Changes = append(pl.plan.Changes, Change{Op: OpSymlink, Path: shown, Target: "/dev/null"})
		return nil
	case err != nil:
		return fmt.Errorf("lstat %s: %w", shown, err)
	case fi.Mode()&fs.ModeSymlink == 0:
		pl.note(Mask, u, "refused", fmt.Sprintf("file %s already exists; systemctl refuses to mask over it", shown))
		return nil
	}
	dest, err := pl.ov.ReadLink(name)
	if err != nil {
		return fmt.Errorf("readlink %s: %w", shown, err)
	}
	if pl.isDevNull(dest, path.Dir(shown)) {
		return nil // already masked
	}
	pl.note(Mask, u, "refused", fmt.Sprintf("file %s already exists and is a symlink to %s; systemctl refuses to mask over it", shown, dest))
	return nil
}

// isDevNull ports create_symlink's "already there" test for /dev/null:
// path_equal, or both names denoting the same existing file in the image.
func (pl *planner) isDevNull(dest, dir string) bool {
	if comps(dest) == "/dev/null" {
		return true
	}
	p := dest
	if !strings.HasPrefix(p, "/") {
		p = dir + "/" + p
	}
	if rootfs.Clean(p) != rootfs.NullName {
		return false
	}
	_, err := pl.ov.Lstat(rootfs.NullName)
	return err == nil
}

// comps normalizes a path as path_equal compares it: empty and "."
// components dropped.
func comps(p string) string {
	var out []string
	for _, c := range strings.Split(p, "/") {
		if c != "" && c != "." {
			out = append(out, c)
		}
	}
	s := strings.Join(out, "/")
	if strings.HasPrefix(p, "/") {
		return "/" + s
	}
	return s
}

// mkdirAll resolves the image directory p (absolute), planning mkdir for
// each missing component, and returns its resolved name.
func (pl *planner) mkdirAll(p string) (string, error) {
	fsys := rootfs.New(pl.ov)
	cur := "."
	shown := ""
	for _, c := range strings.Split(strings.Trim(p, "/"), "/") {
		shown += "/" + c
		next := join(cur, c)
		r, err := fsys.Resolve(next)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if _, lerr := pl.ov.Lstat(next); lerr == nil {
				return "", fmt.Errorf("%s is a dangling symbolic link", shown)
			}
			pl.ov.addDir(r)
			pl.plan.Changes = append(pl.plan.Changes, Change{Op: OpMkdir, Path: shown})
			cur = r
			continue
		case err != nil:
			return "", err
		case r == rootfs.NullName:
			return "", fmt.Errorf("%s: %w", shown, rootfs.ErrNotDir)
		}
		fi, err := pl.ov.Lstat(r)
		if err != nil {
			return "", err
		}
		if !fi.IsDir() {
			return "", fmt.Errorf("%s: %w", shown, rootfs.ErrNotDir)
		}
		cur = r
	}
	return cur, nil
}

// sorted returns units sorted and without duplicates.
func sorted(units []string) []string {
	out := slices.Clone(units)
	slices.Sort(out)
	return slices.Compact(out)
}
