package fix

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/amilint/amilint/internal/image/rootfs"
)

// ErrUnsafePath reports a change whose path goes through a symbolic link
// that Apply will not follow: an absolute link (its meaning on the host is
// not its meaning in the image), one leaving the image, or one inside the
// directory Apply swaps.
var ErrUnsafePath = errors.New("path goes through an absolute or escaping symbolic link")

// ErrOutsideConfig reports a change outside /etc: fix only writes
// configuration.
var ErrOutsideConfig = errors.New("fix writes only under /etc")

// ErrBusy reports an image directory another fix holds.
var ErrBusy = errors.New("another amilint fix is running on this image")

// leftoverPrefix starts the name of everything a fix creates besides the
// tree it writes: the copy it builds and, after the swap, the old tree it
// removes. A fix killed in between leaves one; the next fix removes it.
const leftoverPrefix = ".#amilint-fix."

// scopes are the directories Apply swaps whole, the smallest that holds
// every change first: a plan of disable, mask and drop-ins stays inside
// /etc/systemd/system.
func scopes() []string { return []string{"etc/systemd/system", "etc/systemd", "etc"} }

// Tree is an image directory opened for fixing: locked against other
// fixes, with what killed fixes left removed.
type Tree struct {
	dir  string
	root *os.Root
	lock *os.File
	// Removed are the leftovers of killed fixes Open removed,
	// image-absolute.
	Removed []string
	// crash, set by tests, is asked before every write of Apply; an error
	// from it stops Apply on the spot, with no clean-up, as a SIGKILL
	// would.
	crash func(step string) error
}

// Open locks the image directory dir against other fixes (flock on the
// directory; a second fix fails with ErrBusy rather than wait) and
// removes what killed fixes left (see Apply), before anything reads the
// tree.
func Open(dir string) (*Tree, error) {
	lock, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("open image directory: %w", err)
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		lock.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("lock %s: %w", dir, ErrBusy)
		}
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		lock.Close()
		return nil, fmt.Errorf("open image directory: %w", err)
	}
	t := &Tree{dir: dir, root: root, lock: lock}
	if err := t.removeLeftovers(); err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

// Close unlocks the directory.
func (t *Tree) Close() error {
	err := t.root.Close()
	return errors.Join(err, t.lock.Close())
}

// removeLeftovers removes every entry named leftoverPrefix* where a fix
// makes them: beside each scope (its copies and old trees) and anywhere
// under /etc/systemd/system (the temporary links of amilint versions
// that renamed links into place one by one).
func (t *Tree) removeLeftovers() error {
	var errs []error
	remove := func(name string) {
		if err := t.removeAll(name); err != nil {
			errs = append(errs, fmt.Errorf("remove leftover /%s: %w", name, err))
			return
		}
		t.Removed = append(t.Removed, "/"+name)
	}
	for _, dir := range []string{".", "etc", "etc/systemd"} {
		ents, err := t.readDir(dir)
		if err != nil {
			continue
		}
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), leftoverPrefix) {
				remove(join(dir, e.Name()))
			}
		}
	}
	var walk func(dir string)
	walk = func(dir string) {
		ents, err := t.readDir(dir)
		if err != nil {
			return
		}
		for _, e := range ents {
			n := join(dir, e.Name())
			switch {
			case strings.HasPrefix(e.Name(), leftoverPrefix):
				remove(n)
			case e.IsDir():
				walk(n)
			}
		}
	}
	if fi, err := t.root.Lstat(scopes()[0]); err == nil && fi.IsDir() {
		walk(scopes()[0])
	}
	return errors.Join(errs...)
}

// removeAll removes name, a copy or an old tree, and everything below
// it. A fix run by the image's owner rather than root may meet a
// directory the owner cannot write (mode 0555 in the image): the copy
// keeps the modes of the originals, and the old tree is the originals.
// So when a removal is refused, each directory below name is made
// writable and searchable by its owner first. Only directories are
// changed: the files are hard links shared with the tree kept.
func (t *Tree) removeAll(name string) error {
	err := t.root.RemoveAll(name)
	if !errors.Is(err, fs.ErrPermission) {
		return err
	}
	t.openDirs(name)
	return t.root.RemoveAll(name)
}

