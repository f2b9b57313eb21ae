package oci

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"

	"github.com/amilint/amilint/internal/image/rootfs"
)

// ErrCorrupt reports an image that cannot be read as the image spec says:
// a blob whose digest or size is not the one its descriptor records, a
// truncated or undecodable layer, a manifest that does not parse.
var ErrCorrupt = errors.New("corrupt image")

// ErrHostile reports a layer entry that would reach outside the image root
// or its directory: a name or hard link with ".." past the root, a
// whiteout of "." or "..". A runtime refuses such a layer too.
var ErrHostile = errors.New("layer entry escapes the image root")

// ErrTooLarge reports an image over one of the bounds: more entries than
// TreeOptions.MaxEntries, kept contents over TreeOptions.MaxMemory, a
// manifest or configuration over its size limit, too many layers.
var ErrTooLarge = errors.New("image too large")

// Whiteout markers, as the OCI image spec's layer format names them.
const (
	whiteoutPrefix = ".wh."
	whiteoutMeta   = ".wh..wh."
	opaqueMarker   = ".wh..wh..opq"
)

// ApplyLayer applies the tar stream r as layer number layer (0 for the
// bottom one, increasing upwards) over what the tree holds, as a runtime
// extracts a layer: entries replace what is at their path (a directory
// over a directory only updates its metadata), a whiteout ".wh.NAME"
// removes NAME as the layers below left it, an opaque marker
// ".wh..wh..opq" hides everything the layers below put in its directory,
// hard links may name files of lower layers, and links in an entry's
// parent directories are followed inside the root. It reads r to the end
// of the archive; contents the keep rule does not choose are skipped.
func (t *Tree) ApplyLayer(layer int, r io.Reader) error {
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: layer %d: entry %d: %w", ErrCorrupt, layer+1, t.n+1, err)
		}
		if err := t.apply(layer, hdr, tr, nil); err != nil {
			return fmt.Errorf("layer %d: %w", layer+1, err)
		}
	}
}

// entryName cleans a layer entry's name into an fs.ValidPath name; a name
// that climbs past the root with ".." is refused, as runtimes refuse it.
func entryName(raw string) (string, error) {
	if strings.ContainsRune(raw, 0) {
		return "", fmt.Errorf("%w: %q: a NUL byte in the name", ErrHostile, raw)
	}
	p := path.Clean(strings.TrimLeft(raw, "/"))
	if p == ".." || strings.HasPrefix(p, "../") {
		return "", fmt.Errorf("%w: %q", ErrHostile, raw)
	}
	if p == "" {
		p = "."
	}
	return p, nil
}

// apply places one entry. For an entry of a layer with a table of
// contents, lazy fetches its content and r is nil.
func (t *Tree) apply(layer int, hdr *tar.Header, r io.Reader, lazy *lazyFile) error {
	name, err := entryName(hdr.Name)
	if err != nil {
		return err
	}
	t.n++
	if t.n > t.opt.MaxEntries {
		return fmt.Errorf("%w: more than %d entries", ErrTooLarge, t.opt.MaxEntries)
	}
	if name == "." {
		if hdr.Typeflag == tar.TypeDir {
			t.root.mode, t.root.mtime = fs.ModeDir|hdr.FileInfo().Mode().Perm(), hdr.ModTime
		}
		return nil
	}
	dirName, base := path.Split(name)
	if strings.HasPrefix(base, whiteoutPrefix) {
		return t.whiteout(layer, name, strings.TrimSuffix(dirName, "/"), base)
	}
	dir, dirPath, err := t.mkdirAll(layer, strings.TrimSuffix(dirName, "/"))
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	full := path.Join(dirPath, base)
	n := &node{name: base, mode: hdr.FileInfo().Mode(), mtime: hdr.ModTime, layer: layer}
	switch hdr.Typeflag {
	case tar.TypeReg, '\x00' /* pre-POSIX regular file */, tar.TypeGNUSparse:
		n.mode = n.mode.Perm() | n.mode&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)
		n.size = hdr.Size
		if n.size < 0 {
			return fmt.Errorf("%w: %s: size %d", ErrCorrupt, name, n.size)
		}
		switch {
		case lazy != nil:
			n.lazy = lazy
		case r != nil && n.size > 0 && t.opt.Keep(full, n.size, n.mode):
			if t.held+n.size > t.opt.MaxMemory {
				return fmt.Errorf("%w: kept file contents exceed %d bytes at %s", ErrTooLarge, t.opt.MaxMemory, name)
			}
			b := make([]byte, n.size)
			if _, err := io.ReadFull(r, b); err != nil {
				return fmt.Errorf("%w: %s: %w", ErrCorrupt, name, err)
			}
			t.held += n.size
			n.data = b
		}
	case tar.TypeDir:
		if old := dir.children[base]; old != nil && old.mode.IsDir() {
			old.mode, old.mtime, old.layer = n.mode, n.mtime, layer
			return nil
		}
		n.children = map[string]*node{}
	case tar.TypeSymlink:
		n.link = hdr.Linkname
		n.size = int64(len(hdr.Linkname))
	case tar.TypeLink:
		target, err := t.hardLinkTarget(hdr.Linkname)
		if err != nil {
			return fmt.Errorf("hard link %s: %w", name, err)
		}
		c := *target
		c.name, c.layer = base, layer
		n = &c
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
	default:
		t.n--
		return nil // global headers, unknown types: nothing to extract
	}
	dir.children[base] = n
	return nil
}

