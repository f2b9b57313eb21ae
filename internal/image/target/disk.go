//go:build !amilint_guest

package target

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/amilint/amilint/internal/image/disk/archive"
	"github.com/amilint/amilint/internal/image/disk/lvm"
	"github.com/amilint/amilint/internal/image/disk/md"
	"github.com/amilint/amilint/internal/image/disk/partition"
	"github.com/amilint/amilint/internal/image/disk/vdisk"
	"github.com/amilint/amilint/internal/image/fs/tarfs"
	"github.com/amilint/amilint/internal/image/integrity"
	"github.com/amilint/amilint/internal/image/rootfs"
)

// ErrNoRoot reports a disk image none of whose volumes holds an operating
// system root (etc/os-release or usr/lib/os-release) amilint can read.
var ErrNoRoot = errors.New("no root filesystem found")

// filesystem is one filesystem reader that plugs into disk images.
type filesystem struct {
	name string
	// probe reports whether a volume holds this filesystem (its magic).
	probe func(r io.ReaderAt, size int64) bool
	// open reads the filesystem, check deciding what a checksum mismatch
	// does; nil while no reader is built in.
	open func(r io.ReaderAt, size int64, check *integrity.Checker) (rootfs.Source, error)
	// unreadable says why a volume without a reader cannot be read
	// ("not supported" when it is "").
	unreadable string
}

// filesystems is the registry of filesystem readers, an explicit list in
// probe order. A filesystem recognised but without a reader yields a clear
// "not supported" error rather than a silent skip.
func filesystems() []filesystem {
	return []filesystem{
		{name: "ext4", probe: magicAt(1080, "\x53\xef"), open: openExt4},
		{name: "xfs", probe: magicAt(0, "XFSB"), open: openXFS},
		{name: "btrfs", probe: magicAt(65536+64, "_BHRfS_M"), open: openBtrfs},
		{name: "squashfs", probe: magicAt(0, "hsqs")},
		// A LUKS container's filesystem is encrypted: no reader can
		// reach it without the key.
		{name: "crypto_LUKS", probe: magicAt(0, "LUKS\xba\xbe"), unreadable: "encrypted, read only with its key"},
		{name: "swap", probe: func(r io.ReaderAt, size int64) bool {
			return size >= 4096 && (magicAt(4086, "SWAPSPACE2")(r, size) || magicAt(4086, "SWAP-SPACE")(r, size))
		}},
		{name: "ntfs", probe: magicAt(3, "NTFS    ")},
		{name: "vfat", probe: magicAt(82, "FAT32   ")},
		{name: "vfat", probe: magicAt(54, "FAT16   ")},
		{name: "vfat", probe: magicAt(54, "FAT12   ")},
	}
}

func magicAt(off int64, magic string) func(io.ReaderAt, int64) bool {
	return func(r io.ReaderAt, size int64) bool {
		if size < off+int64(len(magic)) {
			return false
		}
		b := make([]byte, len(magic))
		n, _ := r.ReadAt(b, off)
		return n == len(b) && string(b) == magic
	}
}

// volume is a candidate for the image root: a whole disk, a partition or
// a logical volume.
type volume struct {
	desc   string // "partition 2", "LV vg/root in partition 3"
	number int    // the partition it is in (0: the whole disk)
	r      io.ReaderAt
	size   int64
	// err is set for a logical volume amilint cannot read (thin, RAID,
	// on a PV missing from the image): no root, but a volume the disk has.
	err error
}

