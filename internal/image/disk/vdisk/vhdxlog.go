package vdisk

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"sort"
)

// The VHDX log ([MS-VHDX] 2.3.3): a ring of 4 KiB sectors holding entries,
// each a header, descriptors and data sectors, that record writes to the
// file's metadata (the BAT, the metadata region) before they are made. A
// file not closed cleanly names its log in the header (a log GUID), and
// the entries still in it must be applied before the file is read, even
// read-only. amilint applies them in memory, over the file as read; it
// writes nothing.
const (
	vhdxLogSector   = 4 << 10
	vhdxMaxLog      = 64 << 20 // the log amilint agrees to hold
	vhdxMaxLogWrite = 256 << 20
)

// vhdxLogEntry is one entry of the log that passed its checks.
type vhdxLogEntry struct {
	seq     uint64
	at      int64 // offset in the log
	length  int64
	flushed int64 // FlushedFileOffset: the file must be at least this long
	last    int64 // LastFileOffset: the file as the entry leaves it
}

// vhdxReplay is the file with the log applied: 4 KiB sectors the log
// writes, over the file.
type vhdxReplay struct {
	r       io.ReaderAt
	size    int64 // the file's size, the log's growth included
	realEnd int64 // the file's size on disk
	sectors map[int64][]byte
}

// ReadAt reads the file as the log leaves it: the sectors it writes, the
// file elsewhere, zeros past the end of the file the log grew it to.
func (v *vhdxReplay) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || off >= v.size {
		return 0, io.EOF
	}
	want := len(p)
	if int64(want) > v.size-off {
		p = p[:v.size-off]
	}
	done := 0
	for done < len(p) {
		pos := off + int64(done)
		sec := pos &^ (vhdxLogSector - 1)
		chunk := p[done:min(len(p), done+int(sec+vhdxLogSector-pos))]
		switch s, ok := v.sectors[sec]; {
		case ok:
			copy(chunk, s[pos-sec:])
		case pos >= v.realEnd:
			clear(chunk)
		default:
			n := min(int64(len(chunk)), v.realEnd-pos)
			if err := readFull(v.r, v.realEnd, chunk[:n], pos, "vhdx"); err != nil {
				return done, err
			}
			clear(chunk[n:])
		}
		done += len(chunk)
	}
	if done < want {
		return done, io.EOF
	}
	return done, nil
}

