//go:build !amilint_guest

package cli

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/fixtures/testenv"
	"github.com/amilint/amilint/internal/audit"
	"github.com/amilint/amilint/internal/audit/facts"
	"github.com/amilint/amilint/internal/audit/finding"
	"github.com/amilint/amilint/internal/image/disk/partition"
	"github.com/amilint/amilint/internal/image/disktest"
	"github.com/amilint/amilint/internal/image/integrity"
	"github.com/amilint/amilint/internal/image/target"
)

// The mutation harness: "never a silent wrong answer", judged by each
// format's own checker. For each format, an image made by the real tools
// holds a small root with 40 enabled services; the audit reads it once
// through a recorder that notes every byte the readers read; then N
// seeded single-byte changes, each in a byte of the format's own
// structures among those read, are audited one by one. A change gives
// exit 2, or the same answer (units' states and findings), or a changed
// answer, which the format's checker (e2fsck -fn, xfs_repair -n,
// btrfs check --readonly, sgdisk -v, pvck, qemu-img check) then judges: a changed answer the
// checker calls corrupt is a silent wrong answer and fails the test,
// with the command line that replays it. A mismatch under --allow-corrupt
// must give the image-corrupt finding or still exit 2. qcow2, which carries
// no checksums, is judged as the others: its structural checks must hold
// where qemu-img check's do.
//
// AMILINT_MUTATIONS sets the flips per format (500 by default, btrfs 200;
// make fuzz runs more), AMILINT_MUTATION_SEED the seed (1 by default).
// AMILINT_MUTATION_JUDGE=all (or -mutation.judge-all) runs the checker on
// every flip, not only on those that change the answer, and the table
// then also says where amilint and the checker disagree the other way: an
// exit 2 the checker finds nothing wrong with, a same answer over a
// structure the checker calls corrupt (a copy read instead, say).
var (
	mutationFormat = flag.String("mutation.format", "", "run the mutation harness for this format only (ext4, xfs, btrfs, gpt, lvm, vhdx, qcow2)")
	mutationSeed   = flag.Uint64("mutation.seed", 0, "seed of the flips (default: $AMILINT_MUTATION_SEED, else 1)")
	mutationFlips  = flag.Int("mutation.flips", 0, "flips per format (default: $AMILINT_MUTATIONS, else 500)")
	mutationOnly   = flag.Int("mutation.only", -1, "replay only this flip (its index) of the seed")
	mutationJudge  = flag.Bool("mutation.judge-all", false, "run the format's checker on every flip (default: $AMILINT_MUTATION_JUDGE=all), not only on those that change the answer")
)

// mutationRecipe versions the way the harness builds its images: the key
// of the cache under .cache/checksum changes with it.
const mutationRecipe = "v1"

// mutationTarget is one format the harness damages.
type mutationTarget struct {
	name string
	// build makes the image of tree at path out.
	build func(t *testing.T, tree, out string)
	// domain says which bytes of the image are the format's own
	// structures (the rest, a filesystem inside a container, is another
	// format's); nil means all.
	domain func(t *testing.T, img io.ReaderAt, size int64) []span
	// judge runs the format's checker on the image file: whether it
	// calls it corrupt, and what it said.
	judge func(t *testing.T, path string) (bool, string)
	root  bool // building or judging needs root (loop devices)
	// flips, when set, is the format's number of flips unless one is
	// asked for ($AMILINT_MUTATIONS, -mutation.flips).
	flips int
}

// span is a byte range [lo, hi) of an image.
type span struct{ lo, hi int64 }

// mutationCounts is a format's line of the table.
type mutationCounts struct {
	flips, exit2, same, changedMissed, silent, lenientChecked int
	// With every flip judged: exit 2 where the checker sees nothing
	// wrong, and the same answer where it sees corruption.
	judged, exit2Clean, sameCorrupt int
}

