package ext4

import (
	"encoding/binary"
	"fmt"

	"github.com/amilint/amilint/internal/image/integrity"
)

// An image taken from a running system (a no-reboot AMI, a snapshot) may
// hold committed metadata only in the jbd2 journal: the kernel replays it
// at mount and sets needs_recovery until then. The reader replays it in
// memory instead: committed journal blocks overlay the filesystem blocks
// they stand for. Nothing is written.

const (
	jbdMagic       = 0xC03B3998
	jbdDescriptor  = 1
	jbdCommit      = 2
	jbdSuperV1     = 3
	jbdSuperV2     = 4
	jbdRevoke      = 5
	jbdFlagEscape  = 1
	jbdFlagSameID  = 2
	jbdFlagLastTag = 8

	jbdIncompatRevoke = 0x1
	jbdIncompat64     = 0x2
	jbdIncompatAsync  = 0x4
	jbdIncompatCsumV2 = 0x8
	jbdIncompatCsumV3 = 0x10
	jbdIncompatFast   = 0x20
	jbdIncompatKnown  = jbdIncompatRevoke | jbdIncompat64 | jbdIncompatAsync |
		jbdIncompatCsumV2 | jbdIncompatCsumV3 | jbdIncompatFast

	jbdCRC32C = 4 // s_checksum_type of v2 and v3 checksums

	compatHasJournal = 0x4
)

// journalBlock is where the latest committed copy of a filesystem block
// lies in the journal.
type journalBlock struct {
	phys    uint64 // filesystem block holding the copy
	escaped bool   // the copy's first four bytes stand for the jbd2 magic
}

