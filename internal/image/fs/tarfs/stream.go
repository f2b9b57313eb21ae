package tarfs

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"

	"github.com/amilint/amilint/internal/image/rootfs"
)

// Defaults for a tarball read from a stream.
const (
	// DefaultStreamMaxMemory caps the contents OpenStream holds.
	DefaultStreamMaxMemory = 256 << 20
	// StreamMaxConfig is the most OpenStream keeps of a file where
	// configuration lives: what the facts reader reads of one at most.
	StreamMaxConfig = 1 << 20
	// StreamMaxOther is the most OpenStream keeps of a configuration-like
	// file (by its extension) elsewhere, under /opt for example.
	StreamMaxOther = 64 << 10
	// maxZstdWindow bounds the window a zstd frame may ask the decoder to
	// allocate: 128 MiB, what zstd --long writes at most by default.
	maxZstdWindow = 1 << 27
)

// configDirs are where the systemd model and the rules read file contents:
// unit files, drop-ins and presets, system.conf, os-release and
// machine-id, /etc configuration, EnvironmentFile= targets, agent state
// (/var/lib) and cloud-init's ds-identify, which the boot model reads as
// cloud-init-generator runs it. Paths are tar member names, cleaned.
var configDirs = []string{
	"etc/", "run/", "var/lib/", "usr/local/etc/",
	"usr/lib/systemd/", "lib/systemd/", "usr/local/lib/systemd/",
	"usr/lib/os-release", "usr/lib/cloud-init/ds-identify", "usr/libexec/cloud-init/ds-identify",
}

// configExts are the extensions of configuration files wherever they are
// (/opt/aws/amazon-cloudwatch-agent/etc/amazon-cloudwatch-agent.json).
var configExts = map[string]bool{
	".json": true, ".toml": true, ".conf": true, ".config": true, ".cfg": true,
	".yaml": true, ".yml": true, ".env": true, ".ini": true,
}

// StreamKeep is the default choice of OpenStream: it keeps the contents of
// files up to StreamMaxConfig bytes under configDirs, of files up to
// StreamMaxOther bytes whose name looks like configuration or that sit in
// an etc directory anywhere, and of nothing else. Programs, libraries and
// data are kept as metadata (type, mode, size), which is all the model
// asks of an ExecStart binary.
func StreamKeep(name string, size int64, mode fs.FileMode) bool {
	if size < 0 {
		return false
	}
	for _, d := range configDirs {
		if strings.HasPrefix(name, d) || name == strings.TrimSuffix(d, "/") {
			return size <= StreamMaxConfig
		}
	}
	if size > StreamMaxOther || mode&0o111 != 0 {
		return false
	}
	return configExts[path.Ext(name)] || strings.Contains("/"+path.Dir(name)+"/", "/etc/")
}

// OpenStream indexes a tarball (plain, gzip or zstd, recognised by its
// magic) read once from r, which cannot be read again: the contents of the
// files opt.Keep chooses (StreamKeep when nil) are held in memory, at most
// opt.MaxMemory bytes of them (DefaultStreamMaxMemory when 0); every other
// file is kept as metadata and opening it fails with ErrNotKept. Names,
// links and hard links are handled as Open handles them. It reads r to the
// end of the compressed stream, so every trailer is checked.
func OpenStream(r io.Reader, opt StreamOptions) (*FS, error) {
	o := Options{MaxMemory: opt.MaxMemory, MaxEntries: opt.MaxEntries}
	if o.MaxMemory <= 0 {
		o.MaxMemory = DefaultStreamMaxMemory
	}
	if o.MaxEntries <= 0 {
		o.MaxEntries = DefaultMaxEntries
	}
	keep := opt.Keep
	if keep == nil {
		keep = StreamKeep
	}
	br := bufio.NewReaderSize(r, 64<<10)
	head, err := br.Peek(512)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, bufio.ErrBufferFull) {
		return nil, fmt.Errorf("open tarball stream: %w", err)
	}
	comp, ok := DetectHead(head)
	if !ok {
		return nil, fmt.Errorf("open tarball stream: %w: no tar header%s", ErrCorrupt, sniff(head))
	}
	var stream io.Reader = br
	if comp != Plain {
		zr, err := decompressor(br, comp)
		if err != nil {
			return nil, fmt.Errorf("open tarball stream: %w", err)
		}
		defer zr.Close()
		stream = zr
	}
	t := &FS{root: &node{mode: fs.ModeDir | 0o755, children: map[string]*node{}}, comp: comp}
	if err := t.index(stream, nil, false, keep, o); err != nil {
		return nil, fmt.Errorf("open tarball stream: %w", err)
	}
	if comp != Plain {
		// Read on to the end of the compressed stream, so its trailers
		// are checked.
		if err := finish(stream); err != nil {
			return nil, fmt.Errorf("open tarball stream: %w", err)
		}
	}
	return t, nil
}

// StreamOptions bound what OpenStream keeps.
type StreamOptions struct {
	// Keep says whether to hold a regular file's content; nil means
	// StreamKeep. The name is cleaned and relative to the root.
	Keep func(name string, size int64, mode fs.FileMode) bool
	// MaxMemory caps the bytes of content held (0: DefaultStreamMaxMemory);
	// a tarball whose kept files exceed it fails with ErrTooLarge.
	MaxMemory int64
	// MaxEntries caps the number of entries (0: DefaultMaxEntries).
	MaxEntries int
}

// sniff names a disk image format in head, so feeding one on a stream
// says what went wrong.
func sniff(head []byte) string {
	switch {
	case strings.HasPrefix(string(head), "QFI\xfb"):
		return " (this is a qcow2 disk image: give it as a file)"
	case strings.HasPrefix(string(head), "KDMV"), strings.HasPrefix(string(head), "vhdxfile"), strings.HasPrefix(string(head), "conectix"):
		return " (this is a disk image: give it as a file)"
	case len(head) == 0:
		return " (the stream is empty)"
	}
	return ""
}

var _ rootfs.Source = (*FS)(nil)

// Compression is how the tarball was compressed.
func (t *FS) Compression() Compression { return t.comp }