func (c *mutationCounts) add(d mutationCounts) {
	c.flips += d.flips
	c.exit2 += d.exit2
	c.same += d.same
	c.changedMissed += d.changedMissed
	c.silent += d.silent
	c.lenientChecked += d.lenientChecked
	c.judged += d.judged
	c.exit2Clean += d.exit2Clean
	c.sameCorrupt += d.sameCorrupt
}

func TestMutations(t *testing.T) {
	for _, tool := range [][2]string{{"mke2fs", "e2fsprogs"}, {"e2fsck", "e2fsprogs"}, {"mkfs.xfs", "xfsprogs"}, {"xfs_repair", "xfsprogs"},
		{"sgdisk", "gdisk"}, {"qemu-img", "qemu-utils"}, {"pvck", "lvm2"}, {"mkfs.btrfs", "btrfs-progs"}, {"btrfs", "btrfs-progs"}} {
		testenv.Tool(t, tool[0], tool[1])
	}
	flips, asked := 500, false
	if n, err := strconv.Atoi(os.Getenv("AMILINT_MUTATIONS")); err == nil && n > 0 {
		flips, asked = n, true
	}
	if *mutationFlips > 0 {
		flips, asked = *mutationFlips, true
	}
	seed := uint64(1)
	if n, err := strconv.ParseUint(os.Getenv("AMILINT_MUTATION_SEED"), 10, 64); err == nil {
		seed = n
	}
	if *mutationSeed != 0 {
		seed = *mutationSeed
	}
	judgeAll := *mutationJudge || os.Getenv("AMILINT_MUTATION_JUDGE") == "all"
	tree := mutationTree(t)
	aud, err := audit.New(audit.Config{})
	require.NoError(t, err)
	cache := filepath.Join(testenv.RepoRoot(t), ".cache", "checksum", "mutation")
	require.NoError(t, os.MkdirAll(cache, 0o755))

	var mu sync.Mutex
	table := map[string]mutationCounts{}
	for _, mt := range mutationTargets() {
		if *mutationFormat != "" && *mutationFormat != mt.name {
			continue
		}
		t.Run(mt.name, func(t *testing.T) {
			if mt.root {
				testenv.Root(t, "building and checking an LVM PV (loop devices)")
			}
			img := cachedImage(t, cache, mt, tree)
			n := flips
			if mt.flips > 0 && !asked {
				n = mt.flips
			}
			c := runMutations(t, aud, mt, img, seed, n, judgeAll)
			mu.Lock()
			table[mt.name] = c
			mu.Unlock()
		})
	}
	var b strings.Builder
	fmt.Fprintf(&b, "mutation harness, seed %d: single-byte changes in the bytes each format's structures the audit reads\n", seed)
	fmt.Fprintf(&b, "%-6s %6s %7s %12s %28s %15s %16s\n", "format", "flips", "exit 2", "same answer", "changed, judge also misses", "silent wrong", "lenient checked")
	for _, mt := range mutationTargets() {
		c, ok := table[mt.name]
		if !ok {
			continue
		}
		fmt.Fprintf(&b, "%-6s %6d %7d %12d %28d %15d %16d\n", mt.name, c.flips, c.exit2, c.same, c.changedMissed, c.silent, c.lenientChecked)
	}
	if judgeAll {
		fmt.Fprintf(&b, "every flip judged:\n%-6s %7s %25s %29s\n", "format", "judged", "exit 2, checker sees none", "same answer, checker corrupt")
		for _, mt := range mutationTargets() {
			if c, ok := table[mt.name]; ok {
				fmt.Fprintf(&b, "%-6s %7d %25d %29d\n", mt.name, c.judged, c.exit2Clean, c.sameCorrupt)
			}
		}
	}
	t.Log("\n" + b.String())
	_ = os.WriteFile(filepath.Join(cache, "table.txt"), []byte(b.String()), 0o644)
}