// replayJournal builds f.journal from the committed transactions of an
// internal journal that needs recovery. Each journal block is looked at
// once at most (one lap of the circular log), so it always ends. The
// journal superblock of an internal journal is read and its checksum
// verified even when there is nothing to replay, as the kernel does at
// every mount.
//
// With journal checksums (v2, v3), what the kernel's recovery refuses is a
// mismatch: the superblock, a descriptor or revoke block, a logged block
// whose tag's checksum fails (a lenient Checker skips it, as the kernel's
// recovery does before failing); a commit block that fails its checksum
// ends the log there, the transaction not replayed, as it does for the
// kernel.
func (f *FS) replayJournal(sb []byte) error {
	le := binary.LittleEndian
	if le.Uint32(sb[0x5C:])&compatHasJournal == 0 {
		return nil
	}
	needsRecovery := f.incompat&incompatRecover != 0
	jino := uint64(le.Uint32(sb[0xE0:]))
	if jino == 0 {
		if !needsRecovery {
			return nil // an external journal, clean: nothing of it is read
		}
		return fmt.Errorf("needs recovery from an external journal: %w", ErrUnsupported)
	}
	jn, err := f.inode(jino)
	if err != nil {
		return fmt.Errorf("journal inode: %w", err)
	}
	read := func(i uint64) ([]byte, uint64, error) {
		r, err := f.mapBlock(jn, i)
		if err != nil {
			return nil, 0, err
		}
		if r.zero {
			return nil, 0, fmt.Errorf("hole at journal block %d: %w", i, ErrCorrupt)
		}
		b, err := f.readBlock(r.phys)
		return b, r.phys, err
	}
	jsb, _, err := read(0)
	if err != nil {
		return fmt.Errorf("journal superblock: %w", err)
	}
	be := binary.BigEndian
	if be.Uint32(jsb) != jbdMagic || (be.Uint32(jsb[4:]) != jbdSuperV1 && be.Uint32(jsb[4:]) != jbdSuperV2) {
		return fmt.Errorf("journal superblock magic: %w", ErrCorrupt)
	}
	maxlen := uint64(be.Uint32(jsb[0x10:]))
	first := uint64(be.Uint32(jsb[0x14:]))
	seq := be.Uint32(jsb[0x18:])
	pos := uint64(be.Uint32(jsb[0x1C:]))
	var incompat uint32
	if be.Uint32(jsb[4:]) == jbdSuperV2 {
		incompat = be.Uint32(jsb[0x28:])
	}
	csum := incompat&(jbdIncompatCsumV2|jbdIncompatCsumV3) != 0
	var jseed uint32
	if csum && len(jsb) >= 1024 {
		s := append([]byte(nil), jsb[:1024]...)
		clear(s[0xFC:0x100])
		if integrity.CRC32CRaw(^uint32(0), s) != be.Uint32(jsb[0xFC:]) {
			if err := f.mismatch("journal superblock", jino); err != nil {
				return err
			}
		}
		if jsb[0x50] != jbdCRC32C {
			return fmt.Errorf("journal checksum type %d: %w", jsb[0x50], ErrUnsupported)
		}
		jseed = integrity.CRC32CRaw(^uint32(0), jsb[0x30:0x40])
	}
	switch {
	case int64(be.Uint32(jsb[0xC:])) != f.blockSize:
		return fmt.Errorf("journal block size %d: %w", be.Uint32(jsb[0xC:]), ErrCorrupt)
	case incompat&^jbdIncompatKnown != 0:
		return fmt.Errorf("journal features %#x: %w", incompat&^jbdIncompatKnown, ErrUnsupported)
	case !needsRecovery || pos == 0:
		return nil // clean: nothing to replay
	case first == 0 || first >= maxlen || pos < first || pos >= maxlen || maxlen > uint64(jn.size/f.blockSize):
		return fmt.Errorf("journal geometry (first %d, start %d, length %d): %w", first, pos, maxlen, ErrCorrupt)
	}
	tagBytes := 8
	switch {
	case incompat&jbdIncompatCsumV3 != 0:
		tagBytes = 16
	case incompat&jbdIncompatCsumV2 != 0:
		tagBytes = 10
	}
	if incompat&jbdIncompatCsumV3 == 0 && incompat&jbdIncompat64 != 0 {
		tagBytes += 4
	}
	tail := 0
	if incompat&(jbdIncompatCsumV2|jbdIncompatCsumV3) != 0 {
		tail = 4 // descriptor and revoke blocks end in a checksum
	}
	next := func(p uint64) uint64 {
		if p+1 >= maxlen {
			return first
		}
		return p + 1
	}

	overlay := map[uint64]journalBlock{}
	type logged struct {
		blk uint64
		jb  journalBlock
	}
	var pending []logged
	revoked := map[uint64]bool{}
	for scanned := uint64(0); scanned < maxlen; scanned++ {
		b, _, err := read(pos)
		if err != nil {
			return fmt.Errorf("journal block %d: %w", pos, err)
		}
		if be.Uint32(b) != jbdMagic || be.Uint32(b[8:]) != seq {
			break // the end of the log
		}
		typ := be.Uint32(b[4:])
		if csum && (typ == jbdDescriptor || typ == jbdRevoke) && !jbdTailOK(b, jseed) {
			what := "descriptor"
			if typ == jbdRevoke {
				what = "revoke"
			}
			if err := f.mismatch(fmt.Sprintf("journal %s block %d", what, pos), jino); err != nil {
				return err
			}
		}
		switch typ {
		case jbdDescriptor:
			descPos := pos
			for off := 12; off+tagBytes <= len(b)-tail; {
				var blk uint64
				var flags, tagSum uint32
				if incompat&jbdIncompatCsumV3 != 0 {
					blk = uint64(be.Uint32(b[off:]))
					flags = be.Uint32(b[off+4:])
					if incompat&jbdIncompat64 != 0 {
						blk |= uint64(be.Uint32(b[off+8:])) << 32
					}
					tagSum = be.Uint32(b[off+12:])
				} else {
					blk = uint64(be.Uint32(b[off:]))
					flags = uint32(be.Uint16(b[off+6:]))
					if incompat&jbdIncompat64 != 0 {
						blk |= uint64(be.Uint32(b[off+8:])) << 32
					}
					tagSum = uint32(be.Uint16(b[off+4:]))
				}
				off += tagBytes
				if flags&jbdFlagSameID == 0 {
					off += 16
				}
				// The tag's data is the next journal block.
				pos = next(pos)
				scanned++
				if scanned >= maxlen {
					return fmt.Errorf("journal transaction longer than the journal: %w", ErrCorrupt)
				}
				r, err := f.mapBlock(jn, pos)
				if err != nil {
					return fmt.Errorf("journal block %d: %w", pos, err)
				}
				if r.zero {
					return fmt.Errorf("hole at journal block %d: %w", pos, ErrCorrupt)
				}
				if blk >= f.blocksCount {
					return fmt.Errorf("journal logs block %d past the filesystem: %w", blk, ErrCorrupt)
				}
				skip := false
				if csum {
					ok, err := f.jbdTagOK(r.phys, jseed, seq, tagSum, incompat&jbdIncompatCsumV3 != 0)
					if err != nil {
						return fmt.Errorf("journal block %d: %w", pos, err)
					}
					if !ok {
						if err := f.mismatch(fmt.Sprintf("journal block %d (the copy of block %d logged by descriptor block %d)", pos, blk, descPos), jino); err != nil {
							return err
						}
						skip = true
					}
				}
				if !skip {
					pending = append(pending, logged{blk, journalBlock{phys: r.phys, escaped: flags&jbdFlagEscape != 0}})
				}
				if flags&jbdFlagLastTag != 0 {
					break
				}
			}
		case jbdRevoke:
			size := 4
			if incompat&jbdIncompat64 != 0 {
				size = 8
			}
			end := min(int(be.Uint32(b[12:])), len(b)-tail)
			for off := 16; off+size <= end; off += size {
				if size == 8 {
					revoked[be.Uint64(b[off:])] = true
				} else {
					revoked[uint64(be.Uint32(b[off:]))] = true
				}
			}
		case jbdCommit:
			if csum && !jbdCommitOK(b, jseed) {
				if err := f.mismatch(fmt.Sprintf("journal commit block %d", pos), jino); err != nil {
					return err
				}
				scanned = maxlen // the kernel ends the log at it
				continue
			}
			// A revoke in this transaction cancels earlier copies and
			// this transaction's own; then its blocks take effect.
			for blk := range revoked {
				delete(overlay, blk)
			}
			for _, l := range pending {
				if !revoked[l.blk] {
					overlay[l.blk] = l.jb
				}
			}
			pending, revoked = pending[:0], map[uint64]bool{}
			seq++
		default:
			scanned = maxlen // an unknown block ends the log
			continue
		}
		pos = next(pos)
	}
	if len(overlay) > 0 {
		f.journal = overlay
	}
	return nil
}

