package imagetest

import (
	"archive/tar"
	"bytes"
)

// Tar builds a tarball from spec, three bytes an entry (at most 64
// entries): a name (an index into names), a kind and a format, and a body
// (an index into bodies for a file, into names for a link's target). A
// fuzz target builds its tarballs with it from a few fuzzed bytes instead
// of taking kilobytes of tar (every header is 512 bytes and the end 1024)
// as input, which left the engine minimizing instead of running; it
// corrupts them with Patch. The low three bits of the kind byte choose a
// regular file, a directory, a symbolic link, a hard link, a character
// device, a FIFO, a file declaring more bytes than it has, or an old-style
// ('\x00') regular file; the next two choose the header format (default,
// PAX, GNU, USTAR). Entries the writer refuses are left out.
func Tar(spec []byte, names, bodies []string) []byte {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for i := 0; i+3 <= len(spec) && i < 3*64; i += 3 {
		name := names[int(spec[i])%len(names)]
		kind, arg := spec[i+1], int(spec[i+2])
		h := &tar.Header{Name: name, Mode: 0o644, Format: []tar.Format{tar.FormatUnknown, tar.FormatPAX, tar.FormatGNU, tar.FormatUSTAR}[kind>>3&3]}
		var body string
		switch kind & 7 {
		case 0, 6, 7:
			h.Typeflag = tar.TypeReg
			if kind&7 == 7 {
				h.Typeflag = '\x00'
			}
			body = bodies[arg%len(bodies)]
			h.Size = int64(len(body))
		case 1:
			h.Typeflag, h.Mode = tar.TypeDir, 0o755
		case 2:
			h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, names[arg%len(names)], 0o777
		case 3:
			h.Typeflag, h.Linkname = tar.TypeLink, names[arg%len(names)]
		case 4:
			h.Typeflag, h.Devmajor, h.Devminor = tar.TypeChar, 1, 3
		case 5:
			h.Typeflag = tar.TypeFifo
		}
		if tw.WriteHeader(h) != nil {
			continue
		}
		if kind&7 == 6 {
			// Declares its size and stops short: the writer refuses to
			// close, what follows reads as this file's content.
			body = body[:len(body)/2]
		}
		_, _ = tw.Write([]byte(body))
		if kind&7 == 6 {
			return b.Bytes()
		}
	}
	_ = tw.Close()
	return b.Bytes()
}

// Patch applies patch to b in place, as NewPatched reads it: offset and
// value pairs, offsets with the low bit clear in the first head bytes.
func Patch(b []byte, head int, patch []byte) []byte {
	for off, v := range NewPatched(nil, int64(len(b)), int64(head), patch).Patches {
		b[off] = v
	}
	return b
}