// openFile opens a regular file or block device target: a tarball or a
// disk image.
func openFile(ctx context.Context, spec string, opt Options) (*Image, error) {
	f, err := os.Open(spec)
	if err != nil {
		return nil, fmt.Errorf("open target: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("open target: %w", err)
	}
	size := fi.Size()
	if isBlockDevice(fi.Mode()) {
		// A device's size is where seeking to its end lands.
		if size, err = f.Seek(0, io.SeekEnd); err != nil {
			f.Close()
			return nil, fmt.Errorf("open target %s: size of device: %w", spec, err)
		}
	}
	counter := vdisk.NewCounter(f)
	var im *Image
	if vdisk.Detect(counter, size) == vdisk.Raw {
		if _, ok := tarfs.Detect(counter); ok {
			if a, ok, err := archive.Open(counter, size, archive.Options{}); ok {
				im, err := openArchiveDisks(spec, a, err, opt)
				if err != nil {
					f.Close()
					return nil, err
				}
				im.closer, im.counter = closers{f, a, im.closer}, counter
				return im, nil
			}
			if err := opt.diskOnly(spec, "a tarball"); err != nil {
				f.Close()
				return nil, err
			}
			if kind := imageArchive(f, size); kind != "" {
				img, err := openArchive(ctx, f, "", opt)
				if err != nil {
					f.Close()
					return nil, fmt.Errorf("open target %s: %w", spec, err)
				}
				return containerImage(spec, kind, "image archive", img, f), nil
			}
			src, err := tarfs.Open(counter, size, tarfs.Options{})
			if err == nil {
				err = notAnImageArchive(src)
			}
			if err != nil {
				f.Close()
				return nil, fmt.Errorf("open target %s: %w", spec, err)
			}
			im = &Image{Name: spec, Kind: "tar", FS: rootfs.New(src), Detail: "tarball"}
		}
	}
	if im == nil {
		im, err = OpenDisk(spec, counter, size, opt)
		if err != nil {
			f.Close()
			return nil, err
		}
	}
	im.closer, im.counter = closers{f, im.closer}, counter
	return im, nil
}

// openArchiveDisks opens the root filesystem of a disk archive (a GCE
// image tarball, an OVA): the first of its disks that holds one.
func openArchiveDisks(spec string, a *archive.Archive, err error, opt Options) (*Image, error) {
	if err != nil {
		return nil, fmt.Errorf("open target %s: %w", spec, err)
	}
	var errs []error
	for i, d := range a.Disks {
		// The archive's other disks are volumes the machine boots with
		// too: their filesystems are not this disk's.
		dopt := opt
		dopt.otherVolumes = nil
		for j, o := range a.Disks {
			if j != i {
				dopt.otherVolumes = append(dopt.otherVolumes, fmt.Sprintf("%s member %s", a.Kind, o.Name))
			}
		}
		im, err := OpenDisk(spec, d.R, d.Size, dopt)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		im.Detail = fmt.Sprintf("%s (%s) member %s, %s; %s", a.Kind, a.Compression, d.Name, d.Detail, im.Detail)
		return im, nil
	}
	a.Close()
	if len(errs) == 1 {
		return nil, errs[0]
	}
	var msgs []string
	for _, e := range errs {
		msgs = append(msgs, e.Error())
	}
	return nil, fmt.Errorf("open target %s: no disk of the %s holds a root filesystem: %s: %w", spec, a.Kind, strings.Join(msgs, "; "), errs[0])
}

// OpenDisk opens the disk image r of size bytes (any container format
// vdisk reads, raw included) and finds its root filesystem: the volume
// opt.Partition names, or else the first volume whose filesystem holds
// etc/os-release or usr/lib/os-release. Other target kinds (EBS
// snapshots) reuse it with their own reader. The returned Image does not
// close r.
func OpenDisk(name string, r io.ReaderAt, size int64, opt Options) (*Image, error) {
	var dopt vdisk.Options
	var backing io.Closer
	if opt.Backing != "" {
		b, f, err := openBacking(opt.Backing)
		if err != nil {
			return nil, fmt.Errorf("open target %s: %w", name, err)
		}
		dopt.Backing, backing = b, f
	}
	im, err := openDisk(name, r, size, opt, dopt)
	if err != nil {
		if backing != nil {
			backing.Close()
		}
		return nil, err
	}
	im.closer = backing
	return im, nil
}

func openDisk(name string, r io.ReaderAt, size int64, opt Options, dopt vdisk.Options) (*Image, error) {
	check := opt.checker(name)
	dopt.Check = check
	disk, format, err := vdisk.Open(r, size, dopt)
	if err != nil {
		return nil, fmt.Errorf("open target %s: %w", name, err)
	}
	tab, err := partition.ReadWith(disk, disk.Size(), check)
	if err != nil {
		return nil, fmt.Errorf("open target %s: %s image: %w", name, format, err)
	}
	vols, err := volumes(disk, tab, opt.Partition, check)
	if err != nil {
		return nil, fmt.Errorf("open target %s: %w", name, err)
	}
	// Why the tree may not be what the image boots with, or which copy of
	// a structure was read: the container's and the table's say, then the
	// filesystem's.
	warnings := append(vdisk.Warnings(disk), tab.Warnings...)
	var notes []string
	var errs []error
	var fallback *Image // with --partition: the first readable filesystem
	// Every volume's identity is read beside the root's search.
	lvs := func() ([]volume, error) { return vols, nil }
	if opt.Partition != 0 {
		lvs = func() ([]volume, error) { return volumes(disk, tab, 0, check) }
	}
	ids := diskIdentity(disk, disk.Size(), tab, lvs, opt.otherVolumes)
	for _, v := range vols {
		if v.err != nil {
			notes = append(notes, fmt.Sprintf("%s: %v", v.desc, v.err))
			continue
		}
		src, fsName, err := openVolume(v, check)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", v.desc, err))
			continue
		}
		if src == nil {
			notes = append(notes, v.desc+": "+fsName)
			continue
		}
		view := rootfs.New(src).WithDisk(ids)
		im := &Image{Name: name, Kind: "disk", FS: view, check: check, Warnings: warnings,
			Detail: fmt.Sprintf("%s image, %s table, %s, %s", format, tab.Scheme, v.desc, fsName)}
		ok, err := hasOSRelease(view, check.Lenient())
		if err != nil {
			// A filesystem that cannot say whether it holds os-release
			// is damaged, and may be the root: never "no root".
			errs = append(errs, fmt.Errorf("%s: %s: %w", v.desc, fsName, err))
			continue
		}
		if w, isW := src.(interface{ Warnings() []string }); isW {
			im.Warnings = append(im.Warnings, w.Warnings()...)
		}
		// Structures read from a second copy while the root was found
		// (btrfs DUP tree blocks): the disk is damaged, the answer not.
		if r, isR := src.(interface{ Repaired() []string }); isR {
			im.Warnings = append(im.Warnings, r.Repaired()...)
		}
		if ok {
			return im, nil
		}
		if opt.Partition != 0 && fallback == nil {
			fallback = im
		}
		notes = append(notes, v.desc+": "+fsName+" without os-release")
	}
	if fallback != nil {
		return fallback, nil
	}
	if len(errs) > 0 {
		// A damaged volume may be the root: say so rather than "no root".
		return nil, fmt.Errorf("open target %s: %w", name, errors.Join(errs...))
	}
	return nil, fmt.Errorf("open target %s: %w in %s image, %s table (%s); choose a partition with --partition",
		name, ErrNoRoot, format, tab.Scheme, strings.Join(notes, "; "))
}

