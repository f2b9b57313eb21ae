package xfs

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/fixtures/testenv"
	"github.com/amilint/amilint/internal/image/fs/inodefs"
	"github.com/amilint/amilint/internal/image/imagetest"
	"github.com/amilint/amilint/internal/image/integrity"
	"github.com/amilint/amilint/internal/image/rootfs"
)

// logprint runs xfs_logprint on img: the tail, head and state that
// xfsprogs's own copy of the kernel's log code (libxlog's xlog_find_tail)
// finds, an oracle independent of this reader.
func logprint(t *testing.T, img string) (tail, head int64, clean bool) {
	t.Helper()
	out, err := exec.Command("xfs_logprint", "-t", img).CombinedOutput()
	require.NoError(t, err, "xfs_logprint: %.2000s", out)
	m := regexp.MustCompile(`log tail: (\d+) head: (\d+) state: <(CLEAN|DIRTY)>`).FindSubmatch(out)
	require.NotNil(t, m, "xfs_logprint: %.2000s", out)
	tail, _ = strconv.ParseInt(string(m[1]), 10, 64)
	head, _ = strconv.ParseInt(string(m[2]), 10, 64)
	return tail, head, string(m[3]) == "CLEAN"
}

// requireXFSMount skips the test only where the kernel cannot mount XFS
// (or loop devices cannot be set up without root); CI and development
// machines can, so there it runs.
func requireXFSMount(t *testing.T) {
	t.Helper()
	testenv.Root(t, "loop-mounting an XFS image")
	has := func() bool {
		b, err := os.ReadFile("/proc/filesystems")
		return err == nil && regexp.MustCompile(`(?m)\sxfs$`).Match(b)
	}
	if !has() {
		_ = exec.Command("modprobe", "xfs").Run()
		if !has() {
			testenv.Missing(t, "this kernel cannot mount XFS (no xfs in /proc/filesystems, modprobe xfs failed)")
		}
	}
}

// mounted loop-mounts img, runs the shell script sh in the mount point
// (as $M), and unmounts it, all in a mount namespace of its own. On the
// host's, a process that copies the mounts meanwhile (a test starting a
// container or a mount namespace, which the oracle tests of other
// packages do all the time) keeps the filesystem mounted past our
// unmount, so the log is not yet written clean when xfs_logprint reads
// the image: the flake this test long had under load.
func mounted(t *testing.T, img, sh string) {
	t.Helper()
	testenv.Tool(t, "unshare", "util-linux")
	mnt := filepath.Join(t.TempDir(), "mnt")
	require.NoError(t, os.Mkdir(mnt, 0o755))
	const script = `mount -o loop "$IMG" "$M"
s=0
sh -ec "$SH" || s=$?
umount "$M"
exit $s`
	cmd := exec.Command("timeout", "180", "unshare", "-m", "--propagation", "private", "sh", "-ec", script)
	cmd.Env = append(os.Environ(), "M="+mnt, "IMG="+img, "SH="+sh)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "in a mount of %s: %s: %s", img, sh, out)
}

// churn is an xfs_io command line that commits a transaction (a file
// grows) and forces the log n times: with a 256 KiB log stripe unit each
// force pads its record, so about a thousand wrap a 64 MiB log.
func churn(n int) string {
	var b strings.Builder
	b.WriteString(`xfs_io -f`)
	for i := range n {
		fmt.Fprintf(&b, ` -c "pwrite -q %d 1" -c fsync`, (i+1)*4096)
	}
	b.WriteString(` "$M/churn"`)
	return b.String()
}

