package disktest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/fixtures/testenv"
	"github.com/amilint/amilint/internal/image/imagetest"
)

// Blank makes a sparse file of size bytes.
func Blank(t testing.TB, size int64) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "disk.raw")
	require.NoError(t, os.WriteFile(p, nil, 0o644))
	require.NoError(t, os.Truncate(p, size))
	return p
}

// Place copies the file src into dst at byte offset off, as
// dd conv=notrunc would.
func Place(t testing.TB, src, dst string, off int64) {
	t.Helper()
	b, err := os.ReadFile(src)
	require.NoError(t, err)
	f, err := os.OpenFile(dst, os.O_WRONLY, 0)
	require.NoError(t, err)
	defer f.Close()
	_, err = f.WriteAt(b, off)
	require.NoError(t, err)
}

// Sfdisk partitions the file p with an sfdisk script.
func Sfdisk(t testing.TB, p, script string) {
	t.Helper()
	cmd := exec.Command("sfdisk", "-q", p)
	cmd.Stdin = strings.NewReader(script)
	cmd.Env = append(os.Environ(), "PATH="+os.Getenv("PATH")+":/usr/sbin:/sbin")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "sfdisk: %s", out)
}

// MBRLogical is a 96 MiB MBR disk with primary 1 (8 MiB), extended 2, and
// logicals 5 (40 MiB, holding the filesystem image fsImg) and 6.
func MBRLogical(t testing.TB, fsImg string) string {
	t.Helper()
	p := Blank(t, 96<<20)
	Sfdisk(t, p, fmt.Sprintf("label: dos\n%[1]s1 : start=2048, size=8M, type=83\n%[1]s2 : start=18432, size=80M, type=5\n"+
		"%[1]s5 : start=20480, size=40M, type=83\n%[1]s6 : start=104448, size=16M, type=83\n", p))
	Place(t, fsImg, p, 20480*512)
	return p
}

// GPTRoot is a 96 MiB GPT disk with an EFI partition 1 (8 MiB), a root
// partition 2 (40 MiB, holding fsImg) and a partition 3 on the rest.
func GPTRoot(t testing.TB, fsImg string) string {
	t.Helper()
	p := Blank(t, 96<<20)
	Run(t, "sgdisk", "-n", "1:2048:+8M", "-t", "1:ef00", "-c", "1:EFI",
		"-n", "2:0:+40M", "-t", "2:8300", "-c", "2:root", "-n", "3:0:0", "-t", "3:8300", p)
	Place(t, fsImg, p, (2048+16384)*512)
	return p
}

// LVSegment is one segment of an LV, in bytes, as lvs reports it.
type LVSegment struct{ Start, Size, PVOffset int64 }

// LVM makes an LVM2 PV with the real lvm2 tools on a loop device over
// bytes [off, off+size) of the file p (activation disabled: no
// device-mapper is needed), with a "root" LV of 24 MiB split in two
// segments around a 3 MiB "swap" LV, and returns root's segments with
// their offsets in the PV as lvs and pvs report them.
func LVM(t testing.TB, p string, off, size int64) []LVSegment {
	t.Helper()
	testenv.Root(t, "building an LVM PV (a loop device)")
	loop := strings.TrimSpace(Run(t, "losetup", "-f", "--show", "-o", fmt.Sprint(off), "--sizelimit", fmt.Sprint(size), p))
	defer Run(t, "losetup", "-d", loop)
	vg := fmt.Sprintf("amilint%d%s", os.Getpid(), strings.TrimPrefix(loop, "/dev/loop"))
	cfg := fmt.Sprintf(`devices{use_devicesfile=0 filter=["a|^%s$|","r|.*|"]} activation{udev_sync=0 udev_rules=0} global{activation=0} backup{backup=0 archive=0}`, loop)
	lvmc := func(args ...string) string {
		cmd := exec.Command(args[0], append([]string{"--config", cfg}, args[1:]...)...)
		cmd.Env = append(os.Environ(), "LVM_SUPPRESS_FD_WARNINGS=1", "PATH=/usr/sbin:/sbin:"+os.Getenv("PATH"))
		out, err := cmd.Output()
		require.NoError(t, err, "%v: %s", args, out)
		return string(out)
	}
	lvmc("pvcreate", "-q", loop)
	lvmc("vgcreate", "-q", "-s", "1M", vg, loop)
	lvmc("lvcreate", "-q", "-an", "-Zn", "-y", "-n", "root", "-L", "12M", vg)
	lvmc("lvcreate", "-q", "-an", "-Zn", "-y", "-n", "swap", "-L", "3M", vg)
	lvmc("lvextend", "-q", "-L", "24M", vg+"/root")
	var peStart, extent int64
	_, err := fmt.Sscan(lvmc("pvs", "--noheadings", "--units", "b", "--nosuffix", "-o", "pe_start", loop), &peStart)
	require.NoError(t, err)
	_, err = fmt.Sscan(lvmc("vgs", "--noheadings", "--units", "b", "--nosuffix", "-o", "vg_extent_size", vg), &extent)
	require.NoError(t, err)
	out := lvmc("lvs", "--noheadings", "--units", "b", "--nosuffix", "--segments", "-o", "seg_start,seg_size,seg_pe_ranges", vg+"/root")
	var segs []LVSegment
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var s LVSegment
		var first, last int64
		f := strings.Fields(line)
		require.Len(t, f, 3)
		_, err := fmt.Sscanf(f[0]+" "+f[1], "%d %d", &s.Start, &s.Size)
		require.NoError(t, err)
		_, err = fmt.Sscanf(f[2][strings.LastIndex(f[2], ":")+1:], "%d-%d", &first, &last)
		require.NoError(t, err)
		s.PVOffset = peStart + first*extent
		segs = append(segs, s)
	}
	require.Len(t, segs, 2, "root is split around swap")
	return segs
}