// jbdTailOK checks the CRC32C in the last four bytes of a journal
// descriptor or revoke block (jbd2_descriptor_block_csum_verify).
func jbdTailOK(b []byte, seed uint32) bool {
	n := len(b) - 4
	c := integrity.CRC32CRaw(seed, b[:n])
	c = integrity.CRC32CRaw(c, []byte{0, 0, 0, 0})
	return c == binary.BigEndian.Uint32(b[n:])
}

// jbdCommitOK checks a commit block's CRC32C, stored in its first checksum
// word (jbd2_commit_block_csum_verify).
func jbdCommitOK(b []byte, seed uint32) bool {
	c := integrity.CRC32CRaw(seed, b[:0x10])
	c = integrity.CRC32CRaw(c, []byte{0, 0, 0, 0})
	c = integrity.CRC32CRaw(c, b[0x14:])
	return c == binary.BigEndian.Uint32(b[0x10:])
}

// jbdTagOK checks a logged block, at filesystem block phys, against its
// tag's checksum: the CRC32C of the transaction's sequence number and the
// block as logged, 32 bits in a v3 tag, the low 16 in a v2 one
// (jbd2_block_tag_csum_verify).
func (f *FS) jbdTagOK(phys uint64, seed, seq, want uint32, v3 bool) (bool, error) {
	b, err := f.readBlock(phys)
	if err != nil {
		return false, err
	}
	var sb [4]byte
	binary.BigEndian.PutUint32(sb[:], seq)
	c := integrity.CRC32CRaw(integrity.CRC32CRaw(seed, sb[:]), b)
	if !v3 {
		c &= 0xFFFF
	}
	return c == want, nil
}

// readOverlaid reads len(p) bytes at off, block by block, taking each
// block the journal holds a committed copy of from the journal.
func (f *FS) readOverlaid(p []byte, off int64) error {
	var magicBytes [4]byte
	binary.BigEndian.PutUint32(magicBytes[:], jbdMagic)
	for len(p) > 0 {
		in := off % f.blockSize
		n := min(int64(len(p)), f.blockSize-in)
		src := off
		jb, ok := f.journal[uint64(off/f.blockSize)]
		if ok {
			src = int64(jb.phys)*f.blockSize + in
		}
		if err := f.readRaw(p[:n], src); err != nil {
			return err
		}
		if ok && jb.escaped {
			for i := in; i < 4 && i-in < n; i++ {
				p[i-in] = magicBytes[i]
			}
		}
		p, off = p[n:], off+n
	}
	return nil
}
