package xfs

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/amilint/amilint/internal/image/fs/inodefs"
)

// The XFS log, as far as telling clean from dirty needs it (the kernel's
// fs/xfs/xfs_log_recover.c, xlog_find_head, xlog_find_tail and
// xlog_check_unmount_rec). The log is a ring of 512-byte basic blocks;
// each log write stamps the first word of every basic block it covers with
// the current cycle number (a record header keeps its magic there and the
// cycle in the next word), and the cycle goes up by one at each wrap. The
// head is where the newest cycle's blocks end; the last record before it
// is an unmount record exactly when the filesystem was cleanly unmounted.
const (
	bbSize          = 512
	logHeaderMagic  = 0xFEEDBABE
	logVersion2     = 2
	logCycleSize    = 32 << 10 // XLOG_HEADER_CYCLE_SIZE: bytes of data one header block's cycle table covers
	logMaxRecord    = 256 << 10
	logMaxIclogs    = 8
	logUnmountTrans = 0x20 // XLOG_UNMOUNT_TRANS in xlog_op_header.oh_flags

	// logTotalRecBBs is XLOG_TOTAL_REC_SHIFT for v2 logs: how far back
	// from the head blocks of the newest cycle may be missing, the
	// in-flight log buffers having been written out of order.
	logTotalRecBBs = logMaxIclogs * logMaxRecord / bbSize
	// logRecBBs is XLOG_REC_SHIFT for v2 logs: the largest record.
	logRecBBs = logMaxRecord / bbSize
)

// ErrExternalLog reports a filesystem whose log is on another device: its
// state cannot be told from the image alone.
var ErrExternalLog = errors.New("xfs log on an external device")

// LogState is what an internal log says of how the filesystem was left.
type LogState struct {
	// Clean is true when the last record is an unmount record (or the log
	// was never written): the kernel would mount without recovery and the
	// tree on disk is the whole state. False means the kernel would replay
	// the log first, so the tree read without it may be stale.
	Clean bool
	// Head and Tail are where recovery would start and stop, in basic
	// blocks from the start of the log (equal when Clean), and Cycle is
	// the head's cycle number: xfs_logprint's "log tail: T head: H".
	Head, Tail int64
	Cycle      uint32
}

// Log reports the state of the filesystem's internal log, read when the
// filesystem was opened. The error wraps ErrExternalLog for a log on
// another device, ErrCorrupt for a log whose head or last record cannot be
// found, or the device's read error.
func (f *FS) Log() (LogState, error) { return f.log, f.logErr }

// Warnings says, one line each, what a user must know to trust what is
// read: a dirty log (the tree is stale) or a log that cannot be checked.
// It is empty for a cleanly unmounted filesystem.
func (f *FS) Warnings() []string {
	switch {
	case f.logErr != nil:
		return []string{fmt.Sprintf("xfs: cannot tell whether the filesystem was cleanly unmounted (%v): "+
			"if it was not, the tree read is the state last written back and misses changes still only in its log", f.logErr)}
	case !f.log.Clean:
		return []string{"xfs: the log is dirty (not cleanly unmounted: an image of a running system?): " +
			"the tree read is the state last written back and misses changes still only in the log, " +
			"such as a systemctl enable or disable just before the snapshot"}
	}
	return nil
}

// checkLog locates the internal log from the superblock sb and finds its
// state.
func (f *FS) checkLog(sb []byte) (LogState, error) {
	start := be.Uint64(sb[0x30:])
	blocks := uint64(be.Uint32(sb[0x60:]))
	if start == 0 {
		return LogState{}, fmt.Errorf("check log: %w (sb_logstart is 0)", ErrExternalLog)
	}
	d, err := f.daddr(start)
	if err != nil {
		return LogState{}, fmt.Errorf("check log: start: %w", err)
	}
	if blocks == 0 || blocks > f.dblocks-d {
		return LogState{}, fmt.Errorf("check log: %d blocks at block %d of %d: %w", blocks, d, f.dblocks, ErrCorrupt)
	}
	// The log lies inside one AG (mkfs puts it there; the kernel checks).
	if agb := start & (1<<f.agBlkLog - 1); blocks > f.agBlocks-agb {
		return LogState{}, fmt.Errorf("check log: %d blocks cross the end of AG at block %d: %w", blocks, agb, ErrCorrupt)
	}
	l := &logDev{r: f.r, devSize: f.size, off: int64(d) << f.blockLog, bbs: int64(blocks) << (f.blockLog - 9)}
	copy(l.uuid[:], sb[0x20:0x30])
	st, err := l.state()
	if err != nil {
		return LogState{}, fmt.Errorf("check log: %w", err)
	}
	return st, nil
}