// FillLV copies the filesystem image fsImg into an LV's segments within
// the PV that starts at byte pvOff of the file p.
func FillLV(t testing.TB, p string, pvOff int64, segs []LVSegment, fsImg string) {
	t.Helper()
	data, err := os.ReadFile(fsImg)
	require.NoError(t, err)
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	require.NoError(t, err)
	defer f.Close()
	for _, s := range segs {
		end := min(s.Start+s.Size, int64(len(data)))
		if s.Start >= end {
			continue
		}
		_, err := f.WriteAt(data[s.Start:end], pvOff+s.PVOffset)
		require.NoError(t, err)
	}
}

// LVMDisk is a 64 MiB MBR disk whose partition 1 (type 8e, from 1 MiB) is
// an LVM PV whose "root" LV holds fsImg (at most 24 MiB).
func LVMDisk(t testing.TB, fsImg string) string {
	t.Helper()
	p := Blank(t, 64<<20)
	Sfdisk(t, p, "label: dos\nstart=2048, type=8e\n")
	segs := LVM(t, p, 1<<20, 63<<20)
	FillLV(t, p, 1<<20, segs, fsImg)
	return p
}

// XFS builds an XFS v5 filesystem image of size (at least 300M, mkfs.xfs's
// minimum; the file is sparse) holding dir, from a mkfs.xfs proto file.
func XFS(t testing.TB, dir, size string) string {
	t.Helper()
	tmp := t.TempDir()
	proto := filepath.Join(tmp, "proto")
	imagetest.ProtoFile(t, dir, proto)
	img := filepath.Join(tmp, "fs.xfs")
	Run(t, "truncate", "-s", size, img)
	Run(t, "mkfs.xfs", "-q", "-f", "-p", proto, img)
	return img
}

// GPTBig is a sparse GPT disk of size bytes whose partition 2 (from 9 MiB
// to the end) holds fsImg, copied sparsely.
func GPTBig(t testing.TB, fsImg string, size int64) string {
	t.Helper()
	p := Blank(t, size)
	Run(t, "sgdisk", "-n", "1:2048:+8M", "-t", "1:ef00", "-n", "2:0:0", "-t", "2:8300", p)
	Run(t, "dd", "if="+fsImg, "of="+p, "bs=1M", "conv=notrunc,sparse", "status=none",
		"oflag=seek_bytes", fmt.Sprintf("seek=%d", (2048+16384)*512))
	return p
}