// openBacking opens a backing file's guest disk; the caller closes the file.
func openBacking(path string) (vdisk.Disk, io.Closer, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("open backing file: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("open backing file: %w", err)
	}
	d, _, err := vdisk.Open(f, fi.Size(), vdisk.Options{})
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("open backing file %s: %w", path, err)
	}
	return d, f, nil
}

// closers closes several things, reporting every failure.
type closers []io.Closer

func (c closers) Close() error {
	var errs []error
	for _, x := range c {
		if x != nil {
			errs = append(errs, x.Close())
		}
	}
	return errors.Join(errs...)
}

// volumes lists the candidate volumes of a disk in table order, LVM
// physical volumes expanded into their logical volumes; check decides what
// an LVM checksum mismatch does.
func volumes(disk vdisk.Disk, tab *partition.Table, want int, check *integrity.Checker) ([]volume, error) {
	var vols []volume
	if tab.Scheme == partition.None {
		if want > 1 {
			return nil, fmt.Errorf("partition %d: the disk has no partition table", want)
		}
		vols = []volume{{desc: "whole disk", number: want, r: disk, size: disk.Size()}}
	} else {
		var nums []string
		found := false
		for _, p := range tab.Partitions {
			nums = append(nums, fmt.Sprint(p.Number))
			found = found || p.Number == want
			// Every partition is a candidate here: an LV chosen by one of
			// its PVs' partitions may need the others.
			vols = append(vols, volume{desc: fmt.Sprintf("partition %d", p.Number), number: p.Number, r: p.Section(disk), size: p.Size})
		}
		if want != 0 && !found {
			return nil, fmt.Errorf("partition %d not found (the %s table has %s)", want, tab.Scheme, strings.Join(nums, ", "))
		}
	}
	// md arrays first: an LVM physical volume may be one.
	vols, err := mdArrays(vols, want, check)
	if err != nil {
		return nil, err
	}
	// LVM physical volumes: those of one volume group are assembled
	// together (a striped LV spans them), its LVs listed where its first
	// PV is.
	type group struct {
		pvs     []*lvm.PV
		descs   []string
		numbers []int
	}
	groups := map[string]*group{}
	pvOf := make([]*lvm.PV, len(vols))
	for i, v := range vols {
		if !lvm.Probe(v.r, v.size) {
			continue
		}
		pv, err := lvm.ReadPVWith(v.r, v.size, check.Within(v.where()))
		if err != nil && (want == 0 || v.number == want) {
			return nil, fmt.Errorf("%s: %w", v.desc, err)
		}
		if err != nil {
			continue // a damaged PV on a partition not chosen
		}
		pvOf[i] = pv
		g := groups[pv.VGID()]
		if g == nil {
			g = &group{}
			groups[pv.VGID()] = g
		}
		g.pvs = append(g.pvs, pv)
		g.descs = append(g.descs, v.desc)
		g.numbers = append(g.numbers, v.number)
	}
	var out []volume
	for i, v := range vols {
		pv := pvOf[i]
		if pv == nil {
			if want == 0 || v.number == want {
				out = append(out, v)
			}
			continue
		}
		g := groups[pv.VGID()]
		if g.pvs[0] != pv {
			continue // listed with the group's first PV
		}
		number, ok := listedAs(v.number, g.numbers, want)
		if !ok {
			continue
		}
		vg, err := lvm.Assemble(g.pvs)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", strings.Join(g.descs, ", "), err)
		}
		for _, lv := range vg.LVs {
			desc := fmt.Sprintf("LV %s/%s in %s", vg.Name, lv.Name, strings.Join(g.descs, " and "))
			// A thin or RAID LV, or one on a PV missing from the image, is
			// not a root we read; it is listed for the disk's identities.
			out = append(out, volume{desc: desc, number: number, r: lv, size: lv.Size(), err: lv.Err()})
		}
	}
	return out, nil
}