// whiteout applies a whiteout entry: the opaque marker or ".wh.NAME".
// Only what lower layers put there is removed: an entry of the same layer
// stays, whatever the order of the two in the tar.
func (t *Tree) whiteout(layer int, name, dirName, base string) error {
	hidden := strings.TrimPrefix(base, whiteoutPrefix)
	if hidden == "" || hidden == "." || hidden == ".." {
		return fmt.Errorf("%w: whiteout %q names no entry of its directory", ErrHostile, name)
	}
	dir, _, err := t.resolveDir(dirName)
	if errors.Is(err, fs.ErrNotExist) {
		if base != opaqueMarker {
			return nil // nothing below to hide
		}
		dir, _, err = t.mkdirAll(layer, dirName)
	}
	if err != nil {
		return fmt.Errorf("whiteout %s: %w", name, err)
	}
	if base == opaqueMarker {
		for k, c := range dir.children {
			if c.layer < layer {
				delete(dir.children, k)
			}
		}
		return nil
	}
	if strings.HasPrefix(base, whiteoutMeta) {
		return nil // other AUFS metadata (.wh..wh.plnk, .wh..wh.aufs): not content
	}
	if c := dir.children[hidden]; c != nil && c.layer < layer {
		delete(dir.children, hidden)
	}
	return nil
}

// hardLinkTarget finds the file a hard link names: an earlier entry of this
// layer or of one below, never a directory. Links in its parents are
// followed; the last component is taken as it is, as link(2) does.
func (t *Tree) hardLinkTarget(linkname string) (*node, error) {
	name, err := entryName(linkname)
	if err != nil {
		return nil, err
	}
	dirName, base := path.Split(name)
	dir, _, err := t.resolveDir(strings.TrimSuffix(dirName, "/"))
	if err == nil {
		if n := dir.children[base]; n != nil && !n.mode.IsDir() {
			return n, nil
		}
	}
	return nil, fmt.Errorf("%w: target %s is not an earlier file", ErrCorrupt, linkname)
}

// resolveDir walks to the directory name, following links inside the root
// as chroot(2) would; it returns the directory and its path with links
// resolved.
func (t *Tree) resolveDir(name string) (*node, string, error) {
	return t.walk(-1, name, false)
}

// mkdirAll is resolveDir creating missing directories (mode 0755, of the
// given layer) as a runtime creates an entry's missing parents.
func (t *Tree) mkdirAll(layer int, name string) (*node, string, error) {
	return t.walk(layer, name, true)
}

func (t *Tree) walk(layer int, name string, create bool) (*node, string, error) {
	todo := splitPath(name)
	var stack []*node // stack[i] is the directory done[i] names
	var done []string
	cur := t.root
	hops := 0
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(done) > 0 {
				done, stack = done[:len(done)-1], stack[:len(stack)-1]
				cur = t.root
				if len(stack) > 0 {
					cur = stack[len(stack)-1]
				}
			}
			continue
		}
		next := cur.children[c]
		switch {
		case next == nil && !create:
			return nil, "", fs.ErrNotExist
		case next == nil:
			next = &node{name: c, mode: fs.ModeDir | 0o755, children: map[string]*node{}, layer: layer}
			cur.children[c] = next
		case next.mode&fs.ModeSymlink != 0:
			hops++
			if hops > rootfs.MaxHops {
				return nil, "", rootfs.ErrTooManyLinks
			}
			if strings.HasPrefix(next.link, "/") {
				done, stack, cur = nil, nil, t.root
			}
			todo = append(splitPath(next.link), todo...)
			continue
		case !next.mode.IsDir():
			return nil, "", fmt.Errorf("%w: %s is not a directory", ErrCorrupt, path.Join(append(done, c)...))
		}
		done, stack, cur = append(done, c), append(stack, next), next
	}
	if len(done) == 0 {
		return t.root, "", nil
	}
	return cur, strings.Join(done, "/"), nil
}

func splitPath(p string) []string {
	if p == "" || p == "." {
		return nil
	}
	return strings.Split(p, "/")
}