// StripedLVMDisk is a 96 MiB MBR disk whose partitions 1 and 2 (type 8e,
// 44 MiB each) are the two PVs of one volume group, made with the real
// lvm2 tools on loop devices (activation disabled). Its "root" LV is
// striped over both PVs in 64 KiB chunks, in two segments around a linear
// "swap" LV on the first PV, and holds fsImg (at most 24 MiB), written
// chunk by chunk where lvs says each stripe lies.
func StripedLVMDisk(t testing.TB, fsImg string) string {
	t.Helper()
	testenv.Root(t, "building LVM PVs (loop devices)")
	p := Blank(t, 96<<20)
	Sfdisk(t, p, "label: dos\nstart=2048, size=44M, type=8e\nsize=44M, type=8e\n")
	parts := []int64{1 << 20, 45 << 20}
	var loops []string
	offOf := map[string]int64{}
	for _, off := range parts {
		loop := strings.TrimSpace(Run(t, "losetup", "-f", "--show", "-o", fmt.Sprint(off), "--sizelimit", fmt.Sprint(44<<20), p))
		defer Run(t, "losetup", "-d", loop)
		loops = append(loops, loop)
		offOf[loop] = off
	}
	vg := fmt.Sprintf("amilintst%d%s", os.Getpid(), strings.TrimPrefix(loops[0], "/dev/loop"))
	cfg := fmt.Sprintf(`devices{use_devicesfile=0 filter=["a|^%s$|","a|^%s$|","r|.*|"]} activation{udev_sync=0 udev_rules=0} global{activation=0} backup{backup=0 archive=0}`, loops[0], loops[1])
	lvmc := func(args ...string) string {
		cmd := exec.Command(args[0], append([]string{"--config", cfg}, args[1:]...)...)
		cmd.Env = append(os.Environ(), "LVM_SUPPRESS_FD_WARNINGS=1", "PATH=/usr/sbin:/sbin:"+os.Getenv("PATH"))
		out, err := cmd.Output()
		require.NoError(t, err, "%v: %s", args, out)
		return string(out)
	}
	lvmc("pvcreate", "-q", loops[0], loops[1])
	lvmc("vgcreate", "-q", "-s", "1M", vg, loops[0], loops[1])
	lvmc("lvcreate", "-q", "-an", "-Zn", "-y", "-i", "2", "-I", "64k", "-n", "root", "-L", "12M", vg)
	lvmc("lvcreate", "-q", "-an", "-Zn", "-y", "-n", "swap", "-L", "3M", vg, loops[0])
	lvmc("lvextend", "-q", "-i", "2", "-I", "64k", "-L", "24M", vg+"/root")
	peStart := map[string]int64{}
	for _, line := range strings.Split(strings.TrimSpace(lvmc("pvs", "--noheadings", "--units", "b", "--nosuffix", "-o", "pv_name,pe_start", loops[0], loops[1])), "\n") {
		var name string
		var ps int64
		_, err := fmt.Sscan(line, &name, &ps)
		require.NoError(t, err)
		peStart[name] = ps
	}
	var extent int64
	_, err := fmt.Sscan(lvmc("vgs", "--noheadings", "--units", "b", "--nosuffix", "-o", "vg_extent_size", vg), &extent)
	require.NoError(t, err)
	data, err := os.ReadFile(fsImg)
	require.NoError(t, err)
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	require.NoError(t, err)
	defer f.Close()
	out := lvmc("lvs", "--noheadings", "--units", "b", "--nosuffix", "--segments", "-o", "seg_start,seg_size,stripes,stripe_size,seg_pe_ranges", vg+"/root")
	segs := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, segs, 2, "root is split around swap: %s", out)
	for _, line := range segs {
		fl := strings.Fields(line)
		require.GreaterOrEqual(t, len(fl), 5, line)
		var start, size, stripes, ss int64
		_, err := fmt.Sscan(strings.Join(fl[:4], " "), &start, &size, &stripes, &ss)
		require.NoError(t, err)
		require.Equal(t, int64(2), stripes, line)
		require.Len(t, fl[4:], 2, line)
		// Each stripe's first byte on the disk image.
		var base []int64
		for _, r := range fl[4:] {
			dev, rng, _ := strings.Cut(r, ":")
			var first, last int64
			_, err := fmt.Sscanf(rng, "%d-%d", &first, &last)
			require.NoError(t, err, r)
			base = append(base, offOf[dev]+peStart[dev]+first*extent)
		}
		// dm-stripe: chunk k of the segment is chunk k/stripes of stripe k%stripes.
		for rel := int64(0); rel < size; rel += ss {
			lo, hi := start+rel, min(start+rel+ss, int64(len(data)))
			if lo >= hi {
				break
			}
			k := rel / ss
			_, err := f.WriteAt(data[lo:hi], base[k%stripes]+k/stripes*ss)
			require.NoError(t, err)
		}
	}
	return p
}

// Btrfs builds a btrfs filesystem image of size (at least 128M) holding
// dir, with mkfs.btrfs --rootdir.
func Btrfs(t testing.TB, dir, size string) string {
	t.Helper()
	img := filepath.Join(t.TempDir(), "fs.btrfs")
	imagetest.MkfsBtrfs(t, img, size, dir)
	return img
}

// BtrfsFedora builds a btrfs filesystem image of size (at least 128M) laid
// out as Fedora Cloud's: dir copied into subvolume root, written zstd:1
// compressed by the kernel, beside a subvolume home; the top level is the
// default subvolume. It needs root and a loop mount.
func BtrfsFedora(t testing.TB, dir, size string) string {
	t.Helper()
	img := filepath.Join(t.TempDir(), "fs.btrfs")
	imagetest.BtrfsFedora(t, img, size, dir, "compress=zstd:1")
	return img
}

// LUKS makes a LUKS container of version ("luks1", "luks2") in a 20 MiB
// file with cryptsetup, labelled label when it is not "" (LUKS2 only),
// with a cheap key derivation (PBKDF2, 1,000 iterations): its header is
// what the tests read, never its contents.
func LUKS(t testing.TB, version, label string) string {
	t.Helper()
	testenv.Tool(t, "cryptsetup", "cryptsetup-bin")
	dir := t.TempDir()
	p, key := filepath.Join(dir, "luks.img"), filepath.Join(dir, "key")
	require.NoError(t, os.WriteFile(key, []byte("amilint test key"), 0o600))
	require.NoError(t, os.WriteFile(p, nil, 0o644))
	require.NoError(t, os.Truncate(p, 20<<20))
	args := []string{"luksFormat", "--batch-mode", "--type", version, "--key-file", key,
		"--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000", "--disable-locks"}
	if label != "" {
		args = append(args, "--label", label)
	}
	Run(t, "cryptsetup", append(args, p)...)
	return p
}
