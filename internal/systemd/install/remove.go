package install

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"

	"github.com/amilint/amilint/internal/image/rootfs"
	"github.com/amilint/amilint/internal/systemd/unit"
	"github.com/amilint/amilint/internal/systemd/version"
)

// This file exports the pieces of install.c that `systemctl disable` uses,
// for the fix package, which owns writing: the marking of names for
// removal, and the chase and name rules its removal walk needs.

// PersistentConfig is the directory `systemctl --root disable|mask` change:
// lp->persistent_config of the system scope.
const PersistentConfig = persistentConfig

// Skip says why install_context_mark_for_removal did not mark a name, or
// marked it without finding its unit file.
type Skip struct {
	// Name is the unit name.
	Name string
	// Reason is "not-found" (no unit file of that name: it is marked all
	// the same, so links named after it go), "dangling" (an alias whose
	// target is missing; marked), "masked" (not marked: systemctl ignores
	// masked units), "error" (the unit could not be loaded; marked) or
	// "not-regular" (a name that stays a link after traversal; not marked).
	Reason string
	// Auxiliary is set when only an Also= line named the unit.
	Auxiliary bool
	// Err is the underlying error for "not-found", "dangling" and "error".
	Err error
}

// MarkForRemoval ports install_context_mark_for_removal as
// unit_file_disable of systemd 252 calls it with names: every name, the
// units their Also= lines name and the units their aliases lead to are
// loaded in turn, and the names systemd would remove links to are returned
// sorted, with the names it skipped or could not find.
func MarkForRemoval(fsys *rootfs.FS, names []string) ([]string, []Skip, error) {
	if fsys == nil {
		return nil, nil, errors.New("mark for removal: no image")
	}
	x := newIndex(fsys, version.Default)
	ctx := installContext{}
	var order []string // will_process, in insertion order
	given := map[string]bool{}
	for _, n := range names {
		if !nameIsValid(n, nameAny) {
			return nil, nil, fmt.Errorf("mark for removal %q: %w", n, errInvalid)
		}
		if _, err := x.add(ctx, n); err != nil {
			return nil, nil, fmt.Errorf("mark for removal %q: %w", n, err)
		}
		if !given[n] {
			given[n] = true
			order = append(order, n)
		}
	}
	processed := map[string]bool{}
	marked := map[string]bool{}
	var skips []Skip
	for len(order) > 0 {
		n := order[0]
		order = order[1:]
		if processed[n] {
			continue
		}
		processed[n] = true
		i := ctx[n]
		_, err := x.traverse(ctx, i)
		// Names Also= lines and alias targets added join will_process.
		var added []string
		for m := range ctx {
			if !processed[m] && !slices.Contains(order, m) {
				added = append(added, m)
			}
		}
		slices.Sort(added)
		order = append(order, added...)
		switch {
		case errors.Is(err, errNoLink):
			skips = append(skips, Skip{Name: n, Reason: "dangling", Err: err})
		case errors.Is(err, fs.ErrNotExist):
			skips = append(skips, Skip{Name: n, Reason: "not-found", Auxiliary: !given[n], Err: err})
		case err != nil:
			skips = append(skips, Skip{Name: n, Reason: "error", Err: err})
		case i.typ == typeMasked:
			skips = append(skips, Skip{Name: n, Reason: "masked"})
			continue
		case i.typ != typeRegular:
			skips = append(skips, Skip{Name: n, Reason: "not-regular"})
			continue
		}
		marked[n] = true
	}
	out := make([]string, 0, len(marked))
	for n := range marked {
		out = append(out, n)
	}
	slices.Sort(out)
	return out, skips, nil
}

// Chase ports chase_symlinks(CHASE_NONEXISTENT) with the image as root:
// the image-absolute path p resolves inside src, absolute links re-anchored
// at the image root, a missing component ending the walk. It reads src
// afresh on every call, so it sees a tree that changes between calls.
func Chase(src rootfs.Source, p string) (string, error) {
	x := &index{src: src, lstats: map[string]lstatResult{}, links: map[string]linkResult{}}
	return x.chase(p, false, true)
}

// ValidName reports whether n is a valid unit name of any kind
// (unit_name_is_valid with UNIT_NAME_ANY).
func ValidName(n string) bool { return nameIsValid(n, nameAny) }

// TemplateName returns the template of an instance or template name
// (unit_name_template), and false for any other name.
func TemplateName(n string) (string, bool) {
	t, err := nameTemplateOf(n)
	return t, err == nil
}

// HiddenOrBackup reports whether systemd's FOREACH_DIRENT skips a directory
// entry of this name (hidden_or_backup_file).
func HiddenOrBackup(n string) bool { return unit.HiddenOrBackup(n) }