// openDirs gives the owner rwx on the directory name and every directory
// below it, never through a link; it stops where it cannot.
func (t *Tree) openDirs(name string) {
	fi, err := t.root.Lstat(name)
	if err != nil || !fi.IsDir() {
		return
	}
	if perm := fi.Mode().Perm(); perm&0o700 != 0o700 {
		if t.root.Chmod(name, perm|0o700) != nil {
			return
		}
	}
	ents, err := t.readDir(name)
	if err != nil {
		return
	}
	for _, e := range ents {
		if e.IsDir() {
			t.openDirs(join(name, e.Name()))
		}
	}
}

// readDir lists a directory of the tree, never through a link.
func (t *Tree) readDir(name string) ([]fs.DirEntry, error) {
	if name != "." {
		fi, err := t.root.Lstat(name)
		if err != nil {
			return nil, err
		}
		if !fi.IsDir() {
			return nil, fmt.Errorf("/%s: %w", name, rootfs.ErrNotDir)
		}
	}
	f, err := t.root.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.ReadDir(-1)
}

// Apply writes the plan into the image root dir atomically: see
// Tree.Apply. It opens (locks and cleans) the tree for the one plan.
func Apply(dir string, p *Plan) error {
	if p == nil || p.Empty() {
		return nil
	}
	t, err := Open(dir)
	if err != nil {
		return err
	}
	defer t.Close()
	return t.Apply(p)
}

// Apply writes the plan into the tree atomically: after a SIGKILL or a
// crash at any moment, the directory holding the changes (/etc/systemd/
// system for every plan fix makes) is exactly as it was or exactly as
// planned, never in between.
//
// It builds the new directory beside the old one — a copy whose
// subdirectories are made anew with the old ones' mode, owner, extended
// attributes and times, and whose other entries are hard links to the
// old ones (files, links and all, so nothing unchanged is rewritten) —
// applies the changes to the copy, and swaps the two with one
// renameat2(RENAME_EXCHANGE) (RENAME_NOREPLACE when the plan creates the
// directory). The old tree, now under the copy's name, is then removed.
// A fix killed before the swap leaves the copy, one killed after it the
// old tree, under a name starting with ".#amilint-fix."; the next Open
// removes it.
//
// Every write goes through an os.Root opened on the image directory, so
// nothing is written outside it; a path whose parents include an absolute
// symbolic link, or a link inside the swapped directory, fails before
// anything is written, as does a change outside /etc. Applying a plan
// computed on the same tree twice is harmless: what is already done is
// skipped.
func (t *Tree) Apply(p *Plan) error {
	if p == nil || p.Empty() {
		return nil
	}
	names := make([]string, len(p.Changes))
	for i, c := range p.Changes {
		names[i] = rootfs.Clean(c.Path)
		if err := checkParents(t.root, c.Path); err != nil {
			return fmt.Errorf("apply %s: %w", c, err)
		}
	}
	scope, err := scopeOf(p.Changes, names)
	if err != nil {
		return fmt.Errorf("apply: %w", err)
	}
	mode := renameExchange
	switch fi, err := t.root.Lstat(scope); {
	case errors.Is(err, fs.ErrNotExist):
		if !slices.ContainsFunc(p.Changes, func(c Change) bool { return c.Op == OpMkdir && rootfs.Clean(c.Path) == scope }) {
			return fmt.Errorf("apply: /%s: %w", scope, fs.ErrNotExist)
		}
		mode = renameNoReplace
	case err != nil:
		return fmt.Errorf("apply: %w", err)
	case fi.Mode()&fs.ModeSymlink != 0:
		return fmt.Errorf("apply: /%s is a symbolic link; fix swaps the directory whole and will not replace a link: %w", scope, ErrUnsafePath)
	case !fi.IsDir():
		return fmt.Errorf("apply: /%s: %w", scope, rootfs.ErrNotDir)
	}
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return fmt.Errorf("apply: %w", err)
	}
	stage := join(path.Dir(scope), leftoverPrefix+hex.EncodeToString(b[:]))
	err = t.build(p.Changes, names, scope, stage, mode == renameExchange)
	if err == nil {
		err = t.swap(scope, stage, mode)
	}
	if err != nil {
		if errors.Is(err, errCrash) {
			return err
		}
		// The tree is as it was: drop the copy.
		if rerr := t.removeAll(stage); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			err = errors.Join(err, fmt.Errorf("remove /%s: %w", stage, rerr))
		}
		return err
	}
	// The tree is as planned; the old one goes (a kill here leaves it
	// for the next Open).
	if err := t.step("remove old tree"); err != nil {
		return err
	}
	if mode == renameExchange {
		if err := t.removeAll(stage); err != nil {
			return fmt.Errorf("apply: changes made; removing the old tree /%s: %w", stage, err)
		}
	}
	return nil
}