// mdArrays replaces the members of md arrays (metadata 1.1 and 1.2) among
// vols by their arrays, each listed where its first member is: a RAID1
// or multipath array by a volume that reads the data of its freshest
// active member (the one with the most events), which holds it whole;
// any other level by a volume that says why amilint cannot read it. A
// member of metadata 0.90 or 1.0 keeps its data from its start and reads
// as the filesystem it holds.
func mdArrays(vols []volume, want int, check *integrity.Checker) ([]volume, error) {
	type array struct {
		members []*md.Member
		vols    []volume
	}
	arrays := map[string]*array{}
	memberOf := make([]*md.Member, len(vols))
	for i, v := range vols {
		m, err := md.Read(v.r, v.size, check.Within(v.where()))
		if err != nil && (want == 0 || v.number == want) {
			return nil, fmt.Errorf("%s: %w", v.desc, err)
		}
		if err != nil || m == nil {
			continue // no member, or a damaged one on a partition not chosen
		}
		memberOf[i] = m
		a := arrays[m.ArrayUUID]
		if a == nil {
			a = &array{}
			arrays[m.ArrayUUID] = a
		}
		a.members = append(a.members, m)
		a.vols = append(a.vols, v)
	}
	var out []volume
	for i, v := range vols {
		m := memberOf[i]
		if m == nil {
			out = append(out, v)
			continue
		}
		a := arrays[m.ArrayUUID]
		if a.members[0] != m {
			continue // listed with the array's first member
		}
		var descs []string
		var numbers []int
		for _, mv := range a.vols {
			descs, numbers = append(descs, mv.desc), append(numbers, mv.number)
		}
		number, ok := listedAs(v.number, numbers, want)
		if !ok {
			continue
		}
		desc := fmt.Sprintf("md %s (%s) in %s", cmp.Or(m.Name, m.ArrayUUID), m.Level, strings.Join(descs, " and "))
		best := -1
		for j, am := range a.members {
			if am.Active() && (best < 0 || am.Events > a.members[best].Events) {
				best = j
			}
		}
		switch {
		case !m.Level.Whole():
			out = append(out, volume{desc: desc, number: number, r: v.r, size: 0,
				err: fmt.Errorf("a %s array stripes its data over its members: read only once assembled", m.Level)})
		case !m.Mirror():
			out = append(out, volume{desc: desc, number: number, r: v.r, size: 0,
				err: fmt.Errorf("a reshape to %s is in progress: its data is read only once assembled", m.NewLevel)})
		case best < 0:
			out = append(out, volume{desc: desc, number: number, r: v.r, size: 0,
				err: errors.New("no member holds the array's data (each is a spare or faulty)")})
		default:
			bm, bv := a.members[best], a.vols[best]
			out = append(out, volume{desc: desc, number: number, r: io.NewSectionReader(bv.r, bm.DataOffset, bm.DataSize), size: bm.DataSize})
		}
	}
	return out, nil
}