// vhdxLog finds the active sequence of valid entries of the log of the
// header hdr, as qemu does (every 4 KiB position tried as a start; a
// sequence goes on while each next entry passes and numbers one more; the
// sequence whose first entry numbers highest is the active one), and
// returns the file with them applied and how many were, or r itself when
// the header names no log or no entry passes. An entry passes when its
// header, descriptors and data sectors say what they are and their CRC32C
// over the whole entry matches: a damaged entry is not applied.
func vhdxLog(r io.ReaderAt, fileSize int64, hdr []byte) (io.ReaderAt, int64, int, error) {
	le := binary.LittleEndian
	var zero [16]byte
	guid := [16]byte(hdr[48:64])
	logLen, logOff := int64(le.Uint32(hdr[68:])), int64(le.Uint64(hdr[72:]))
	if guid == zero || logLen == 0 {
		return r, fileSize, 0, nil
	}
	switch {
	case le.Uint16(hdr[64:]) != 0:
		return nil, 0, 0, fmt.Errorf("vhdx log version %d: %w", le.Uint16(hdr[64:]), ErrUnsupported)
	case logLen%(1<<20) != 0 || logOff < 1<<20 || logOff%(1<<20) != 0:
		return nil, 0, 0, corruptf("vhdx: log of %d bytes at %d", logLen, logOff)
	case logLen > vhdxMaxLog:
		return nil, 0, 0, fmt.Errorf("vhdx log of %d bytes: %w", logLen, ErrUnsupported)
	}
	log := make([]byte, logLen)
	if err := readFull(r, fileSize, log, logOff, "vhdx log"); err != nil {
		return nil, 0, 0, err
	}
	// sector returns the log sector at offset at, wrapping.
	sector := func(at int64) []byte { at %= logLen; return log[at : at+vhdxLogSector] }
	// entry reads and checks the entry at offset at, numbered after seq
	// (0: any).
	entry := func(at int64, seq uint64) (vhdxLogEntry, bool) {
		h := sector(at)
		e := vhdxLogEntry{at: at, length: int64(le.Uint32(h[8:])), seq: le.Uint64(h[16:]),
			flushed: int64(le.Uint64(h[48:])), last: int64(le.Uint64(h[56:]))}
		count := int64(le.Uint32(h[24:]))
		if string(h[:4]) != "loge" || e.length == 0 || e.length%vhdxLogSector != 0 || e.length > logLen ||
			e.seq == 0 || (seq != 0 && e.seq != seq+1) || [16]byte(h[32:48]) != guid || count*32 > e.length {
			return e, false
		}
		descSectors := (count + 2 + 127) / 128
		if descSectors*vhdxLogSector > e.length {
			return e, false
		}
		// The entry, gathered across the ring's end.
		b := make([]byte, 0, e.length)
		for i := int64(0); i < e.length; i += vhdxLogSector {
			b = append(b, sector(at+i)...)
		}
		data := descSectors
		for i := range count {
			d := b[64+32*i:][:32]
			if le.Uint64(d[24:]) != e.seq || le.Uint64(d[16:])%vhdxLogSector != 0 {
				return e, false
			}
			switch string(d[:4]) {
			case "zero":
				if le.Uint64(d[8:])%vhdxLogSector != 0 {
					return e, false
				}
			case "desc":
				if (data+1)*vhdxLogSector > e.length {
					return e, false
				}
				s := b[data*vhdxLogSector:][:vhdxLogSector]
				if string(s[:4]) != "data" || uint64(le.Uint32(s[4:]))<<32|uint64(le.Uint32(s[4092:])) != e.seq {
					return e, false
				}
				data++
			default:
				return e, false
			}
		}
		sum := le.Uint32(b[4:])
		clear(b[4:8])
		return e, crc32.Checksum(b, castagnoli) == sum
	}
	// One pass over the ring: a valid sequence is taken whole, and the
	// search goes on after it.
	var best []vhdxLogEntry
	for start := int64(0); start < logLen; {
		first, ok := entry(start, 0)
		if !ok {
			start += vhdxLogSector
			continue
		}
		seqs := []vhdxLogEntry{first}
		at := start + first.length
		for len(seqs) < int(logLen/vhdxLogSector) {
			next, ok := entry(at%logLen, seqs[len(seqs)-1].seq)
			if !ok {
				break
			}
			seqs = append(seqs, next)
			at += next.length
		}
		if best == nil || first.seq > best[0].seq {
			best = seqs
		}
		start = at
	}
	if best == nil {
		return r, fileSize, 0, nil
	}
	v := &vhdxReplay{r: r, size: fileSize, realEnd: fileSize, sectors: map[int64][]byte{}}
	var written int64
	for _, e := range best {
		if e.flushed > fileSize {
			return nil, 0, 0, corruptf("vhdx: the log says the file held %d bytes, it holds %d: truncated image", e.flushed, fileSize)
		}
		b := make([]byte, 0, e.length)
		for i := int64(0); i < e.length; i += vhdxLogSector {
			b = append(b, sector(e.at+i)...)
		}
		count := int64(le.Uint32(b[24:]))
		data := (count + 2 + 127) / 128
		put := func(off int64, s []byte) error {
			written += vhdxLogSector
			if written > vhdxMaxLogWrite || off < 0 || off > 1<<50 {
				return corruptf("vhdx: the log writes %d bytes at %d", written, off)
			}
			v.sectors[off] = s
			return nil
		}
		for i := range count {
			d := b[64+32*i:][:32]
			off := int64(le.Uint64(d[16:]))
			if string(d[:4]) == "zero" {
				for z := int64(0); z < int64(le.Uint64(d[8:])); z += vhdxLogSector {
					if err := put(off+z, make([]byte, vhdxLogSector)); err != nil {
						return nil, 0, 0, err
					}
				}
				continue
			}
			s := make([]byte, vhdxLogSector)
			copy(s[:8], d[8:16])                             // the leading bytes
			copy(s[8:4092], b[data*vhdxLogSector+8:][:4084]) // the data
			copy(s[4092:], d[4:8])                           // the trailing bytes
			if err := put(off, s); err != nil {
				return nil, 0, 0, err
			}
			data++
		}
		v.size = max(v.size, (e.last+1<<20-1)&^(1<<20-1))
	}
	// The replayed file ends at its last sector written at most.
	offs := make([]int64, 0, len(v.sectors))
	for o := range v.sectors {
		offs = append(offs, o)
	}
	sort.Slice(offs, func(i, j int) bool { return offs[i] < offs[j] })
	if n := len(offs); n > 0 {
		v.size = max(v.size, offs[n-1]+vhdxLogSector)
	}
	return v, v.size, len(best), nil
}