// errCrash is what a test's crash hook returns.
var errCrash = errors.New("crash")

func (t *Tree) step(what string) error {
	if t.crash != nil {
		return t.crash(what)
	}
	return nil
}

// scopeOf is the directory Apply swaps: the first of scopes() that holds
// every change strictly below it (or is the directory a mkdir creates).
func scopeOf(cs []Change, names []string) (string, error) {
	for _, s := range scopes() {
		ok := true
		for i, n := range names {
			if !strings.HasPrefix(n, s+"/") && !(n == s && cs[i].Op == OpMkdir) {
				ok = false
				break
			}
		}
		if ok {
			return s, nil
		}
	}
	for i, n := range names {
		if !strings.HasPrefix(n, "etc/") {
			return "", fmt.Errorf("%s: %w", cs[i], ErrOutsideConfig)
		}
	}
	return "", fmt.Errorf("%w: a plan may not remove or replace /etc itself", ErrOutsideConfig)
}

// build makes stage the scope as planned: a copy of it (or, when the
// plan creates it, a new directory) with the changes applied.
func (t *Tree) build(cs []Change, names []string, scope, stage string, exchange bool) error {
	if err := t.step("mkdir copy"); err != nil {
		return err
	}
	if exchange {
		if err := t.clone(scope, stage); err != nil {
			return fmt.Errorf("apply: copy /%s: %w", scope, err)
		}
	} else if err := t.root.Mkdir(stage, 0o755); err != nil {
		return fmt.Errorf("apply: %w", err)
	}
	for i, c := range cs {
		if names[i] == scope {
			continue // the mkdir of the scope: stage is it
		}
		name := stage + strings.TrimPrefix(names[i], scope)
		if err := t.safeParents(stage, name); err != nil {
			return fmt.Errorf("apply %s: %w", c, err)
		}
		if err := t.step(c.String()); err != nil {
			return err
		}
		if err := applyOne(t.root, c, name); err != nil {
			return fmt.Errorf("apply %s: %w", c, err)
		}
	}
	return t.syncDir(stage)
}

// safeParents refuses a change below stage whose parents include a
// symbolic link: the copy sits beside the original, so a relative link
// could lead from the copy into the original tree.
func (t *Tree) safeParents(stage, name string) error {
	rel := strings.TrimPrefix(path.Dir(name), stage)
	cur := stage
	for _, c := range strings.Split(strings.Trim(rel, "/"), "/") {
		if c == "" {
			continue
		}
		cur = join(cur, c)
		fi, err := t.root.Lstat(cur)
		if errors.Is(err, fs.ErrNotExist) {
			return nil // created by the plan, or a change that finds nothing to do
		}
		if err != nil {
			return err
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return fmt.Errorf("%s is a symbolic link inside the directory fix swaps: %w", c, ErrUnsafePath)
		}
	}
	return nil
}

