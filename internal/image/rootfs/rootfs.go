// Package rootfs owns the read-only view of an image's root filesystem with
// chroot semantics. It never reads the host filesystem outside the root it is
// given, and never writes anything.
//
// # The seam
//
// Every target kind (a directory, a tarball, an ext4 partition inside a qcow2
// file, an EBS snapshot) provides a [Source]: a raw tree that never follows
// symbolic links. [New] wraps a Source in an [FS] that resolves every link
// itself, component by component, as the kernel would inside chroot(2):
//
//   - absolute link targets are re-anchored at the image root;
//   - ".." at the root stays at the root;
//   - more than [MaxHops] links in one resolution fail with [ErrTooManyLinks];
//   - a path that resolves to /dev/null is a mask: [FS.Resolve] returns
//     "dev/null" and [FS.Open] fails with [ErrMasked] (no device is ever read).
//
// So `/etc/systemd/system/x.wants/ssh.service -> /lib/systemd/system/ssh.service`
// reads the image's file, never the host's, and a link to `/etc/shadow`,
// `../../../..` or `/proc/self/root/...` stays inside the image.
//
// # Path Names
//
// Names follow io/fs: unrooted, slash-separated, no "." or ".." elements, "."
// for the root ([fs.ValidPath]). [Clean] turns an image-absolute path such as
// "/etc/ecs/ecs.config" into such a name. Results of [FS.Resolve] are names of
// the same form.
package rootfs

import (
	"errors"
	"io"
	"io/fs"
	"path"
	"strings"
	"sync"
)

// MaxHops is the number of symbolic links one resolution may follow, as in
// the Linux kernel (MAXSYMLINKS).
const MaxHops = 40

// ErrTooManyLinks reports a resolution that followed more than MaxHops links
// (a loop, or a chain too long), like ELOOP.
var ErrTooManyLinks = errors.New("too many levels of symbolic links")

// ErrMasked reports that a name resolves to /dev/null, which systemd treats as
// a mask and which the view never opens.
var ErrMasked = errors.New("resolves to /dev/null")

// ErrNotDir reports a path component that is not a directory.
var ErrNotDir = errors.New("not a directory")

// NullName is the resolved name of /dev/null.
const NullName = "dev/null"

// Source is a raw image tree. Its methods receive names whose every
// component but possibly the last is a real directory (the view has resolved
// them), and they never follow a symbolic link themselves: Lstat and
// ReadLink describe a link, ReadDir lists a directory's entries with their
// own types, and Open is only ever called on a name that is not a link.
//
// Errors should be *fs.PathError wrapping fs.ErrNotExist, fs.ErrInvalid or a
// reader's own error for corrupt content.
//
// A Source must be safe for concurrent use: the unit model reads
// enablement, the boot transaction and the machine's configuration at the
// same time, so that a remote image's round trips overlap.
type Source interface {
	fs.ReadDirFS
	fs.ReadLinkFS
}

// FS is the chroot view of a Source. It implements fs.FS, fs.ReadDirFS,
// fs.ReadFileFS, fs.StatFS and fs.ReadLinkFS. It is safe for concurrent use
// when its Source is.
type FS struct {
	src Source
	// memo, when set, remembers every answer of src (see Memo).
	memo *memo
	// remote is set by Remote.
	remote bool
	// disk is set by WithDisk.
	disk func() *Disk
}

// New returns the chroot view of src.
func New(src Source) *FS { return &FS{src: src} }

// Remote returns the view of the same source, marked as remote: a read
// of it that misses the source's cache is a round trip to a service (an
// EBS snapshot read block by block). Its readers then keep many reads in
// flight where, on a local image, they would keep one per core.
func (f *FS) Remote() *FS {
	c := *f
	c.remote = true
	return &c
}

// IsRemote reports whether f is marked as remote (see Remote).
func (f *FS) IsRemote() bool { return f.remote }

// Disk is what a disk image target knows of the filesystems on its disk:
// every volume it has, and the volumes it boots with whose filesystems it
// cannot know.
type Disk struct {
	// Volumes are the disk's partitions (or the whole disk) and logical
	// volumes, in table order.
	Volumes []Volume
	// Other lists, one line each, what the image boots with whose
	// filesystems are unknown: another EBS volume of an AMI, a volume
	// whose contents amilint does not recognise or could not read. While
	// there is one, a filesystem missing from Volumes may still be there.
	Other []string
}