// mutationTree is the small root the images hold: the hardened fixture
// (its own enabled services) and 40 more services enabled in
// multi-user.target.wants, enough entries for an indexed directory.
func mutationTree(t *testing.T) string {
	dir := materialize(t, "hardened")
	sys := filepath.Join(dir, "usr/lib/systemd/system")
	wants := filepath.Join(dir, "etc/systemd/system/multi-user.target.wants")
	require.NoError(t, os.MkdirAll(wants, 0o755))
	for i := range 40 {
		name := fmt.Sprintf("svc%02d.service", i)
		unit := fmt.Sprintf("[Unit]\nDescription=service %d\n[Service]\nExecStart=/usr/bin/sleep infinity\nRestart=always\nRestartSec=%d\n[Install]\nWantedBy=multi-user.target\n", i, i%3)
		require.NoError(t, os.MkdirAll(sys, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(sys, name), []byte(unit), 0o644))
		require.NoError(t, os.Symlink("/usr/lib/systemd/system/"+name, filepath.Join(wants, name)))
	}
	return dir
}

// treeDigest hashes a tree: names, modes, contents and link targets, in
// order, with fixed times (the images are built with fixed times too).
func treeDigest(t *testing.T, dir string) string {
	h := sha256.New()
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%v\x00", rel, fi.Mode())
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			l, err := os.Readlink(p)
			if err != nil {
				return err
			}
			fmt.Fprintf(h, "%s\x00", l)
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			h.Write(b)
		}
		return nil
	}))
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// cachedImage returns the format's image of tree, from the cache under
// .cache/checksum/mutation keyed by the recipe and the tree's content, or
// built by the real tools and put there.
func cachedImage(t *testing.T, cache string, mt mutationTarget, tree string) string {
	p := filepath.Join(cache, fmt.Sprintf("%s-%s-%s.img", mt.name, mutationRecipe, treeDigest(t, tree)))
	if _, err := os.Stat(p); err == nil {
		return p
	}
	tmp := filepath.Join(t.TempDir(), "image")
	mt.build(t, tree, tmp)
	b, err := os.ReadFile(tmp)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(p+".tmp", b, 0o644))
	require.NoError(t, os.Rename(p+".tmp", p))
	return p
}

// Fixed identities and times, so an image built again is the same image.
const (
	fixedUUID  = "6a1c2f0e-5b1d-4d6e-9c7a-2f3e4d5c6b7a"
	fixedTime  = "1700000000"
	ext4Offset = (2048 + 16384) * 512 // partition 2 of disktest.GPTRoot
)

// runTool runs a command under a timeout with extra environment, failing
// the test with its output if it fails.
func runTool(t *testing.T, env []string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(append(os.Environ(), "PATH="+os.Getenv("PATH")+":/usr/sbin:/sbin"), env...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s %v: %s", name, args, out)
	return string(out)
}

// judgeTool runs a checker under a timeout: its exit code and output.
func judgeTool(name string, args ...string) (int, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), "PATH="+os.Getenv("PATH")+":/usr/sbin:/sbin", "LVM_SUPPRESS_FD_WARNINGS=1")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, string(out)
	case errors.As(err, &ee):
		return ee.ExitCode(), string(out)
	}
	return -1, err.Error() + ": " + string(out)
}

// buildExt4 makes the ext4 filesystem of tree at out: 1 KiB blocks (more
// structures per byte), metadata_csum, directories indexed by e2fsck -D,
// fixed UUID, hash seed and times.
func buildExt4(t *testing.T, tree, out string) {
	env := []string{"E2FSPROGS_FAKE_TIME=" + fixedTime, "MKE2FS_CONFIG=/etc/mke2fs.conf"}
	runTool(t, env, "mke2fs", "-q", "-F", "-t", "ext4", "-b", "1024", "-O", "metadata_csum", "-U", fixedUUID,
		"-E", "root_owner=0:0,hash_seed="+fixedUUID, "-d", tree, out, "16M")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "e2fsck", "-fyD", out)
	cmd.Env = append(os.Environ(), env...)
	b, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 1 { // 1: the directories were re-indexed
		err = nil
	}
	require.NoError(t, err, "e2fsck -fyD: %s", b)
}