// TestLogRealImages checks the log state found in images the kernel and
// mkfs.xfs wrote against xfs_logprint's, and what a dirty log hides.
func TestLogRealImages(t *testing.T) {
	src := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(src, "etc/systemd/system/multi-user.target.wants"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(src, "etc/os-release"), []byte("ID=amzn\n"), 0o644))
	const late = `mkdir -p "$M/etc/late" && echo disabled > "$M/etc/late/unit.conf"`
	tests := []struct {
		name    string
		mkfs    []string
		mount   bool
		sh      string // run in the mounted filesystem
		clean   bool
		wrapped bool // the head's cycle is past the first
		lateVis bool // etc/late/unit.conf is in the tree read
	}{
		{name: "mkfs", clean: true},
		{name: "mkfs, 256k log stripe unit", mkfs: []string{"-l", "su=256k"}, clean: true},
		{name: "mounted and unmounted", mount: true, sh: late, clean: true, lateVis: true},
		// sync forces the log (XFS writes no metadata back for it), then
		// the shutdown stops all writes: the file is in the log only, as
		// in a snapshot of a running system.
		{name: "shut down", mount: true, sh: late + ` && sync && xfs_io -x -c "shutdown -f" "$M"`},
		{name: "unmounted after the log wrapped", mkfs: []string{"-l", "su=256k"}, mount: true,
			sh: churn(1300) + ` && ` + late, clean: true, wrapped: true, lateVis: true},
		{name: "shut down after the log wrapped", mkfs: []string{"-l", "su=256k"}, mount: true,
			sh: churn(1300) + ` && ` + late + ` && sync && xfs_io -x -c "shutdown -f" "$M"`, wrapped: true},
		// The file never reached the log: lost, even to recovery.
		{name: "shut down, last change not in the log", mount: true,
			sh: churn(3) + ` && ` + late + ` && xfs_io -x -c "shutdown -f" "$M"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.mount {
				requireXFSMount(t)
			}
			// The judge is xfs_logprint's own reading of the image.
			img := mkfs(t, src, "300M", tc.mkfs...)
			if tc.mount {
				mounted(t, img, tc.sh)
			}
			tail, head, clean := logprint(t, img)
			require.Equal(t, tc.clean, clean, "xfs_logprint's state")
			f := openImage(t, img)
			st, err := f.Log()
			require.NoError(t, err)
			assert.Equal(t, tc.clean, st.Clean)
			assert.Equal(t, head, st.Head, "head")
			assert.Equal(t, tail, st.Tail, "tail")
			t.Logf("%+v", st)
			if tc.wrapped {
				assert.Greater(t, st.Cycle, uint32(1), "cycle")
			}
			if tc.clean {
				assert.Empty(t, f.Warnings())
			} else {
				require.Len(t, f.Warnings(), 1)
				assert.Contains(t, f.Warnings()[0], "the log is dirty")
			}
			_, err = rootfs.New(f).ReadFile("etc/late/unit.conf")
			if tc.lateVis {
				assert.NoError(t, err)
			} else {
				// What the warning is for: the file the kernel would show
				// after recovery is not in the tree as last written back.
				assert.Error(t, err, "the file written before the shutdown is only in the log")
			}
		})
	}
}

// TestExternalLog checks that a superblock naming no internal log is
// opened, with the log refused as external and a warning.
func TestExternalLog(t *testing.T) {
	r := newCompactReader(compact(t, mkfs(t, tree(t), "300M")))
	r.Patch(0x30, make([]byte, 8)) // sb_logstart = 0
	sealCRC(r, 0, 512, sbCRCOff)
	f, err := Open(r, compactSize)
	require.NoError(t, err)
	_, err = f.Log()
	require.ErrorIs(t, err, ErrExternalLog)
	require.Len(t, f.Warnings(), 1)
	assert.Contains(t, f.Warnings()[0], "external")
	_, err = inodefs.Lookup(f.inodes, "test", "etc/os-release")
	assert.NoError(t, err, "the tree is still read")
}

// synthLog builds a log to the on-disk format, for the layouts real
// images are slow to reach (wrapped records, torn writes, hostile fields).
type synthLog struct {
	b    []byte
	uuid [16]byte
}

func newSynthLog(bbs int) *synthLog {
	s := &synthLog{b: make([]byte, bbs*bbSize)}
	copy(s.uuid[:], "synthetic-uuid!!")
	return s
}

func (s *synthLog) bbs() int { return len(s.b) / bbSize }

// stamp writes cycle into the first word of n blocks from bb on.
func (s *synthLog) stamp(bb, n int, cycle uint32) {
	for i := range n {
		binary.BigEndian.PutUint32(s.b[((bb+i)%s.bbs())*bbSize:], cycle)
	}
}

// record writes a record of data blocks at bb (wrapping around the end,
// the wrapped part stamped cycle+1 as xlog_sync does) and returns the
// block after it. An unmount record has one op, XLOG_UNMOUNT_TRANS.
func (s *synthLog) record(bb int, cycle uint32, data int, tail uint32, unmount bool) int {
	h := s.b[bb*bbSize : (bb+1)*bbSize]
	clear(h)
	be := binary.BigEndian
	be.PutUint32(h[0:], logHeaderMagic)
	be.PutUint32(h[4:], cycle)
	be.PutUint32(h[8:], logVersion2)
	be.PutUint32(h[0xC:], uint32(data*bbSize))
	be.PutUint64(h[0x10:], uint64(cycle)<<32|uint64(bb))
	be.PutUint64(h[0x18:], uint64(cycle)<<32|uint64(tail))
	ops := uint32(3)
	if unmount {
		ops = 1
	}
	be.PutUint32(h[0x28:], ops)
	copy(h[0x130:], s.uuid[:])
	be.PutUint32(h[0x140:], logCycleSize)
	for i := 1; i <= data; i++ {
		at := bb + i
		c := cycle
		if at >= s.bbs() {
			at -= s.bbs()
			c++
		}
		d := s.b[at*bbSize : (at+1)*bbSize]
		clear(d)
		be.PutUint32(d, c)
		if i == 1 && unmount {
			d[9] = logUnmountTrans
		}
	}
	return (bb + 1 + data) % s.bbs()
}

func (s *synthLog) dev() *logDev {
	return &logDev{r: bytes.NewReader(s.b), devSize: int64(len(s.b)), bbs: int64(s.bbs()), uuid: s.uuid}
}

// TestLogSynthetic checks head finding and the unmount check on logs laid
// out to the format, against the head and state worked out by hand from
// xlog_find_head and xlog_check_unmount_rec.
func TestLogSynthetic(t *testing.T) {
	const n = 10000 // more blocks than the 4096-block verify window
	// fill writes cycle-1 records of 7 data blocks from bb up to end.
	fill := func(s *synthLog, bb, end int, cycle uint32) int {
		for ; bb+8 <= end; bb += 8 {
			s.record(bb, cycle, 7, 0, false)
		}
		return bb
	}
	tests := []struct {
		name  string
		build func(s *synthLog)
		want  LogState
		err   error
	}{
		{name: "never written", build: func(*synthLog) {}, want: LogState{Clean: true}},
		{name: "first cycle, unmount record last", build: func(s *synthLog) {
			bb := fill(s, 0, 3000, 1)
			s.record(bb, 1, 1, 0, true)
		}, want: LogState{Clean: true, Head: 3002, Tail: 3002, Cycle: 1}},
		{name: "first cycle, transaction last", build: func(s *synthLog) {
			bb := s.record(0, 1, 1, 0, true)
			fill(s, bb, 3000, 1)
		}, want: LogState{Head: 2994, Tail: 0, Cycle: 1}},
		{name: "second cycle, unmount record last", build: func(s *synthLog) {
			fill(s, 0, n, 1)
			bb := fill(s, 0, 5000, 2)
			s.record(bb, 2, 1, uint32(bb), true)
		}, want: LogState{Clean: true, Head: 5002, Tail: 5002, Cycle: 2}},
		{name: "second cycle, transaction last", build: func(s *synthLog) {
			fill(s, 0, n, 1)
			fill(s, 0, 5000, 2)
		}, want: LogState{Head: 5000, Tail: 0, Cycle: 2}},
		{name: "head near the start, verify window wraps", build: func(s *synthLog) {
			fill(s, 0, n, 1)
			bb := fill(s, 0, 100, 2)
			s.record(bb, 2, 1, uint32(bb), true)
		}, want: LogState{Clean: true, Head: 98, Tail: 98, Cycle: 2}},
		{name: "unmount record wrapping the end", build: func(s *synthLog) {
			bb := fill(s, 0, n-5, 1)
			s.stamp(bb, n-bb, 1)
			s.record(n-2, 1, 4, n-2, true)
		}, want: LogState{Clean: true, Head: 3, Tail: 3, Cycle: 1}},
		{name: "whole log one cycle", build: func(s *synthLog) {
			bb := fill(s, 0, n-2, 1)
			s.record(bb, 1, n-bb-1, 0, false)
		}, want: LogState{Head: 0, Tail: 0, Cycle: 1}},
		{name: "torn record after an unmount record", build: func(s *synthLog) {
			bb := fill(s, 0, 3000, 1)
			bb = s.record(bb, 1, 1, 0, true)
			s.record(bb, 1, 8, 0, false)
			s.stamp(bb+4, 5, 0) // only 3 of its 8 data blocks reached the disk
		}, want: LogState{Clean: true, Head: 3002, Tail: 3002, Cycle: 1}},
		{name: "hole of an out-of-order write", build: func(s *synthLog) {
			bb := fill(s, 0, 3000, 1)
			s.record(bb, 1, 1, 0, true)
			s.stamp(bb-16, 8, 0) // an earlier record never written
			s.stamp(bb-8, 8, 0)
		}, want: LogState{Head: 2984, Tail: 0, Cycle: 1}},
		{name: "no record header", build: func(s *synthLog) { s.stamp(0, 3000, 1) }, err: ErrCorrupt},
		{name: "header of another filesystem", build: func(s *synthLog) {
			bb := fill(s, 0, 3000, 1)
			s.record(bb, 1, 1, 0, true)
			copy(s.b[bb*bbSize+0x130:], "another-uuid!!!!")
		}, err: ErrCorrupt},
		{name: "record longer than a log buffer", build: func(s *synthLog) {
			bb := fill(s, 0, 3000, 1)
			s.record(bb, 1, 1, 0, true)
			binary.BigEndian.PutUint32(s.b[bb*bbSize+0xC:], 1<<30)
		}, err: ErrCorrupt},
		{name: "tail outside the log", build: func(s *synthLog) {
			bb := fill(s, 0, 3000, 1)
			s.record(bb, 1, 1, n+5, false)
		}, err: ErrCorrupt},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newSynthLog(n)
			tc.build(s)
			st, err := s.dev().state()
			if tc.err != nil {
				require.ErrorIs(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, st)
		})
	}
}

// TestLogTruncatedDevice checks a log reaching past the end of the device
// is an error, not a panic.
func TestLogTruncatedDevice(t *testing.T) {
	s := newSynthLog(64)
	s.record(0, 1, 1, 0, true)
	l := s.dev()
	l.devSize = 10 * bbSize
	_, err := l.state()
	require.ErrorIs(t, err, ErrCorrupt)
}

// FuzzLog runs the log state finder over logs laid out by fuzzed build
// steps and then corrupted by fuzzed patches: an error or a state inside
// the log, never a panic or a hang. The input is a few bytes that say how
// to build the log (its size, records, runs of records, cycle stamps) and
// which bytes to overwrite (imagetest.NewPatched pairs, anywhere in the
// log), not the log itself: a log of kilobytes as the input made the
// engine spend its time minimizing and reach a few hundred executions.
func FuzzLog(f *testing.F) {
	// One step is five bytes: kind, block (uint16), a, b.
	step := func(kind byte, bb uint16, a, b byte) []byte { return []byte{kind, byte(bb >> 8), byte(bb), a, b} }
	const (
		rec     = 0    // a record: a data blocks, tail block b/256 of the log
		fill    = 1    // records of 7 data blocks over a*64 blocks
		stamp   = 2    // a*16 blocks stamped with cycle b&3
		unmount = 0x40 // with rec: an unmount record
	)
	cyc := func(c byte) byte { return (c - 1) << 2 } // with rec and fill: the cycle (1 to 4)
	for _, seed := range []struct {
		size  uint16
		steps [][]byte
		patch []byte
	}{
		{62, [][]byte{step(rec|unmount|cyc(1), 0, 1, 0)}, nil},
		{62, [][]byte{step(rec|unmount|cyc(1), 0, 1, 0), step(rec|cyc(1), 2, 5, 0)}, nil},
		{62, [][]byte{step(fill|cyc(1), 0, 1, 0), step(rec|cyc(2), 0, 3, 0), step(rec|unmount|cyc(2), 4, 1, 16)}, nil},
		{62, [][]byte{step(rec|unmount|cyc(1), 62, 4, 0)}, nil},
		// Past the 4096-block verify window, second cycle.
		{9998, [][]byte{step(fill|cyc(1), 0, 160, 0), step(fill|cyc(2), 0, 78, 0), step(rec|unmount|cyc(2), 4992, 1, 128)}, nil},
		// A torn record after an unmount record, and a hole.
		{3998, [][]byte{step(fill|cyc(1), 0, 46, 0), step(rec|unmount|cyc(1), 2944, 1, 0), step(rec|cyc(1), 2946, 8, 0), step(stamp, 2950, 1, 0)}, nil},
		{62, [][]byte{step(rec|unmount|cyc(1), 0, 1, 0)}, []byte{0x31, 0x01, 0, 0, 'x', 0x09, 0x02, 0, 0, 0}},
	} {
		f.Add(seed.size, bytes.Join(seed.steps, nil), seed.patch)
	}
	f.Fuzz(func(t *testing.T, size uint16, steps, patch []byte) {
		s := newSynthLog(2 + int(size)%10000)
		n := s.bbs()
		for i := 0; i+5 <= len(steps) && i < 5*64; i += 5 {
			kind, a, b := steps[i], int(steps[i+3]), steps[i+4]
			bb := int(binary.BigEndian.Uint16(steps[i+1:])) % n
			cycle := uint32(kind>>2&3) + 1
			switch kind & 3 {
			case rec:
				s.record(bb, cycle, min(a%32, n-2), uint32(int(b)*n/256), kind&unmount != 0)
			case fill:
				for end := min(n, bb+a*64); bb+8 <= end; bb += 8 {
					s.record(bb, cycle, 7, 0, false)
				}
			case stamp:
				s.stamp(bb, min(a*16, n), uint32(b&3))
			}
		}
		l := s.dev()
		l.r = imagetest.NewPatched(l.r, l.devSize, l.devSize, patch)
		st, err := l.state()
		if err == nil {
			require.True(t, st.Head >= 0 && st.Head < max(l.bbs, 1), "head %d of %d", st.Head, l.bbs)
			require.True(t, st.Tail >= 0 && st.Tail < max(l.bbs, 1), "tail %d of %d", st.Tail, l.bbs)
		}
	})
}

// TestCorruptLogRefused: a log whose head or last record cannot be found
// (here a block stamped with cycle 1 and no record header anywhere) is
// damage the kernel refuses to mount, not a question of clean or dirty:
// Open fails on it, and a lenient Checker records it and reads on.
func TestCorruptLogRefused(t *testing.T) {
	img := mkfs(t, tree(t), "300M")
	base := newCompactReader(compact(t, img)) // the log left out: all zeros, never written
	f, err := Open(base, compactSize)
	require.NoError(t, err)
	_, err = f.Log()
	require.NoError(t, err, "a log never written is clean")

	sb := make([]byte, 512)
	_, err = base.ReadAt(sb, 0)
	require.NoError(t, err)
	d, err := f.daddr(binary.BigEndian.Uint64(sb[0x30:]))
	require.NoError(t, err)
	c := base.Clone()
	c.Patch(int64(d)<<f.blockLog, []byte{0, 0, 0, 1})

	_, err = Open(c, compactSize)
	require.ErrorIs(t, err, ErrCorrupt)
	assert.Contains(t, err.Error(), "no log record header")
	assert.Contains(t, err.Error(), "the kernel would refuse to mount it")

	var log integrity.Log
	g, err := OpenWith(c, compactSize, integrity.Lenient(&log))
	require.NoError(t, err, "a forensic read goes on")
	require.Len(t, log.Lines(), 1)
	assert.Contains(t, log.Lines()[0], "xfs: check log: no log record header")
	require.Len(t, g.Warnings(), 1, "and says the tree may miss what the log held")
	_, err = inodefs.Lookup(g.inodes, "test", "etc/os-release")
	assert.NoError(t, err, "the tree is still read")
}

// TestMountedIsUnmountedWhenItReturns: a process that copies the host's
// mounts while mounted runs (a mount namespace held open, as a container
// started by another test holds one) does not keep the filesystem mounted
// past mounted's return, so what xfs_logprint reads then is the final
// log. On the host's namespace the copy held it, and the log moved on
// once the copy exited.
func TestMountedIsUnmountedWhenItReturns(t *testing.T) {
	requireXFSMount(t)
	testenv.Tool(t, "unshare", "util-linux")
	src := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(src, "os-release"), []byte("ID=amzn\n"), 0o644))
	img := mkfs(t, src, "300M", "-l", "su=256k")
	holder := exec.Command("unshare", "-m", "--propagation", "unchanged", "sleep", "3")
	started := make(chan error, 1)
	go func() {
		time.Sleep(500 * time.Millisecond) // the image is mounted by then
		started <- holder.Start()
	}()
	mounted(t, img, churn(20)+` && sleep 1.5`)
	require.NoError(t, <-started)
	tail, head, clean := logprint(t, img)
	require.NoError(t, holder.Wait())
	tail2, head2, clean2 := logprint(t, img)
	assert.Equal(t, []any{tail, head, clean}, []any{tail2, head2, clean2}, "the log changed after mounted returned")
	assert.True(t, clean, "unmounted clean")
}
