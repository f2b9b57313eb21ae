package fix

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"

	"github.com/amilint/amilint/internal/image/rootfs"
)

// ErrUnsafePath reports a change whose path goes through a symbolic link
// that Apply will not follow: an absolute link (its meaning on the host is
// not its meaning in the image) or one leaving the image.
var ErrUnsafePath = errors.New("path goes through an absolute or escaping symbolic link")

// Apply writes the plan into the image root dir. Every write goes through
// an os.Root opened on dir, so nothing is written outside it; a path whose
// parents include an absolute symbolic link fails before anything is
// written. Links are created under a temporary name in their directory and
// renamed into place, so each change is atomic; when a change fails, the
// changes already made are undone in reverse order, so the tree is left as
// it was (short of a crash in between). Applying a plan computed on the
// same tree twice is harmless: what is already done is skipped.
func Apply(dir string, p *Plan) error {
	if p == nil || p.Empty() {
		return nil
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("apply: %w", err)
	}
	defer root.Close()
	// Check every path first: fail closed before the first write.
	for _, c := range p.Changes {
		if err := checkParents(root, c.Path); err != nil {
			return fmt.Errorf("apply %s: %w", c, err)
		}
	}
	var undo []func() error
	for _, c := range p.Changes {
		u, err := applyOne(root, c)
		if err != nil {
			err = fmt.Errorf("apply %s: %w", c, err)
			for i := len(undo) - 1; i >= 0; i-- {
				if uerr := undo[i](); uerr != nil {
					err = errors.Join(err, fmt.Errorf("undo: %w", uerr))
				}
			}
			return err
		}
		if u != nil {
			undo = append(undo, u)
		}
	}
	return nil
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

// applyOne makes one change and returns how to undo it (nil when there
// was nothing to do).
func applyOne(root *os.Root, c Change) (func() error, error) {
	name := rootfs.Clean(c.Path)
	switch c.Op {
	case OpUnlink:
		fi, err := root.Lstat(name)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			return nil, fmt.Errorf("%s is no longer a symbolic link; not removing it", c.Path)
		}
		old, err := root.Readlink(name)
		if err != nil {
			return nil, err
		}
		if err := root.Remove(name); err != nil {
			return nil, ignoreNotExist(err)
		}
		return func() error { return symlinkAtomic(root, old, name) }, nil
	case OpRmdir:
		fi, err := root.Lstat(name)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		if !fi.IsDir() {
			return nil, fmt.Errorf("%s is not a directory", c.Path)
		}
		if err := root.Remove(name); err != nil {
			return nil, ignoreNotExist(err)
		}
		return func() error { return root.Mkdir(name, fi.Mode().Perm()) }, nil
	case OpMkdir:
		err := root.Mkdir(name, 0o755)
		if errors.Is(err, fs.ErrExist) {
			fi, serr := root.Stat(name)
			if serr == nil && fi.IsDir() {
				return nil, nil
			}
		}
		if err != nil {
			return nil, err
		}
		return func() error { return root.Remove(name) }, nil
	case OpSymlink:
		if t, err := root.Readlink(name); err == nil && t == c.Target {
			return nil, nil // already there
		}
		if err := symlinkAtomic(root, c.Target, name); err != nil {
			return nil, err
		}
		return func() error { return root.Remove(name) }, nil
	}
	return nil, fmt.Errorf("unknown op %q", c.Op)
}

func ignoreNotExist(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// symlinkAtomic creates name -> target by linking a temporary name in the
// same directory and renaming it over name. An existing link with the same
// target is left alone; anything else at name is refused, as systemctl
// refuses it.
func symlinkAtomic(root *os.Root, target, name string) error {
	if fi, err := root.Lstat(name); err == nil {
		if fi.Mode()&fs.ModeSymlink != 0 {
			if t, err := root.Readlink(name); err == nil && t == target {
				return nil
			}
		}
		return fmt.Errorf("/%s: %w", name, fs.ErrExist)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return err
	}
	tmp := join(path.Dir(name), ".#amilint-fix."+hex.EncodeToString(b[:]))
	if err := root.Symlink(target, tmp); err != nil {
		return err
	}
	if err := root.Rename(tmp, name); err != nil {
		_ = root.Remove(tmp)
		return err
	}
	return nil
}