// logDev is the internal log: bbs basic blocks at byte off of the device.
type logDev struct {
	r       io.ReaderAt
	devSize int64
	off     int64
	bbs     int64
	uuid    [16]byte
}

// read reads len(p)/bbSize basic blocks from bb on, all inside the log.
func (l *logDev) read(p []byte, bb int64) error {
	if bb < 0 || bb > l.bbs || int64(len(p)/bbSize) > l.bbs-bb || len(p)%bbSize != 0 {
		return fmt.Errorf("log block %d+%d outside the %d-block log: %w", bb, len(p)/bbSize, l.bbs, ErrCorrupt)
	}
	return inodefs.ReadFull(l.r, l.devSize, p, l.off+bb*bbSize, ErrCorrupt)
}

// blockCycle is xlog_get_cycle: the cycle stamped on basic block b.
func blockCycle(b []byte) uint32 {
	if be.Uint32(b) == logHeaderMagic {
		return be.Uint32(b[4:])
	}
	return be.Uint32(b)
}

// cycle reads the cycle of basic block bb.
func (l *logDev) cycle(bb int64) (uint32, error) {
	var b [8]byte
	if bb < 0 || bb >= l.bbs {
		return 0, fmt.Errorf("log block %d outside the %d-block log: %w", bb, l.bbs, ErrCorrupt)
	}
	if err := inodefs.ReadFull(l.r, l.devSize, b[:], l.off+bb*bbSize, ErrCorrupt); err != nil {
		return 0, err
	}
	return blockCycle(b[:]), nil
}

// readRange reads n basic blocks from start.
func (l *logDev) readRange(start, n int64) ([]byte, error) {
	if n < 0 || n > l.bbs {
		return nil, fmt.Errorf("%d log blocks: %w", n, ErrCorrupt)
	}
	b := make([]byte, n*bbSize)
	if err := l.read(b, start); err != nil {
		return nil, err
	}
	return b, nil
}

// findCycleStart is xlog_find_cycle_start: a binary search in
// [first, last] for the first block stamped with cycle, the blocks before
// it having another one.
func (l *logDev) findCycleStart(first, last int64, cycle uint32) (int64, error) {
	end := last
	mid := first + (end-first)/2
	for mid != first && mid != end {
		c, err := l.cycle(mid)
		if err != nil {
			return 0, err
		}
		if c == cycle {
			end = mid
		} else {
			first = mid
		}
		mid = first + (end-first)/2
	}
	return end, nil
}

// findVerifyCycle is xlog_find_verify_cycle: the first block of the n from
// start stamped with cycle, or -1.
func (l *logDev) findVerifyCycle(start, n int64, cycle uint32) (int64, error) {
	b, err := l.readRange(start, n)
	if err != nil {
		return 0, err
	}
	for i := int64(0); i < n; i++ {
		if blockCycle(b[i*bbSize:]) == cycle {
			return start + i, nil
		}
	}
	return -1, nil
}

// recHeader is the part of a log record header (xlog_rec_header) this
// reader looks at.
type recHeader struct {
	version uint32
	length  int64 // h_len: bytes of data after the header blocks
	tailLSN uint64
	numOps  uint32
	size    int64 // h_size: the log buffer size (v2)
	uuid    []byte
}

// parseHeader reads and checks a record header block, as
// xlog_valid_rec_header does.
func (l *logDev) parseHeader(b []byte, bb int64) (recHeader, error) {
	h := recHeader{
		version: be.Uint32(b[0x8:]),
		length:  int64(be.Uint32(b[0xC:])),
		tailLSN: be.Uint64(b[0x18:]),
		numOps:  be.Uint32(b[0x28:]),
		uuid:    b[0x130:0x140],
		size:    int64(be.Uint32(b[0x140:])),
	}
	switch {
	case h.version != 1 && h.version != logVersion2:
		return h, fmt.Errorf("log record at block %d: version %d: %w", bb, h.version, ErrCorrupt)
	case h.length <= 0 || h.length > logMaxRecord:
		return h, fmt.Errorf("log record at block %d: %d bytes long: %w", bb, h.length, ErrCorrupt)
	case h.numOps == 0 || h.numOps > 1<<31-1:
		return h, fmt.Errorf("log record at block %d: %d log ops: %w", bb, h.numOps, ErrCorrupt)
	case h.version == logVersion2 && (h.size <= 0 || h.size > logMaxRecord || h.size%bbSize != 0):
		return h, fmt.Errorf("log record at block %d: log buffer of %d bytes: %w", bb, h.size, ErrCorrupt)
	case h.version == logVersion2 && h.length > h.size:
		return h, fmt.Errorf("log record at block %d: %d bytes in a %d-byte log buffer: %w", bb, h.length, h.size, ErrCorrupt)
	}
	// xlog_header_check_mount: a null uuid is a log mkfs made.
	if !bytes.Equal(h.uuid, make([]byte, 16)) && !bytes.Equal(h.uuid, l.uuid[:]) {
		return h, fmt.Errorf("log record at block %d: of filesystem %x, not %x: %w", bb, h.uuid, l.uuid, ErrCorrupt)
	}
	return h, nil
}

