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

	"github.com/amilint/amilint/internal/rootfs"
)

// ErrUnsafePath reports a change whose path goes through a symbolic link
// that Apply will not follow: an absolute link (its meaning on the host is
// not its meaning in the image) or one leaving the image.
var ErrUnsafePath = errors.New("path goes through an absolute or escaping symbolic link")

// Apply writes the plan into the image root dir. Every write goes through
// an os.Root opened on dir, so nothing is written outside it; a path whose
// parents include an absolute symbolic link fails before anything is
// written. Links are created under a temporary name in their directory and
// renamed into place, so each change is atomic. Applying a plan computed
// on the same tree twice is harmless: what is already done is skipped.
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
	for _, c := range p.Changes {
		if err := applyOne(root, c); err != nil {
			return fmt.Errorf("apply %s: %w", c, err)
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

func applyOne(root *os.Root, c Change) error {
	name := rootfs.Clean(c.Path)
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
			fi, serr := root.Stat(name)
			if serr == nil && fi.IsDir() {
				return nil
			}
		}
		return err
	case OpSymlink:
		return symlinkAtomic(root, c.Target, name)
	}
	return fmt.Errorf("unknown op %q", c.Op)
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
