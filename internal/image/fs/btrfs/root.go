package btrfs

import (
	"fmt"
	"strings"

	"github.com/amilint/amilint/internal/image/integrity"
)

// maxCandidates bounds the subvolumes searched for an operating system
// (snapper keeps hundreds of snapshots; the default one is found first).
const maxCandidates = 1 << 12

// chooseRoot picks the subvolume shown as /: the default subvolume when
// it holds os-release, else the one subvolume that does.
func (f *FS) chooseRoot() error {
	def, err := f.defaultSubvol()
	if err != nil {
		return err
	}
	ds, err := f.subvolByID(def)
	if err != nil {
		return fmt.Errorf("default subvolume %d: %w", def, err)
	}
	if ds == nil {
		return fmt.Errorf("default subvolume %d has no root item: %w", def, ErrCorrupt)
	}
	if ok, err := f.holdsOS(ds); err != nil {
		return fmt.Errorf("default subvolume %d: %w", def, err)
	} else if ok {
		f.rootSub = ds
		f.subName = f.subvolName(def)
		return nil
	}
	var ids []uint64
	err = f.search(f.rootTree, key{obj: fsTreeObjectid}, key{obj: lastFreeObjectid, typ: 255, off: 1<<64 - 1}, func(k key, _ []byte) bool {
		if k.typ == typeRootItem && (k.obj == fsTreeObjectid || k.obj >= firstFreeObjectid) && k.obj != def &&
			(len(ids) == 0 || ids[len(ids)-1] != k.obj) {
			ids = append(ids, k.obj)
		}
		return len(ids) < maxCandidates
	})
	if err != nil {
		return fmt.Errorf("root tree: %w", err)
	}
	var found []*subvol
	for _, id := range ids {
		s, err := f.subvolByID(id)
		if err != nil {
			return fmt.Errorf("subvolume %d: %w", id, err)
		}
		if s == nil {
			continue
		}
		ok, err := f.holdsOS(s)
		if err != nil {
			return fmt.Errorf("subvolume %d: %w", id, err)
		}
		if ok {
			found = append(found, s)
		}
	}
	switch len(found) {
	case 0:
		// No operating system: show the default subvolume, as a mount
		// would; the caller finds no os-release in it.
		f.rootSub, f.subName = ds, f.subvolName(def)
		return nil
	case 1:
		f.rootSub, f.subName = found[0], f.subvolName(found[0].id)
		return nil
	}
	// Several: the one whose own fstab mounts it at / (a snapshot of the
	// root keeps the root's fstab, naming the root, not itself).
	var self []*subvol
	for _, s := range found {
		if f.mountsItself(s) {
			self = append(self, s)
		}
	}
	if len(self) == 1 {
		f.rootSub, f.subName = self[0], f.subvolName(self[0].id)
		return nil
	}
	var names []string
	for _, s := range found {
		names = append(names, fmt.Sprintf("%d (%s)", s.id, f.subvolName(s.id)))
	}
	return fmt.Errorf("subvolumes %s all hold an operating system and none is the default (%d): which one boots is the kernel command line's rootflags=subvol= (no one of them has an etc/fstab mounting itself at /): %w",
		strings.Join(names, ", "), def, ErrUnsupported)
}

// defaultSubvol returns the default subvolume's id: the root tree's
// "default" directory entry (btrfs subvolume set-default), else 5.
func (f *FS) defaultSubvol() (uint64, error) {
	def := uint64(fsTreeObjectid)
	var perr error
	err := f.search(f.rootTree, key{obj: rootTreeDirObjid, typ: typeDirItem}, key{obj: rootTreeDirObjid, typ: typeDirItem, off: 1<<64 - 1}, func(_ key, b []byte) bool {
		ents, err := parseDirItems(b)
		if err != nil {
			perr = err
			return false
		}
		for _, e := range ents {
			if e.name == "default" {
				def = e.loc.obj
				return false
			}
		}
		return true
	})
	if err == nil {
		err = perr
	}
	if err != nil {
		return 0, fmt.Errorf("root tree: default subvolume: %w", err)
	}
	return def, nil
}