// headerBlocks is xlog_logrec_hblks: the header and extended header blocks
// of a record.
func (h recHeader) headerBlocks() int64 {
	if h.version == logVersion2 && h.size > logCycleSize {
		return (h.size + logCycleSize - 1) / logCycleSize
	}
	return 1
}

// dataBlocks is BTOBB(h_len).
func (h recHeader) dataBlocks() int64 { return (h.length + bbSize - 1) / bbSize }

// findVerifyLogRecord is xlog_find_verify_log_record: it looks back from
// *last-1 (not before start) for a record header; when the record found
// does not end exactly at *last (extra more blocks counted past it), the
// head is inside that record and *last moves back to it. It reports
// whether the search hit the start of the log without finding one.
func (l *logDev) findVerifyLogRecord(start int64, last *int64, extra int64) (hitStart bool, err error) {
	if *last-start < 0 || *last-start > logTotalRecBBs {
		return false, fmt.Errorf("log record search %d..%d: %w", start, *last, ErrCorrupt)
	}
	b, err := l.readRange(start, *last-start)
	if err != nil {
		return false, err
	}
	i := *last - 1
	for ; i >= 0; i-- {
		if i < start {
			return false, fmt.Errorf("no log record header between blocks %d and %d: %w", start, *last, ErrCorrupt)
		}
		if be.Uint32(b[(i-start)*bbSize:]) == logHeaderMagic {
			break
		}
	}
	if i == -1 {
		return true, nil
	}
	h, err := l.parseHeader(b[(i-start)*bbSize:(i-start+1)*bbSize], i)
	if err != nil {
		return false, err
	}
	if *last-i+extra != h.dataBlocks()+h.headerBlocks() {
		*last = i
	}
	return false, nil
}

// findZeroed is xlog_find_zeroed: whether the log has blocks never
// written (cycle 0), and if so the head, the first of them after the
// last partial record is backed over.
func (l *logDev) findZeroed() (head int64, zeroed bool, err error) {
	first, err := l.cycle(0)
	if err != nil {
		return 0, false, err
	}
	if first == 0 {
		return 0, true, nil
	}
	last, err := l.cycle(l.bbs - 1)
	if err != nil {
		return 0, false, err
	}
	if last != 0 {
		return 0, false, nil
	}
	lastBlk, err := l.findCycleStart(0, l.bbs-1, 0)
	if err != nil {
		return 0, false, err
	}
	scan := min(int64(logTotalRecBBs), lastBlk)
	start := lastBlk - scan
	nb, err := l.findVerifyCycle(start, scan, 0)
	if err != nil {
		return 0, false, err
	}
	if nb != -1 {
		lastBlk = nb
	}
	// Back over a partial record; the end of the log is zero.
	hitStart, err := l.findVerifyLogRecord(start, &lastBlk, 0)
	if err != nil {
		return 0, false, err
	}
	if hitStart {
		return 0, false, fmt.Errorf("no log record header before block %d: %w", lastBlk, ErrCorrupt)
	}
	return lastBlk, true, nil
}

