//go:build !amilint_guest

package target

import (
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/amilint/amilint/internal/image/disk/lvm"
	"github.com/amilint/amilint/internal/image/disk/md"
	"github.com/amilint/amilint/internal/image/disk/partition"
	"github.com/amilint/amilint/internal/image/disk/volid"
	"github.com/amilint/amilint/internal/image/rootfs"
)

// typeBIOSBoot is the GPT type of GRUB's BIOS boot partition, which holds
// GRUB's core image and never a filesystem.
const typeBIOSBoot = "21686148-6449-6E6F-744E-656564454649"

// idVolume is one volume whose identity diskIdentity reads.
type idVolume struct {
	vol   rootfs.Volume
	r     io.ReaderAt
	size  int64
	gpt   string // the GPT partition type ("" for MBR, an LV, the whole disk)
	isLV  bool
	lvErr error // an LV amilint cannot read (thin, RAID, a PV missing)
}

// diskIdentity starts reading the identity of every volume of a disk (the
// names udev gives them under /dev/disk) and returns the function that
// waits for it. Each volume's superblocks are one read (FAT's root
// directory a few more), all in flight at once, beside the root's reading:
// on a remote snapshot they add no round trip the root's reading does not
// outlast. lvs lists the disk's volumes, logical volumes included (every
// one of them, whichever --partition chose); others are the volumes the
// image boots with beyond this disk (an AMI's other EBS snapshots).
func diskIdentity(disk io.ReaderAt, size int64, tab *partition.Table, lvs func() ([]volume, error), others []string) func() *rootfs.Disk {
	var d *rootfs.Disk
	done := make(chan struct{})
	go func() {
		defer close(done)
		d = identifyAll(disk, size, tab, lvs, others)
	}()
	return func() *rootfs.Disk {
		<-done
		return d
	}
}

// identifyAll reads the identity of every partition (or the whole disk)
// and logical volume at once.
func identifyAll(disk io.ReaderAt, size int64, tab *partition.Table, lvs func() ([]volume, error), others []string) *rootfs.Disk {
	d := &rootfs.Disk{Volumes: []rootfs.Volume{}, Other: append([]string{}, others...)}
	var vs []idVolume
	if tab.Scheme == partition.None {
		vs = append(vs, idVolume{vol: rootfs.Volume{Where: "whole disk"}, r: disk, size: size})
	}
	for _, p := range tab.Partitions {
		v := idVolume{vol: rootfs.Volume{Where: fmt.Sprintf("partition %d", p.Number), PartUUID: p.UUID}, r: p.Section(disk), size: p.Size}
		if tab.Scheme == partition.GPT {
			v.gpt = p.Type
			if p.Name != "" {
				v.vol.PartLabel = volid.Encode(p.Name)
			}
		}
		vs = append(vs, v)
	}
	all, err := lvs()
	if err != nil {
		d.Other = append(d.Other, fmt.Sprintf("LVM: %v", err))
	}
	for _, lv := range all {
		switch {
		case strings.HasPrefix(lv.desc, "LV "):
			vs = append(vs, idVolume{vol: rootfs.Volume{Where: lv.desc}, r: lv.r, size: lv.size, isLV: true, lvErr: lv.err})
		case strings.HasPrefix(lv.desc, "md "):
			// An array: its filesystem, or the PV whose LVs are listed.
			vs = append(vs, idVolume{vol: rootfs.Volume{Where: lv.desc}, r: lv.r, size: lv.size, lvErr: lv.err})
		}
	}
	notes := make([]string, len(vs))
	var wg sync.WaitGroup
	for i := range vs {
		if vs[i].lvErr != nil {
			notes[i] = fmt.Sprintf("%s: %v", vs[i].vol.Where, vs[i].lvErr)
			continue
		}
		wg.Go(func() { notes[i] = identify(&vs[i]) })
	}
	wg.Wait()
	for i, v := range vs {
		if v.lvErr == nil {
			d.Volumes = append(d.Volumes, v.vol)
		}
		if notes[i] != "" {
			d.Other = append(d.Other, notes[i])
		}
	}
	return d
}

// identify reads v's filesystem identity into v.vol, and returns why its
// filesystem is unknown ("" when it is known, or known to be none).
func identify(v *idVolume) string {
	id, err := volid.Read(v.r, v.size)
	if err != nil {
		return fmt.Sprintf("%s: %v", v.vol.Where, err)
	}
	if id.Type == "" {
		switch {
		case id.Blank, strings.EqualFold(v.gpt, typeBIOSBoot):
			return ""
		case !v.isLV && lvm.Probe(v.r, v.size):
			return "" // an LVM physical volume: its LVs are listed
		case !v.isLV && md.Probe(v.r, v.size):
			return "" // an md array's member: its array is listed
		}
		return v.vol.Where + ": no filesystem amilint recognises"
	}
	v.vol.Type, v.vol.UUID = id.Type, volid.Encode(id.UUID)
	if id.Label != "" {
		v.vol.Label = volid.Encode(id.Label)
	}
	if id.LabelUnread {
		return v.vol.Where + ": its FAT label lies past what amilint reads"
	}
	return ""
}