// swap exchanges the scope and its planned copy in one rename.
func (t *Tree) swap(scope, stage string, mode int) error {
	if err := t.step("swap"); err != nil {
		return err
	}
	parent, err := t.root.Open(path.Dir(scope))
	if err != nil {
		return fmt.Errorf("apply: %w", err)
	}
	defer parent.Close()
	fd := int(parent.Fd())
	if err := renameat(fd, path.Base(stage), fd, path.Base(scope), mode); err != nil {
		what := "exchange"
		if mode == renameNoReplace {
			what = "rename"
		}
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
			return fmt.Errorf("apply: %s /%s atomically: the filesystem of %s does not support renameat2 (%w); nothing was changed", what, scope, t.dir, err)
		}
		if errors.Is(err, unix.EXDEV) {
			if onOverlayfs(fd) {
				// overlayfs renames a directory it merges from a lower
				// layer only with redirect_dir=on (it then records the
				// move in the upper layer); otherwise EXDEV, so that
				// tools fall back to copying, which would not be atomic.
				return fmt.Errorf("apply: %s /%s atomically: it is an overlayfs directory from a lower layer, which the kernel renames only on an overlay mounted with redirect_dir=on (%w); nothing was changed: remount the overlay with redirect_dir=on, or fix a copy of the image that is not an overlay", what, scope, err)
			}
			return fmt.Errorf("apply: %s /%s atomically: it is not on the same filesystem as /%s (a mount point?) (%w); nothing was changed: fix the image where the directory and its parent are one filesystem", what, scope, path.Dir(scope), err)
		}
		return fmt.Errorf("apply: %s /%s with its planned copy: %w", what, scope, err)
	}
	// Make the swap durable before the old tree goes.
	if err := parent.Sync(); err != nil {
		return fmt.Errorf("apply: sync /%s: %w", path.Dir(scope), err)
	}
	return nil
}

// syncDir flushes the copy's directory entry list to disk.
func (t *Tree) syncDir(name string) error {
	f, err := t.root.Open(name)
	if err != nil {
		return fmt.Errorf("apply: %w", err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("apply: sync /%s: %w", name, err)
	}
	return nil
}

// clone makes dst a copy of the directory src: directories made anew
// with src's metadata, everything else hard-linked.
func (t *Tree) clone(src, dst string) error {
	fi, err := t.root.Lstat(src)
	if err != nil {
		return err
	}
	if err := t.root.Mkdir(dst, 0o700); err != nil {
		return err
	}
	ents, err := t.readDir(src)
	if err != nil {
		return err
	}
	for _, e := range ents {
		s, d := join(src, e.Name()), join(dst, e.Name())
		if err := t.step("copy " + s); err != nil {
			return err
		}
		if e.IsDir() {
			if err := t.clone(s, d); err != nil {
				return err
			}
			continue
		}
		if err := t.root.Link(s, d); err != nil {
			return err
		}
	}
	return t.copyMeta(src, dst, fi)
}

// copyMeta gives the directory dst the owner, mode, extended attributes
// (ACLs and security labels included) and times of src.
func (t *Tree) copyMeta(src, dst string, fi fs.FileInfo) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("/%s: no stat", src)
	}
	// chmod first: the kernel drops setgid from a chmod by a process
	// outside the directory's group (without CAP_FSETID), and chown keeps
	// a directory's mode bits.
	if err := t.root.Chmod(dst, fi.Mode()&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)); err != nil {
		return err
	}
	if int(st.Uid) != os.Geteuid() || int(st.Gid) != os.Getegid() {
		if err := t.root.Lchown(dst, int(st.Uid), int(st.Gid)); err != nil {
			return fmt.Errorf("keep the owner of /%s: %w", src, err)
		}
	}
	if err := t.copyXattrs(src, dst); err != nil {
		return err
	}
	atime, mtime := statTimes(st)
	return t.root.Chtimes(dst, atime, mtime)
}

func (t *Tree) copyXattrs(src, dst string) error {
	sf, err := t.root.Open(src)
	if err != nil {
		return err
	}
	defer sf.Close()
	names, err := listXattrs(int(sf.Fd()))
	if err != nil || len(names) == 0 {
		if errors.Is(err, unix.ENOTSUP) {
			return nil
		}
		return err
	}
	df, err := t.root.Open(dst)
	if err != nil {
		return err
	}
	defer df.Close()
	for _, n := range names {
		v, err := getXattr(int(sf.Fd()), n)
		if err != nil {
			return fmt.Errorf("read attribute %s of /%s: %w", n, src, err)
		}
		if err := unix.Fsetxattr(int(df.Fd()), n, v, 0); err != nil {
			return fmt.Errorf("keep attribute %s of /%s: %w", n, src, err)
		}
	}
	return nil
}

