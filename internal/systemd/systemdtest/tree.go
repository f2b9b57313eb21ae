package systemdtest

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/amilint/amilint/internal/image/rootfs"
)

// Entry is one change a test makes to an image: a file, a link, or the
// removal of what the root has at Path.
type Entry struct {
	// Path is the image path ("/etc/systemd/system/x.service").
	Path string
	// Link is a symlink target; Text the content of a file otherwise.
	Link, Text string
	// Exec makes the file executable.
	Exec bool
	// Remove hides the root's entry at Path (an overlay whiteout).
	Remove bool
}

// File is a regular file with content text.
func File(p, text string) Entry { return Entry{Path: p, Text: text} }

// Link is a symbolic link to target.
func Link(p, target string) Entry { return Entry{Path: p, Link: target} }

// Exe is an executable file with content text.
func Exe(p, text string) Entry { return Entry{Path: p, Text: text, Exec: true} }

// Remove hides what the root has at p.
func Remove(p string) Entry { return Entry{Path: p, Remove: true} }

// Upper writes entries into a new directory to stack over s's root (for
// Boot and View). Each entry's parent directories are resolved through
// the root's links first, as writing into the image would: /lib/x lands
// in usr/lib/x on a merged-/usr root, since an overlay's upper directory
// would hide the root's link instead of merging. A later entry for a path
// replaces an earlier one.
func (s Systemd) Upper(tb testing.TB, entries []Entry) string {
	tb.Helper()
	root := s.Root.Path(tb)
	src, err := rootfs.OpenDir(root)
	if err != nil {
		tb.Fatalf("systemd %d: %v", s.Version, err)
	}
	defer src.Close()
	view := rootfs.New(src)
	upper := filepath.Join(tb.TempDir(), "upper")
	if err := os.Mkdir(upper, 0o755); err != nil {
		tb.Fatalf("upper: %v", err)
	}
	for _, e := range entries {
		name, err := view.ResolveParent(rootfs.Clean(e.Path))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			tb.Fatalf("upper: resolve %s in %s: %v", e.Path, root, err)
		}
		Write(tb, upper, Entry{Path: name, Link: e.Link, Text: e.Text, Exec: e.Exec, Remove: e.Remove})
	}
	return upper
}

