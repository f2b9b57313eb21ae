// Package ostree owns the ostree and bootc conventions of an image root:
// such an image keeps its default /etc under /usr/etc and has no /etc until
// the deployment is made (bootc-image-builder, ostree admin deploy), which
// copies /usr/etc to /etc. View serves that /usr/etc as /etc, so the audit
// reads the configuration the booted system starts with. It never writes
// and never changes a root that has an /etc.
package ostree

import (
	"errors"
	"io"
	"io/fs"
	"slices"
	"strings"

	"github.com/amilint/amilint/internal/image/rootfs"
)

// Layouts of an image's /etc, as the facts name them.
const (
	// LayoutEtc is an image with an /etc.
	LayoutEtc = "etc"
	// LayoutUsrEtc is an ostree/bootc image whose /etc is its /usr/etc.
	LayoutUsrEtc = "usr/etc"
	// LayoutNone is an image with neither.
	LayoutNone = "none"
)

// View returns src with /usr/etc served as /etc when src has no /etc at
// all (not even a link) and has a /usr/etc directory, and reports whether
// it did; otherwise it returns src itself.
func View(src rootfs.Source) (rootfs.Source, bool) {
	if _, err := src.Lstat("etc"); !errors.Is(err, fs.ErrNotExist) {
		return src, false
	}
	fi, err := src.Lstat("usr/etc")
	if err != nil || !fi.IsDir() {
		return src, false
	}
	return usrEtc{src}, true
}

// Layout names the /etc layout of a view's source.
func Layout(view *rootfs.FS) string {
	if u, ok := view.Source().(interface{ UsrEtc() bool }); ok && u.UsrEtc() {
		return LayoutUsrEtc
	}
	if fi, err := view.Stat("etc"); err == nil && fi.IsDir() {
		return LayoutEtc
	}
	return LayoutNone
}

// usrEtc serves a source's usr/etc as etc.
type usrEtc struct{ src rootfs.Source }

// UsrEtc says that /etc is the image's /usr/etc.
func (u usrEtc) UsrEtc() bool { return true }

// Damage passes on the source's first damage (see rootfs.Damaged).
func (u usrEtc) Damage() error {
	if d, ok := u.src.(interface{ Damage() error }); ok {
		return d.Damage()
	}
	return nil
}

// Corruption passes on the source's structures read past their checksums
// (--allow-corrupt).
func (u usrEtc) Corruption() []string {
	if c, ok := u.src.(interface{ Corruption() []string }); ok {
		return c.Corruption()
	}
	return nil
}

// Warnings passes on the source's warnings (a dirty XFS log).
func (u usrEtc) Warnings() []string {
	if w, ok := u.src.(interface{ Warnings() []string }); ok {
		return w.Warnings()
	}
	return nil
}

// name maps a name under etc to the one under usr/etc.
func name(n string) string {
	if n == "etc" {
		return "usr/etc"
	}
	if rest, ok := strings.CutPrefix(n, "etc/"); ok {
		return "usr/etc/" + rest
	}
	return n
}

func (u usrEtc) Lstat(n string) (fs.FileInfo, error) {
	fi, err := u.src.Lstat(name(n))
	if err != nil {
		return nil, pathError(err, n)
	}
	if n == "etc" {
		return renamed{fi, "etc"}, nil
	}
	return fi, nil
}

func (u usrEtc) ReadLink(n string) (string, error) {
	l, err := u.src.ReadLink(name(n))
	return l, pathError(err, n)
}

func (u usrEtc) Open(n string) (fs.File, error) {
	f, err := u.src.Open(name(n))
	if err != nil || n != "." {
		return f, pathError(err, n)
	}
	list, err := u.ReadDir(".")
	if err != nil {
		f.Close()
		return nil, err
	}
	return &root{File: f, list: list}, nil
}

// root is the root directory opened, its listing with etc added.
type root struct {
	fs.File
	list []fs.DirEntry
}

// ReadDir lists the root in chunks, as fs.ReadDirFile says.
func (r *root) ReadDir(count int) ([]fs.DirEntry, error) {
	if count <= 0 {
		out := r.list
		r.list = nil
		return out, nil
	}
	if len(r.list) == 0 {
		return nil, io.EOF
	}
	count = min(count, len(r.list))
	out := r.list[:count]
	r.list = r.list[count:]
	return out, nil
}

func (u usrEtc) ReadFile(n string) ([]byte, error) {
	b, err := fs.ReadFile(u.src, name(n))
	return b, pathError(err, n)
}

func (u usrEtc) ReadDir(n string) ([]fs.DirEntry, error) {
	list, err := u.src.ReadDir(name(n))
	if err != nil || n != "." {
		return list, pathError(err, n)
	}
	fi, err := u.src.Lstat("usr/etc")
	if err != nil {
		return nil, pathError(err, "etc")
	}
	list = append(slices.Clone(list), fs.FileInfoToDirEntry(renamed{fi, "etc"}))
	slices.SortFunc(list, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return list, nil
}

// pathError names n, the name asked for, in an error about its mapped
// name.
func pathError(err error, n string) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return &fs.PathError{Op: pe.Op, Path: n, Err: pe.Err}
	}
	return err
}

// renamed is a FileInfo under another name.
type renamed struct {
	fs.FileInfo
	name string
}

func (r renamed) Name() string { return r.name }