// listedAs is the partition number a volume assembled from the partitions
// numbers (an LV of a volume group, an md array) is listed under, first
// the number of the first of them; with --partition want, want when it is
// one of them, else the volume is not listed (ok false).
func listedAs(first int, numbers []int, want int) (number int, ok bool) {
	if want == 0 {
		return first, true
	}
	return want, slices.Contains(numbers, want)
}

// where locates v for the lines of checksum mismatches: "" for the whole
// disk, else its description.
func (v volume) where() string {
	if v.desc == "whole disk" {
		return ""
	}
	return v.desc
}

// openVolume opens the filesystem on v. A volume with no filesystem amilint
// recognises, or one it recognises but has no reader for, yields a nil
// Source and a note.
func openVolume(v volume, check *integrity.Checker) (rootfs.Source, string, error) {
	for _, f := range filesystems() {
		if !f.probe(v.r, v.size) {
			continue
		}
		if f.open == nil {
			why := cmp.Or(f.unreadable, "not supported")
			return nil, f.name + " (" + why + ")", nil
		}
		src, err := f.open(v.r, v.size, check.Within(v.where()))
		if err != nil {
			return nil, f.name, err
		}
		return src, f.name, nil
	}
	return nil, "no known filesystem", nil
}

// hasOSRelease reports whether a filesystem is an operating system root.
// A path that does not lead to a file (missing, through a non-directory,
// masked, a symlink loop) is a well-formed answer of "no"; any other error
// (a corrupt or truncated filesystem, a failed read) is returned, so a
// damaged root is reported as damaged rather than as absent.
//
// Unless lenient (recording damage in the order it is found), it looks
// usr/lib up beside etc/os-release: on a remote disk each directory on
// the way is a round trip, and on an AMI etc/os-release links to
// ../usr/lib/os-release. Never usr/lib/os-release itself before
// etc/os-release has answered: like every reader of os-release, the
// search reads it only when etc/os-release is not a file, and damage met
// there is kept (rootfs.Damaged) and fails an audit that would never
// have read it. usr/lib is read by every audit (usr/lib/systemd/system).
func hasOSRelease(view *rootfs.FS, lenient bool) (bool, error) {
	if !lenient {
		var wg sync.WaitGroup
		defer wg.Wait()
		wg.Go(func() { _, _ = view.Stat("usr/lib") })
	}
	for _, name := range []string{"etc/os-release", "usr/lib/os-release"} {
		fi, err := view.Stat(name)
		switch {
		case err == nil:
			if fi.Mode().IsRegular() {
				return true, nil
			}
		case errors.Is(err, fs.ErrNotExist), errors.Is(err, rootfs.ErrNotDir),
			errors.Is(err, rootfs.ErrMasked), errors.Is(err, rootfs.ErrTooManyLinks):
		default:
			return false, fmt.Errorf("look for %s: %w", name, err)
		}
	}
	return false, nil
}