// Volume is one volume of a disk and the names udev gives it under
// /dev/disk: by-uuid and by-label after its filesystem, by-partuuid and
// by-partlabel after its partition table entry ("" for what it lacks).
type Volume struct {
	// Where locates it: "whole disk", "partition 2", "LV vg/root in
	// partition 3".
	Where string
	// Type is the filesystem's type as blkid names it ("ext4", "vfat",
	// "swap"); "" when the volume holds no filesystem (blank, or a
	// partition holding an LVM physical volume).
	Type string
	// UUID and Label are the filesystem's, spelled as udev names the
	// by-uuid and by-label links (a label encoded, a space as \x20).
	UUID, Label string
	// PartUUID and PartLabel are the partition's (GPT unique GUID and
	// name; MBR signature and number), spelled as udev names the links.
	PartUUID, PartLabel string
}

// WithDisk returns the view of the same source whose disk is what disk
// returns (called once, when first asked: a caller may still be reading
// it).
func (f *FS) WithDisk(disk func() *Disk) *FS {
	c := *f
	c.disk = sync.OnceValue(disk)
	return &c
}

// Disk returns what the view's disk image holds, or nil when the view is
// not read from a disk image (a directory, a tarball, a container image).
func (f *FS) Disk() *Disk {
	if f.disk == nil {
		return nil
	}
	return f.disk()
}

// With returns the view of src marked as f is (Remote, WithDisk): src is
// another reading of the same image (ostree's /usr/etc read as /etc).
func (f *FS) With(src Source) *FS { return &FS{src: src, remote: f.remote, disk: f.disk} }

// Source returns the raw tree under the view.
func (f *FS) Source() Source { return f.src }

// Damaged returns the first error f's source met reading the image's own
// structures (a block that fails its checksum, an inode pointing outside
// the device, a failed read), when the source keeps one, as the readers of
// disk image filesystems do; nil otherwise. Code that treats an unreadable
// directory as absent, as systemd does, asks it when done reading: a
// damaged image must not be audited as an intact one.
func Damaged(f *FS) error {
	if d, ok := f.src.(interface{ Damage() error }); ok {
		return d.Damage()
	}
	return nil
}

// Clean turns an image path, absolute ("/etc/x") or not ("etc/x"), into an
// fs.ValidPath name, resolving "." and ".." lexically and clamping at the root.
func Clean(p string) string {
	p = path.Clean("/" + p)
	if p == "/" {
		return "."
	}
	return p[1:]
}

// Resolve returns the name that name denotes once every symbolic link in it
// is followed inside the root. A missing final component is not an error
// for Resolve's result: it returns the resolved name together with an error
// wrapping fs.ErrNotExist, so callers that need "where would this be" (like
// systemd's CHASE_NONEXISTENT) get both.
func (f *FS) Resolve(name string) (string, error) {
	return f.resolve("resolve", name, true)
}

// ResolveParent resolves every component of name but the last, which is
// returned unresolved: the name of the entry itself, as lstat(2) sees it.
func (f *FS) ResolveParent(name string) (string, error) {
	return f.resolve("lstat", name, false)
}

func (f *FS) resolve(op, name string, followLast bool) (string, error) {
	if !fs.ValidPath(name) {
		return "", &fs.PathError{Op: op, Path: name, Err: fs.ErrInvalid}
	}
	hops := 0
	// todo holds the components still to walk; done is the resolved prefix.
	todo := splitName(name)
	var done []string
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(done) > 0 {
				done = done[:len(done)-1]
			}
			continue
		}
		cur := joinName(append(done, c))
		last := len(todo) == 0
		fi, err := f.lstat(cur)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				rest := append(append([]string{}, done...), c)
				rest = append(rest, todo...)
				return Clean(strings.Join(rest, "/")), &fs.PathError{Op: op, Path: name, Err: fs.ErrNotExist}
			}
			return "", &fs.PathError{Op: op, Path: name, Err: err}
		}
		if fi.Mode()&fs.ModeSymlink == 0 || (last && !followLast) {
			if !last && !fi.IsDir() {
				return "", &fs.PathError{Op: op, Path: name, Err: ErrNotDir}
			}
			done = append(done, c)
			continue
		}
		hops++
		if hops > MaxHops {
			return "", &fs.PathError{Op: op, Path: name, Err: ErrTooManyLinks}
		}
		target, err := f.readLink(cur)
		if err != nil {
			return "", &fs.PathError{Op: op, Path: name, Err: err}
		}
		if target == "" {
			return "", &fs.PathError{Op: op, Path: name, Err: fs.ErrNotExist}
		}
		if strings.HasPrefix(target, "/") {
			done = done[:0]
		}
		todo = append(splitName(target), todo...)
		// Consume what is lexically safe now: done holds real directories,
		// so a leading ".." pops it exactly as the walk would.
		for len(todo) > 0 && (todo[0] == "" || todo[0] == "." || todo[0] == "..") {
			if todo[0] == ".." && len(done) > 0 {
				done = done[:len(done)-1]
			}
			todo = todo[1:]
		}
		if isNull(done, todo) {
			// A link to /dev/null (or dev/null reached relatively) is a mask;
			// the device node itself need not exist in the image.
			return NullName, nil
		}
	}
	return joinName(done), nil
}