// findHead is xlog_find_head: the block after the last one written.
func (l *logDev) findHead() (int64, error) {
	head, zeroed, err := l.findZeroed()
	if err != nil || zeroed {
		return head, err
	}
	firstCycle, err := l.cycle(0)
	if err != nil {
		return 0, err
	}
	lastCycle, err := l.cycle(l.bbs - 1)
	if err != nil {
		return 0, err
	}
	var stopOnCycle uint32
	if firstCycle == lastCycle {
		// The whole log should carry lastCycle: the head is at its
		// physical end unless a block of the cycle before shows a hole
		// of out-of-order writes (x+1 ... | x ... | x-1 | x).
		head = l.bbs
		stopOnCycle = lastCycle - 1
	} else {
		stopOnCycle = lastCycle
		if head, err = l.findCycleStart(0, l.bbs-1, lastCycle); err != nil {
			return 0, err
		}
	}
	scan := min(int64(logTotalRecBBs), l.bbs)
	if head >= scan {
		nb, err := l.findVerifyCycle(head-scan, scan, stopOnCycle)
		if err != nil {
			return 0, err
		}
		if nb != -1 {
			head = nb
		}
	} else {
		// The window wraps: look at the physical end for the cycle
		// before, then at the start for the older cycle.
		nb, err := l.findVerifyCycle(l.bbs-(scan-head), scan-head, stopOnCycle-1)
		if err != nil {
			return 0, err
		}
		if nb != -1 {
			head = nb
		} else {
			if nb, err = l.findVerifyCycle(0, head, stopOnCycle); err != nil {
				return 0, err
			}
			if nb != -1 {
				head = nb
			}
		}
	}
	// The head must not be inside a record.
	scan = logRecBBs
	if head >= scan {
		if hitStart, err := l.findVerifyLogRecord(head-scan, &head, 0); err != nil {
			return 0, err
		} else if hitStart {
			return 0, fmt.Errorf("no log record header before block %d: %w", head, ErrCorrupt)
		}
	} else {
		hitStart, err := l.findVerifyLogRecord(0, &head, 0)
		if err != nil {
			return 0, err
		}
		if hitStart {
			start := l.bbs - min(scan-head, l.bbs)
			nb := l.bbs
			hs, err := l.findVerifyLogRecord(start, &nb, head)
			if err != nil {
				return 0, err
			}
			if hs {
				return 0, fmt.Errorf("no log record header before block %d: %w", head, ErrCorrupt)
			}
			if nb != l.bbs {
				head = nb
			}
		}
	}
	if head == l.bbs {
		head = 0
	}
	return head, nil
}

// lastRecord is xlog_rseek_logrec_hdr for one record: the header block
// closest before head, wrapping once around the log.
func (l *logDev) lastRecord(head int64) (int64, []byte, error) {
	const chunk = 64 // blocks read at a time, backwards
	b := make([]byte, chunk*bbSize)
	find := func(lo, hi int64) (int64, bool, error) { // in [lo, hi), backwards
		for hi > lo {
			n := min(int64(chunk), hi-lo)
			if err := l.read(b[:n*bbSize], hi-n); err != nil {
				return 0, false, err
			}
			for i := n - 1; i >= 0; i-- {
				if be.Uint32(b[i*bbSize:]) == logHeaderMagic {
					return hi - n + i, true, nil
				}
			}
			hi -= n
		}
		return 0, false, nil
	}
	at, ok, err := find(0, head)
	if err == nil && !ok {
		at, ok, err = find(head, l.bbs)
	}
	if err != nil {
		return 0, nil, err
	}
	if !ok {
		return 0, nil, fmt.Errorf("no log record header in the log: %w", ErrCorrupt)
	}
	h := make([]byte, bbSize)
	if err := l.read(h, at); err != nil {
		return 0, nil, err
	}
	return at, h, nil
}

// state is xlog_find_tail up to xlog_check_unmount_rec: the head, the
// last record before it, and whether that record is an unmount record
// ending at the head.
func (l *logDev) state() (LogState, error) {
	if l.bbs < 2 {
		return LogState{}, fmt.Errorf("log of %d blocks: %w", l.bbs, ErrCorrupt)
	}
	head, err := l.findHead()
	if err != nil {
		return LogState{}, err
	}
	if head == 0 {
		c, err := l.cycle(0)
		if err != nil {
			return LogState{}, err
		}
		if c == 0 {
			// Never written: nothing to recover.
			return LogState{Clean: true}, nil
		}
	}
	rb, hb, err := l.lastRecord(head)
	if err != nil {
		return LogState{}, err
	}
	h, err := l.parseHeader(hb, rb)
	if err != nil {
		return LogState{}, err
	}
	st := LogState{Head: head, Tail: int64(uint32(h.tailLSN)), Cycle: blockCycle(hb)}
	if st.Tail >= l.bbs {
		return LogState{}, fmt.Errorf("log record at block %d: tail block %d outside the %d-block log: %w", rb, st.Tail, l.bbs, ErrCorrupt)
	}
	after := (rb + h.headerBlocks() + h.dataBlocks()) % l.bbs
	if head == after && h.numOps == 1 {
		op := make([]byte, bbSize)
		if err := l.read(op, (rb+h.headerBlocks())%l.bbs); err != nil {
			return LogState{}, err
		}
		if op[9]&logUnmountTrans != 0 {
			st.Clean, st.Tail = true, after
		}
	}
	return st, nil
}