// judgeExt4 is e2fsck -fn on the filesystem at byte off of the file.
func judgeExt4(off int64) func(t *testing.T, path string) (bool, string) {
	return func(t *testing.T, path string) (bool, string) {
		if off != 0 {
			fs := filepath.Join(t.TempDir(), "fs.ext4")
			b, err := os.ReadFile(path)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(fs, b[off:], 0o644))
			path = fs
		}
		code, out := judgeTool("e2fsck", "-fn", path)
		return code != 0, out
	}
}

func mutationTargets() []mutationTarget {
	return []mutationTarget{
		{name: "ext4", build: buildExt4, judge: judgeExt4(0)},
		{name: "xfs", build: func(t *testing.T, tree, out string) {
			proto := filepath.Join(t.TempDir(), "proto")
			writeProto(t, tree, proto)
			runTool(t, nil, "truncate", "-s", "300M", out)
			runTool(t, nil, "mkfs.xfs", "-q", "-f", "-m", "uuid="+fixedUUID, "-p", proto, out)
		}, judge: func(t *testing.T, path string) (bool, string) {
			code, out := judgeTool("xfs_repair", "-n", "-f", path)
			return code != 0, out
		}},
		{name: "btrfs", flips: 200, build: func(t *testing.T, tree, out string) {
			runTool(t, nil, "truncate", "-s", "128M", out)
			// Single metadata: a DUP block failing its checks is read from
			// its other copy (btrfs check too), which TestDUPCopy tests.
			runTool(t, nil, "mkfs.btrfs", "-q", "-f", "-m", "single", "-U", fixedUUID, "--rootdir", tree, out)
		}, judge: func(t *testing.T, path string) (bool, string) {
			code, out := judgeTool("btrfs", "check", "--readonly", "--check-data-csum", path)
			return code != 0, out
		}},
		{name: "gpt", build: func(t *testing.T, tree, out string) {
			fsImg := filepath.Join(t.TempDir(), "fs.ext4")
			buildExt4(t, tree, fsImg)
			gpt := disktest.GPTRoot(t, fsImg)
			b, err := os.ReadFile(gpt)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(out, b, 0o644))
		}, domain: func(t *testing.T, img io.ReaderAt, size int64) []span {
			tab, err := partition.Read(img, size)
			require.NoError(t, err)
			// Outside every partition: the protective MBR, both headers
			// and entry arrays.
			var out []span
			at := int64(0)
			for _, p := range tab.Partitions {
				out = append(out, span{at, p.Start})
				at = p.Start + p.Size
			}
			return append(out, span{at, size})
		}, judge: func(t *testing.T, path string) (bool, string) {
			code, out := judgeTool("sgdisk", "-v", path)
			return code != 0 || !strings.Contains(out, "No problems found"), out
		}},
		{name: "lvm", root: true, build: func(t *testing.T, tree, out string) {
			fsImg := filepath.Join(t.TempDir(), "fs.ext4")
			buildExt4(t, tree, fsImg)
			disk := disktest.LVMDisk(t, fsImg)
			b, err := os.ReadFile(disk)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(out, b, 0o644))
		}, domain: func(t *testing.T, img io.ReaderAt, size int64) []span {
			// The PV's label and metadata area: its first MiB, before
			// pe_start (partition 1 starts at 1 MiB).
			return []span{{1 << 20, 2 << 20}}
		}, judge: judgePV},
		{name: "vhdx", build: func(t *testing.T, tree, out string) {
			fsImg := filepath.Join(t.TempDir(), "fs.ext4")
			buildExt4(t, tree, fsImg)
			runTool(t, nil, "qemu-img", "convert", "-f", "raw", "-O", "vhdx", disktest.GPTRoot(t, fsImg), out)
		}, domain: vhdxStructures, judge: func(t *testing.T, path string) (bool, string) {
			code, out := judgeTool("qemu-img", "check", "-f", "vhdx", path)
			return code != 0 && code != 3, out // 3: leaked clusters only
		}},
		{name: "qcow2", build: func(t *testing.T, tree, out string) {
			fsImg := filepath.Join(t.TempDir(), "fs.ext4")
			buildExt4(t, tree, fsImg)
			runTool(t, nil, "qemu-img", "convert", "-f", "raw", "-O", "qcow2", disktest.GPTRoot(t, fsImg), out)
		}, domain: qcow2Structures, judge: func(t *testing.T, path string) (bool, string) {
			code, out := judgeTool("qemu-img", "check", "-f", "qcow2", path)
			return code != 0 && code != 3, out
		}},
	}
}