// Write writes entries into dir as they are, links not resolved.
func Write(tb testing.TB, dir string, entries ...Entry) {
	tb.Helper()
	for _, e := range entries {
		p := filepath.Join(dir, rootfs.Clean(e.Path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			tb.Fatalf("write %s: %v", e.Path, err)
		}
		if err := os.RemoveAll(p); err != nil {
			tb.Fatalf("write %s: %v", e.Path, err)
		}
		var err error
		switch {
		case e.Remove:
			err = unix.Mknod(p, unix.S_IFCHR|0o600, 0)
		case e.Link != "":
			err = os.Symlink(e.Link, p)
		default:
			mode := os.FileMode(0o644)
			if e.Exec {
				mode = 0o755
			}
			if err = os.WriteFile(p, []byte(e.Text), mode); err == nil {
				err = os.Chmod(p, mode)
			}
		}
		if err != nil {
			tb.Fatalf("write %s: %v", e.Path, err)
		}
	}
}

// MaskGenerators returns the entries that mask every generator of s's root
// but keep, as /etc/systemd/system-generators/NAME -> /dev/null does.
// Most generators write units from the running machine (fstab, the kernel
// command line, the cloud's data source), which an image at rest does not
// determine.
func (s Systemd) MaskGenerators(tb testing.TB, keep ...string) []Entry {
	tb.Helper()
	ents, err := os.ReadDir(filepath.Join(s.Root.Path(tb), "usr/lib/systemd/system-generators"))
	if err != nil {
		ents, err = os.ReadDir(filepath.Join(s.Root.Path(tb), "lib/systemd/system-generators"))
	}
	if err != nil {
		tb.Fatalf("systemd %d: generators: %v", s.Version, err)
	}
	var out []Entry
	for _, e := range ents {
		if !slices.Contains(keep, e.Name()) {
			out = append(out, Link("/etc/systemd/system-generators/"+e.Name(), "/dev/null"))
		}
	}
	return out
}

// View is the tree Boot shows systemd: upper (from Upper, or "") stacked
// over s's root as overlayfs stacks them, whiteouts hiding the root's
// entries. The model under test reads it.
func (s Systemd) View(tb testing.TB, upper string) *rootfs.FS {
	tb.Helper()
	lower, err := rootfs.OpenDir(s.Root.Path(tb))
	if err != nil {
		tb.Fatalf("systemd %d: %v", s.Version, err)
	}
	tb.Cleanup(func() { lower.Close() })
	if upper == "" {
		return rootfs.New(lower)
	}
	up, err := rootfs.OpenDir(upper)
	if err != nil {
		tb.Fatalf("systemd %d: %v", s.Version, err)
	}
	tb.Cleanup(func() { up.Close() })
	return rootfs.New(Union{Upper: up, Lower: lower})
}

// Union is a rootfs.Source of Upper stacked on Lower as a read-only
// overlayfs stacks two layers: an upper entry hides the lower one, a
// character device in Upper is a whiteout, and directories present in
// both merge (an upper directory over a lower link or file hides it).
type Union struct{ Upper, Lower rootfs.Source }

func (u Union) pick(name string) (rootfs.Source, error) {
	fi, err := u.Upper.Lstat(name)
	switch {
	case err == nil && fi.Mode()&fs.ModeCharDevice != 0:
		return nil, &fs.PathError{Op: "lstat", Path: name, Err: fs.ErrNotExist}
	case err == nil:
		return u.Upper, nil
	}
	if u.hiddenParent(name) {
		return nil, &fs.PathError{Op: "lstat", Path: name, Err: fs.ErrNotExist}
	}
	return u.Lower, nil
}

// hiddenParent reports whether an upper entry that is not a directory
// (a file, link or whiteout) hides a parent of name in the lower layer.
func (u Union) hiddenParent(name string) bool {
	parts := strings.Split(name, "/")
	for i := 1; i < len(parts); i++ {
		fi, err := u.Upper.Lstat(strings.Join(parts[:i], "/"))
		if err == nil && !fi.IsDir() {
			return true
		}
		if err != nil {
			return false
		}
	}
	return false
}

// Open opens name in the layer that has it.
func (u Union) Open(name string) (fs.File, error) {
	src, err := u.pick(name)
	if err != nil {
		return nil, err
	}
	return src.Open(name)
}

// Lstat describes name in the layer that has it.
func (u Union) Lstat(name string) (fs.FileInfo, error) {
	src, err := u.pick(name)
	if err != nil {
		return nil, err
	}
	return src.Lstat(name)
}

// ReadLink reads the link name in the layer that has it.
func (u Union) ReadLink(name string) (string, error) {
	src, err := u.pick(name)
	if err != nil {
		return "", err
	}
	return src.ReadLink(name)
}

// ReadFile reads name in the layer that has it.
func (u Union) ReadFile(name string) ([]byte, error) {
	src, err := u.pick(name)
	if err != nil {
		return nil, err
	}
	return fs.ReadFile(src, name)
}

// ReadDir merges the directory's entries of both layers, whiteouts
// removing the lower entries they name.
func (u Union) ReadDir(name string) ([]fs.DirEntry, error) {
	src, err := u.pick(name)
	if err != nil {
		return nil, err
	}
	if src == u.Lower {
		return u.Lower.ReadDir(name)
	}
	up, err := u.Upper.ReadDir(name)
	if err != nil {
		return nil, err
	}
	if fi, err := u.Lower.Lstat(name); name != "." && (err != nil || !fi.IsDir()) {
		return slices.DeleteFunc(up, whiteout), nil
	}
	low, err := u.Lower.ReadDir(name)
	if err != nil {
		return slices.DeleteFunc(up, whiteout), nil
	}
	seen := map[string]bool{}
	for _, e := range up {
		seen[e.Name()] = true
	}
	for _, e := range low {
		if !seen[e.Name()] {
			up = append(up, e)
		}
	}
	up = slices.DeleteFunc(up, whiteout)
	slices.SortFunc(up, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return up, nil
}

func whiteout(e fs.DirEntry) bool { return e.Type()&fs.ModeCharDevice != 0 }