// holdsOS reports whether subvolume s has etc/os-release or
// usr/lib/os-release (of any type: a link is taken as the OS's), looking
// each name up by its hash rather than listing directories.
func (f *FS) holdsOS(s *subvol) (bool, error) {
	for _, p := range [][]string{{"etc", "os-release"}, {"usr", "lib", "os-release"}} {
		dir, found := s.rootID, true
		for i, c := range p {
			obj, ok, err := f.lookupName(s, dir, c)
			if err != nil {
				return false, err
			}
			if !ok {
				found = false
				break
			}
			if i < len(p)-1 {
				n, err := f.inode(uint64(s.idx)<<subvolShift | obj)
				if err != nil {
					return false, err
				}
				if n.mode&0xF000 != 0x4000 {
					found = false
					break
				}
			}
			dir = obj
		}
		if found {
			return true, nil
		}
	}
	return false, nil
}

// lookupName finds name in directory dir of subvolume s by its DIR_ITEM
// (keyed by btrfs_name_hash: crc32c seeded with ~1), as the kernel's
// lookup does; an entry naming another subvolume is not followed.
func (f *FS) lookupName(s *subvol, dir uint64, name string) (uint64, bool, error) {
	h := uint64(integrity.CRC32CRaw(^uint32(1), []byte(name)))
	k := key{obj: dir, typ: typeDirItem, off: h}
	var obj uint64
	var found bool
	var perr error
	err := f.search(s.tree, k, k, func(_ key, b []byte) bool {
		ents, err := parseDirItems(b)
		if err != nil {
			perr = err
			return false
		}
		for _, e := range ents {
			if e.name == name && e.loc.typ == typeInodeItem && e.loc.obj >= firstFreeObjectid && e.loc.obj <= objectidMask {
				obj, found = e.loc.obj, true
				return false
			}
		}
		return true
	})
	if err == nil {
		err = perr
	}
	if err != nil {
		return 0, false, fmt.Errorf("directory %d of subvolume %d: %w", dir, s.id, err)
	}
	return obj, found, nil
}

// subvolName is subvolume id's path from the top level as its back
// references name it ("root", "@/.snapshots/1/snapshot" without the
// directories between), or its number when they do not.
func (f *FS) subvolName(id uint64) string {
	if id == fsTreeObjectid {
		return "<FS_TREE>"
	}
	var parts []string
	for range 64 {
		var name string
		var parent uint64
		_ = f.search(f.rootTree, key{obj: id, typ: 144}, key{obj: id, typ: 144, off: 1<<64 - 1}, func(k key, b []byte) bool {
			// struct btrfs_root_ref: dirid, sequence, name_len, name.
			if len(b) >= 18 {
				if n := int(le.Uint16(b[16:])); n <= len(b)-18 {
					name, parent = string(b[18:18+n]), k.off
				}
			}
			return false
		})
		if name == "" {
			break
		}
		parts = append([]string{name}, parts...)
		if parent == fsTreeObjectid {
			return strings.Join(parts, "/")
		}
		id = parent
	}
	if len(parts) > 0 {
		return strings.Join(parts, "/")
	}
	return fmt.Sprint(id)
}

// maxFstab bounds the etc/fstab read of a candidate subvolume.
const maxFstab = 1 << 20

// mountsItself reports whether subvolume s's etc/fstab (a regular file)
// mounts s at /: a btrfs line for / whose subvol= names s's path from the
// top level, or whose subvolid= is s's id. Anything unreadable is "no".
func (f *FS) mountsItself(s *subvol) bool {
	etc, ok, err := f.lookupName(s, s.rootID, "etc")
	if err != nil || !ok {
		return false
	}
	obj, ok, err := f.lookupName(s, etc, "fstab")
	if err != nil || !ok {
		return false
	}
	n, err := f.inode(uint64(s.idx)<<subvolShift | obj)
	if err != nil || n.mode&0xF000 != 0x8000 || n.size > maxFstab {
		return false
	}
	b := make([]byte, n.size)
	if _, err := f.readFile(n, b, 0); err != nil {
		return false
	}
	name := f.subvolName(s.id)
	for line := range strings.SplitSeq(string(b), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 4 || strings.HasPrefix(fields[0], "#") || fields[1] != "/" || fields[2] != "btrfs" {
			continue
		}
		for opt := range strings.SplitSeq(fields[3], ",") {
			k, v, _ := strings.Cut(opt, "=")
			switch k {
			case "subvol":
				if strings.Trim(v, "/") == name {
					return true
				}
			case "subvolid":
				if v == fmt.Sprint(s.id) {
					return true
				}
			}
		}
	}
	return false
}