// isNull reports whether done+todo spells dev/null with nothing after it.
func isNull(done, todo []string) bool {
	var rest []string
	for _, c := range todo {
		if c != "" && c != "." {
			rest = append(rest, c)
		}
	}
	switch len(done) {
	case 0:
		return len(rest) == 2 && rest[0] == "dev" && rest[1] == "null"
	case 1:
		return done[0] == "dev" && len(rest) == 1 && rest[0] == "null"
	}
	return false
}

func splitName(p string) []string {
	if p == "." || p == "" {
		return nil
	}
	return strings.Split(p, "/")
}

func joinName(parts []string) string {
	if len(parts) == 0 {
		return "."
	}
	return strings.Join(parts, "/")
}

// Open opens name, following links inside the root.
func (f *FS) Open(name string) (fs.File, error) {
	r, err := f.resolve("open", name, true)
	if err != nil {
		return nil, err
	}
	if r == NullName {
		return nil, &fs.PathError{Op: "open", Path: name, Err: ErrMasked}
	}
	return f.src.Open(r)
}

// ReadFile reads the whole file name, following links inside the root.
func (f *FS) ReadFile(name string) ([]byte, error) {
	r, err := f.resolve("open", name, true)
	if err != nil {
		return nil, err
	}
	if r == NullName {
		return nil, &fs.PathError{Op: "open", Path: name, Err: ErrMasked}
	}
	return f.readFile(r, name)
}

// readFileBounded reads the file src calls name whole, at most MaxReadFile
// bytes of it; errors name the file shown. It never trusts the size an
// image claims: the buffer grows as bytes really arrive.
func readFileBounded(src fs.FS, name, shown string) ([]byte, error) {
	file, err := src.Open(name)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	b, err := io.ReadAll(io.LimitReader(file, MaxReadFile+1))
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: shown, Err: err}
	}
	if len(b) > MaxReadFile {
		return nil, &fs.PathError{Op: "read", Path: shown, Err: ErrTooLarge}
	}
	return b, nil
}

// MaxReadFile bounds what ReadFile reads of one file: configuration and
// unit files are small, and an image may claim any size.
const MaxReadFile = 64 << 20

// ErrTooLarge reports a file ReadFile refuses to read whole.
var ErrTooLarge = errors.New("file too large to read whole")

// ReadDir lists the directory name, following links to it inside the root.
// The entries describe themselves as lstat(2) would: a link is a link.
func (f *FS) ReadDir(name string) ([]fs.DirEntry, error) {
	r, err := f.resolve("readdir", name, true)
	if err != nil {
		return nil, err
	}
	if r == NullName {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: ErrNotDir}
	}
	return f.readDir(r)
}

// Stat describes the file name denotes, following links.
func (f *FS) Stat(name string) (fs.FileInfo, error) {
	r, err := f.resolve("stat", name, true)
	if err != nil {
		return nil, err
	}
	if r == NullName {
		return nil, &fs.PathError{Op: "stat", Path: name, Err: ErrMasked}
	}
	return f.lstat(r)
}

// Lstat describes the entry name itself, following links only in its parents.
func (f *FS) Lstat(name string) (fs.FileInfo, error) {
	r, err := f.resolve("lstat", name, false)
	if err != nil {
		return nil, err
	}
	return f.lstat(r)
}

// ReadLink returns the target of the link name, exactly as stored (it may be
// absolute; it is an image path, never a host path).
func (f *FS) ReadLink(name string) (string, error) {
	r, err := f.resolve("readlink", name, false)
	if err != nil {
		return "", err
	}
	return f.readLink(r)
}
