package unit

import (
	"bytes"
	"encoding/binary"
	"io"
	"io/fs"
)

// maxTZif bounds what ImageZones reads of /etc/localtime; zone files are
// a few kilobytes.
const maxTZif = 1 << 20

// ImageZones is Zones of the image whose root fsys is (unrooted names,
// links resolved inside the root, as rootfs.FS does): what PID 1 of the
// booted image finds, where glibc reads the local time zone from
// /etc/localtime (PID 1 has no TZ) and verify_timezone opens
// /usr/share/zoneinfo. When /etc/localtime is missing or not a zone file
// glibc falls back to UTC, a zone calendar_spec_from_string takes in
// any case.
func ImageZones(fsys fs.FS) Zones {
	z := Zones{Local: [2]string{"UTC", "UTC"}}
	if f, err := fsys.Open("etc/localtime"); err == nil {
		data, err := io.ReadAll(io.LimitReader(f, maxTZif+1))
		_ = f.Close()
		if names, ok := TZifNames(data); err == nil && len(data) <= maxTZif && ok {
			z.Local = names
		}
	}
	z.File = func(name string) bool {
		f, err := fsys.Open("usr/share/zoneinfo/" + name)
		if err != nil {
			return false
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil || !fi.Mode().IsRegular() {
			return false
		}
		var magic [4]byte
		_, err = io.ReadFull(f, magic[:])
		return err == nil && string(magic[:]) == "TZif"
	}
	return z
}

// TZifNames is the tzname glibc's tzset() leaves after reading the zone
// file data (__tzfile_read, time/tzfile.c): walking the transitions from
// the last, the abbreviation of the first standard and of the first
// daylight-saving type met; with no transitions, the first abbreviation;
// with no daylight-saving type, the standard one twice. ok is false for
// data glibc refuses (it then falls back to UTC). A later localtime()
// may set tzname from the file's TZ string instead; PID 1 parses its
// units before any.
func TZifNames(data []byte) (names [2]string, ok bool) {
	const header = 44
	if len(data) < header || string(data[:4]) != "TZif" {
		return names, false
	}
	counts := func(b []byte) (isgmt, isstd, leaps, trans, types, chars uint64) {
		c := func(i int) uint64 { return uint64(binary.BigEndian.Uint32(b[20+4*i:])) }
		return c(0), c(1), c(2), c(3), c(4), c(5)
	}
	body := data[header:]
	width := uint64(4)
	if data[4] != 0 {
		// Version 2 and later: skip the 32-bit data to the 64-bit
		// header and data.
		isgmt, isstd, leaps, trans, types, chars := counts(data)
		skip := trans*5 + types*6 + chars + leaps*8 + isstd + isgmt
		if skip > uint64(len(body)) || uint64(len(body))-skip < header {
			return names, false
		}
		data = body[skip:]
		if string(data[:4]) != "TZif" {
			return names, false
		}
		body, width = data[header:], 8
	}
	isgmt, isstd, leaps, trans, types, chars := counts(data)
	if isstd > types || isgmt > types || types == 0 {
		return names, false
	}
	need := trans*(width+1) + types*6 + chars + leaps*(width+4) + isstd + isgmt
	if trans > maxTZif || types > maxTZif || chars > maxTZif || leaps > maxTZif || need > uint64(len(body)) {
		return names, false
	}
	idx := body[trans*width : trans*width+trans]
	tt := body[trans*(width+1) : trans*(width+1)+types*6]
	zone := body[trans*(width+1)+types*6 : trans*(width+1)+types*6+chars]
	isdst := make([]byte, types)
	abbr := make([]string, types)
	for i := range types {
		d, a := tt[6*i+4], uint64(tt[6*i+5])
		if d > 1 || a >= chars {
			return names, false
		}
		isdst[i] = d
		s := zone[a:]
		if n := bytes.IndexByte(s, 0); n >= 0 {
			s = s[:n]
		}
		abbr[i] = string(s)
	}
	for _, t := range idx {
		if uint64(t) >= types {
			return names, false
		}
	}
	set := [2]bool{}
	for i := len(idx) - 1; i >= 0; i-- {
		t := idx[i]
		if d := isdst[t]; !set[d] {
			names[d], set[d] = abbr[t], true
			if set[1-d] {
				break
			}
		}
	}
	if !set[0] {
		z := zone
		if n := bytes.IndexByte(z, 0); n >= 0 {
			z = z[:n]
		}
		names[0], set[0] = string(z), true
	}
	if !set[1] {
		names[1] = names[0]
	}
	return names, true
}