func listXattrs(fd int) ([]string, error) {
	n, err := unix.Flistxattr(fd, nil)
	if err != nil || n == 0 {
		return nil, err
	}
	buf := make([]byte, n)
	n, err = unix.Flistxattr(fd, buf)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, s := range strings.Split(string(buf[:n]), "\x00") {
		if s != "" {
			out = append(out, s)
		}
	}
	return out, nil
}

func getXattr(fd int, name string) ([]byte, error) {
	n, err := unix.Fgetxattr(fd, name, nil)
	if err != nil {
		return nil, err
	}
	buf := make([]byte, n)
	n, err = unix.Fgetxattr(fd, name, buf)
	if err != nil {
		return nil, err
	}
	return buf[:n], nil
}

// checkParents walks the parents of the image path p inside root and
// refuses absolute symbolic links among them. Relative links are left to
// os.Root, which follows them only while they stay inside the root.
func checkParents(root *os.Root, p string) error {
	name := rootfs.Clean(p)
	if name == "." {
		return fmt.Errorf("%s: %w", p, fs.ErrInvalid)
	}
	parts := strings.Split(path.Dir(name), "/")
	cur := ""
	for _, c := range parts {
		if c == "." {
			break
		}
		cur = join(orDot(cur), c)
		fi, err := root.Lstat(cur)
		if errors.Is(err, fs.ErrNotExist) {
			return nil // created by the plan (mkdir) or harmlessly missing
		}
		if err != nil {
			return err
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			t, err := root.Readlink(cur)
			if err != nil {
				return err
			}
			if strings.HasPrefix(t, "/") {
				return fmt.Errorf("/%s -> %s: %w", cur, t, ErrUnsafePath)
			}
		}
	}
	return nil
}

func orDot(s string) string {
	if s == "" {
		return "."
	}
	return s
}

// applyOne makes the change c at name (its place in the copy). What is
// already done is skipped.
func applyOne(root *os.Root, c Change, name string) error {
	switch c.Op {
	case OpUnlink:
		fi, err := root.Lstat(name)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			return fmt.Errorf("%s is no longer a symbolic link; not removing it", c.Path)
		}
		return ignoreNotExist(root.Remove(name))
	case OpRmdir:
		fi, err := root.Lstat(name)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			return fmt.Errorf("%s is not a directory", c.Path)
		}
		return ignoreNotExist(root.Remove(name))
	case OpMkdir:
		err := root.Mkdir(name, 0o755)
		if errors.Is(err, fs.ErrExist) {
			if fi, serr := root.Lstat(name); serr == nil && fi.IsDir() {
				return nil
			}
		}
		return err
	case OpSymlink:
		fi, err := root.Lstat(name)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return root.Symlink(c.Target, name)
		case err != nil:
			return err
		case fi.Mode()&fs.ModeSymlink != 0:
			if t, err := root.Readlink(name); err == nil && t == c.Target {
				return nil // already there
			}
		}
		// Anything else at name is refused, as systemctl refuses it.
		return fmt.Errorf("%s: %w", c.Path, fs.ErrExist)
	case OpWrite:
		return writeFile(root, c, name)
	}
	return fmt.Errorf("unknown op %q", c.Op)
}

// writeFile makes name a regular file holding c.Content with c.Mode
// (0644 when zero). A regular file already there is replaced (removed
// first: in the copy it is a hard link to the original); anything else
// there is refused.
func writeFile(root *os.Root, c Change, name string) error {
	perm := c.Mode.Perm()
	if perm == 0 {
		perm = 0o644
	}
	fi, err := root.Lstat(name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return err
	case !fi.Mode().IsRegular():
		return fmt.Errorf("%s: %w (not a regular file)", c.Path, fs.ErrExist)
	default:
		// Read only a file of the content's size: one of any other size
		// differs, and may be a sparse file of terabytes.
		if fi.Size() == int64(len(c.Content)) && fi.Mode().Perm() == perm {
			if old, err := root.ReadFile(name); err == nil && string(old) == c.Content {
				return nil // already there
			}
		}
		if err := root.Remove(name); err != nil {
			return err
		}
	}
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	_, err = f.WriteString(c.Content)
	if err == nil {
		err = f.Chmod(perm) // whatever the umask
	}
	if err == nil {
		err = f.Sync()
	}
	return errors.Join(err, f.Close())
}

func ignoreNotExist(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}