// qcow2Structures is every byte of a qcow2 file but its data clusters: the
// header, the L1 and L2 tables, the refcount table and blocks.
func qcow2Structures(t *testing.T, r io.ReaderAt, size int64) []span {
	be := binary.BigEndian
	img := make([]byte, size)
	_, err := r.ReadAt(img, 0)
	require.NoError(t, err)
	cs := int64(1) << be.Uint32(img[20:])
	l1, n := int64(be.Uint64(img[40:])), int64(be.Uint32(img[36:]))
	var data []int64
	for i := range n {
		l2 := int64(be.Uint64(img[l1+8*i:]) & 0x00fffffffffffe00)
		if l2 == 0 {
			continue
		}
		for k := range cs / 8 {
			if e := be.Uint64(img[l2+8*k:]); e&(1<<62) == 0 && e&0x00fffffffffffe00 != 0 {
				data = append(data, int64(e&0x00fffffffffffe00))
			}
		}
	}
	return outside(data, cs, size)
}

// outside is every byte of [0, size) not in a block of length bs starting
// at one of starts: a file's structures around its data blocks.
func outside(starts []int64, bs, size int64) []span {
	slices.Sort(starts)
	var out []span
	at := int64(0)
	for _, d := range starts {
		if d > at {
			out = append(out, span{at, d})
		}
		at = max(at, d+bs)
	}
	if at < size {
		out = append(out, span{at, size})
	}
	return out
}

// writeProto writes a mkfs.xfs proto file of tree: directories, files,
// symbolic links, owned by root.
func writeProto(t *testing.T, tree, out string) {
	var b strings.Builder
	b.WriteString("/dummy\n0 0\nd--755 0 0\n")
	var walk func(dir string, depth int)
	walk = func(dir string, depth int) {
		ents, err := os.ReadDir(dir)
		require.NoError(t, err)
		for _, e := range ents {
			p := filepath.Join(dir, e.Name())
			fi, err := os.Lstat(p)
			require.NoError(t, err)
			ind := strings.Repeat(" ", depth)
			perm := fmt.Sprintf("%03o", fi.Mode().Perm())
			switch {
			case fi.Mode()&fs.ModeSymlink != 0:
				l, err := os.Readlink(p)
				require.NoError(t, err)
				fmt.Fprintf(&b, "%s%s l--%s 0 0 %s\n", ind, e.Name(), perm, l)
			case fi.IsDir():
				fmt.Fprintf(&b, "%s%s d--%s 0 0\n", ind, e.Name(), perm)
				walk(p, depth+1)
				fmt.Fprintf(&b, "%s$\n", ind)
			case fi.Mode().IsRegular():
				fmt.Fprintf(&b, "%s%s ---%s 0 0 %s\n", ind, e.Name(), perm, p)
			}
		}
	}
	walk(tree, 1)
	b.WriteString("$\n")
	require.NoError(t, os.WriteFile(out, []byte(b.String()), 0o644))
}

// judgePV runs pvck on partition 1 of the disk, the PV, through a loop
// device seen by lvm2 alone (activation off).
func judgePV(t *testing.T, path string) (bool, string) {
	code, loop := judgeTool("losetup", "-f", "--show", "-r", "-o", fmt.Sprint(1<<20), "--sizelimit", fmt.Sprint(63<<20), path)
	require.Zero(t, code, loop)
	loop = strings.TrimSpace(loop)
	defer judgeTool("losetup", "-d", loop)
	cfg := fmt.Sprintf(`devices{use_devicesfile=0 filter=["a|^%s$|","r|.*|"]} activation{udev_sync=0 udev_rules=0} global{activation=0} backup{backup=0 archive=0}`, loop)
	code, out := judgeTool("pvck", "--config", cfg, loop)
	if code != 0 {
		return true, out
	}
	code, out2 := judgeTool("pvs", "--config", cfg, "--noheadings", "-o", "pv_name,vg_name,pv_attr", loop)
	return code != 0 || strings.Contains(out+out2, "WARNING") || strings.Contains(out+out2, "Failed"), out + out2
}

// vhdxStructures is every byte of a VHDX file but its payload blocks: the
// headers, region tables, log, metadata region and BAT.
func vhdxStructures(t *testing.T, r io.ReaderAt, size int64) []span {
	le := binary.LittleEndian
	img := make([]byte, size)
	_, err := r.ReadAt(img, 0)
	require.NoError(t, err)
	reg := img[192<<10:]
	var batOff, batLen int64
	for i := range int(le.Uint32(reg[8:])) {
		e := reg[16+32*i:]
		if le.Uint32(e) == 0x2DC27766 { // the BAT region's GUID
			batOff, batLen = int64(le.Uint64(e[16:])), int64(le.Uint32(e[24:]))
		}
	}
	require.NotZero(t, batLen)
	// Block size from the metadata region's file parameters would need
	// its table; payload blocks are whole MiBs from their offsets, and
	// the next one (or the end) bounds each.
	var blocks []int64
	for i := int64(0); i+8 <= batLen; i += 8 {
		if e := le.Uint64(img[batOff+i:]); e&7 == 6 {
			blocks = append(blocks, int64(e>>20)<<20)
		}
	}
	slices.Sort(blocks)
	bs := int64(32 << 20) // qemu-img's default block size for small disks
	if len(blocks) > 1 {
		bs = blocks[1] - blocks[0]
	}
	return outside(blocks, bs, size)
}

// recorder is the image under the readers: it notes every range read.
type recorder struct {
	r     io.ReaderAt
	mu    sync.Mutex
	spans []span
}

func (r *recorder) ReadAt(p []byte, off int64) (int, error) {
	n, err := r.r.ReadAt(p, off)
	if n > 0 {
		r.mu.Lock()
		r.spans = append(r.spans, span{off, off + int64(n)})
		r.mu.Unlock()
	}
	return n, err
}

// merged returns the spans read, sorted and merged.
func (r *recorder) merged() []span {
	s := slices.Clone(r.spans)
	slices.SortFunc(s, func(a, b span) int { return int(a.lo - b.lo) })
	var out []span
	for _, x := range s {
		if n := len(out); n > 0 && x.lo <= out[n-1].hi {
			out[n-1].hi = max(out[n-1].hi, x.hi)
			continue
		}
		out = append(out, x)
	}
	return out
}

// intersect keeps the parts of a (sorted, disjoint) inside b's.
func intersect(a, b []span) []span {
	var out []span
	for _, x := range a {
		for _, y := range b {
			lo, hi := max(x.lo, y.lo), min(x.hi, y.hi)
			if lo < hi {
				out = append(out, span{lo, hi})
			}
		}
	}
	return out
}

// flipped is an image with one byte changed: the byte at at XOR x.
type flipped struct {
	r  io.ReaderAt
	at int64
	x  byte
}

func (f flipped) ReadAt(p []byte, off int64) (int, error) {
	n, err := f.r.ReadAt(p, off)
	if f.at >= off && f.at < off+int64(n) {
		p[f.at-off] ^= f.x
	}
	return n, err
}

// outcome is one audit of an image.
type outcome struct {
	code   int
	answer string // the units' states and the findings
	facts  string // the units' states and the facts document
	err    error
	report *finding.Report
}

// auditImage audits the disk image r as amilint scan does (the same
// target opening, audit and exit code), with an auditor shared across
// runs: its exit code, and its answer, the units' states and the
// findings. With base, the answer of the intact image, it evaluates the
// policies only when the facts differ from base's: the findings are a
// function of the facts, and evaluating is most of an audit's time.
func auditImage(aud *audit.Auditor, r io.ReaderAt, size int64, lenient bool, base *outcome) outcome {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	im, err := target.OpenDisk("image", r, size, target.Options{AllowCorrupt: lenient})
	if err != nil {
		return outcome{code: ExitError, err: err}
	}
	defer im.Close()
	if base != nil {
		// Audit's steps up to the policies, with its checks.
		inv, doc, err := aud.Document(im.FS, im.Name)
		if err != nil {
			return outcome{code: ExitError, err: err}
		}
		if f := factsOf(inv, doc); f == base.facts {
			return outcome{code: base.code, answer: base.answer, facts: f, report: base.report}
		}
	}
	res, err := aud.Audit(ctx, im.FS, finding.Target{Name: im.Name, Kind: im.Kind})
	if err != nil {
		return outcome{code: ExitError, err: err}
	}
	var b strings.Builder
	for _, f := range res.Inventory.Files {
		fmt.Fprintf(&b, "%s\t%s\n", f.Name, f.State)
	}
	fs, err := json.Marshal(res.Report.Findings)
	if err != nil {
		return outcome{code: ExitError, err: err}
	}
	b.Write(fs)
	return outcome{code: finding.ExitCode(res.Report.Findings, finding.High), answer: b.String(),
		facts: factsOf(res.Inventory, res.Facts), report: res.Report}
}

// factsOf is what the findings are computed from: the units' states and
// the facts document.
func factsOf(inv *audit.Inventory, doc *facts.Document) string {
	var b strings.Builder
	for _, f := range inv.Files {
		fmt.Fprintf(&b, "%s\t%s\n", f.Name, f.State)
	}
	j, err := json.Marshal(doc)
	if err != nil {
		return "unmarshalable: " + err.Error()
	}
	b.Write(j)
	return b.String()
}

// lenientEvery samples the flips that fail on a checksum mismatch to audit
// again with --allow-corrupt: every tenth of them.
const lenientEvery = 10

// runMutations damages img flips times and returns the format's counts;
// a silent wrong answer fails the test with its replay.
func runMutations(t *testing.T, aud *audit.Auditor, mt mutationTarget, img string, seed uint64, flips int, judgeAll bool) mutationCounts {
	fh, err := os.Open(img)
	require.NoError(t, err)
	defer fh.Close()
	fi, err := fh.Stat()
	require.NoError(t, err)
	size := fi.Size()
	rec := &recorder{r: fh}
	base := auditImage(aud, rec, size, false, nil)
	require.NoError(t, base.err, "the intact image audits")
	require.NotEmpty(t, base.report.Findings, "the intact image has findings, so its answer says something")
	read := rec.merged()
	if mt.domain != nil {
		read = intersect(read, mt.domain(t, fh, size))
	}
	var total int64
	for _, s := range read {
		total += s.hi - s.lo
	}
	require.Positive(t, total, "the audit reads some of the format's structures")
	t.Logf("%s: %s, %d bytes of its structures read in %d ranges", mt.name, img, total, len(read))

	// The flips, all drawn first: the i-th is the same whatever runs.
	type flip struct {
		at int64
		x  byte
	}
	rng := rand.New(rand.NewPCG(seed, uint64(len(mt.name))))
	all := make([]flip, flips)
	for i := range all {
		k := rng.Int64N(total)
		all[i].x = byte(rng.IntN(255) + 1)
		for _, s := range read {
			if k < s.hi-s.lo {
				all[i].at = s.lo + k
				break
			}
			k -= s.hi - s.lo
		}
	}
	var (
		mu   sync.Mutex
		c    mutationCounts
		next = make(chan int)
		wg   sync.WaitGroup
	)
	one := func(i int) {
		fl := all[i]
		replay := fmt.Sprintf("replay: go test ./internal/cli -run 'TestMutations/%s$' -v -args -mutation.format=%s -mutation.seed=%d -mutation.flips=%d -mutation.only=%d  (image %s, byte %d ^= %#02x)",
			mt.name, mt.name, seed, flips, i, img, fl.at, fl.x)
		f := flipped{r: fh, at: fl.at, x: fl.x}
		got := auditWithin(t, aud, f, size, false, &base, replay)
		var d mutationCounts
		d.flips = 1
		// judge runs the checker on the flipped image, once.
		var corrupt *bool
		var said string
		judge := func() bool {
			if corrupt == nil {
				path := filepath.Join(t.TempDir(), fmt.Sprintf("flip-%d.img", i))
				writeFlipped(t, img, path, f)
				c, out := mt.judge(t, path)
				os.Remove(path)
				corrupt, said = &c, out
			}
			return *corrupt
		}
		switch {
		case got.code == ExitError:
			d.exit2 = 1
			// A sample of the mismatches is audited again leniently:
			// the finding, or still exit 2.
			if m, ok := integrity.As(got.err); ok && i%lenientEvery == 0 {
				d.lenientChecked = 1
				l := auditWithin(t, aud, f, size, true, nil, replay)
				if l.code != ExitError && !hasCorruptFinding(l.report) {
					t.Errorf("flip %d: %v, but --allow-corrupt gives exit %d without an image-corrupt finding\n%s", i, m, l.code, replay)
				}
			}
			if judgeAll && !judge() {
				d.exit2Clean = 1
				t.Logf("flip %d: exit 2 (%v), the checker sees nothing wrong; %s", i, got.err, replay)
			}
		case got.answer == base.answer && got.code == base.code:
			d.same = 1
			if judgeAll && judge() {
				d.sameCorrupt = 1
				t.Logf("flip %d: the same answer (exit %d), the checker calls it corrupt; %s", i, got.code, replay)
			}
		default:
			if !judge() {
				d.changedMissed = 1
				t.Logf("flip %d: the answer changed (exit %d), the checker sees nothing wrong either; %s", i, got.code, replay)
				break
			}
			d.silent = 1
			t.Errorf("flip %d: a silent wrong answer (exit %d, the answer changed) where the checker sees corruption:\n%.1500s\n%s",
				i, got.code, said, replay)
		}
		if corrupt != nil {
			d.judged = 1
		}
		mu.Lock()
		c.add(d)
		mu.Unlock()
	}
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				one(i)
			}
		}()
	}
	for i := range all {
		if *mutationOnly < 0 || i == *mutationOnly {
			next <- i
		}
	}
	close(next)
	wg.Wait()
	return c
}

// writeFlipped writes the image src with f's change at dst, sparse as the
// image is, for a checker.
func writeFlipped(t *testing.T, src, dst string, f flipped) {
	runTool(t, nil, "cp", "--sparse=always", src, dst)
	var one [1]byte
	_, err := f.ReadAt(one[:], f.at)
	require.NoError(t, err)
	w, err := os.OpenFile(dst, os.O_WRONLY, 0)
	require.NoError(t, err)
	defer w.Close()
	_, err = w.WriteAt(one[:], f.at)
	require.NoError(t, err)
}

// auditWithin audits under a bound: a flip that hangs a reader fails the
// test with its replay, as one that panics does.
func auditWithin(t *testing.T, aud *audit.Auditor, r io.ReaderAt, size int64, lenient bool, base *outcome, replay string) outcome {
	done := make(chan outcome, 1)
	go func() { done <- auditImage(aud, r, size, lenient, base) }()
	select {
	case o := <-done:
		return o
	case <-time.After(2 * time.Minute):
		t.Fatalf("the audit did not end in 2 minutes\n%s", replay)
	}
	return outcome{}
}

func hasCorruptFinding(rep *finding.Report) bool {
	if rep == nil {
		return false
	}
	for _, f := range rep.Findings {
		if f.RuleID == "image-corrupt" {
			return true
		}
	}
	return false
}
