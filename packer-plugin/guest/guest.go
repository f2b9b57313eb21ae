// Package guest carries the amilint binaries the provisioner uploads into
// guests and picks the one for a guest's architecture.
//
// They are the guest build of amilint (cmd/amilint built with the
// amilint_guest tag: no AWS clients, no disk image readers, no Prometheus
// exporter) for linux/amd64 and linux/arm64, zstd-compressed into bin/ by
// mkguest before the plugin is built (`make guest-binaries`, the release's
// before hook) and embedded in the plugin binary. Embedding is what lets
// `packer init`, which installs the plugin binary alone, give a plugin that
// audits an arm64 guest from an amd64 or macOS host with no network on the
// guest and no option to set.
package guest

import (
	"bytes"
	"embed"
	"fmt"
	"io"
	"io/fs"
	"strings"

	"github.com/klauspost/compress/zstd"
)

// Archs are the guest architectures a release carries, as GOARCH.
var Archs = []string{"amd64", "arm64"}

// MaxBinarySize bounds a guest binary, stripped and uncompressed: it is
// uploaded into every guest. mkguest refuses to build a bigger one.
const MaxBinarySize = 25_000_000

//go:embed bin
var embedded embed.FS

// Embedded returns the binaries embedded in this plugin build, named as
// FileName gives; a development build without `make guest-binaries` has
// none.
func Embedded() fs.FS {
	sub, err := fs.Sub(embedded, "bin")
	if err != nil {
		panic(err) // "bin" is a valid path: cannot happen
	}
	return sub
}

// FileName is the name of the compressed binary for linux/arch.
func FileName(arch string) string { return "amilint_linux_" + arch + ".zst" }

// Arch maps what `uname -m` prints on a guest to a GOARCH: x86_64 to amd64,
// aarch64 to arm64. Anything else (armv7l, armv8l — a 32-bit userland —,
// ppc64le, s390x …) is an error naming it.
func Arch(machine string) (string, error) {
	switch m := strings.TrimSpace(machine); m {
	case "x86_64", "amd64":
		return "amd64", nil
	case "aarch64", "arm64":
		return "arm64", nil
	case "":
		return "", fmt.Errorf("guest architecture: uname -m printed nothing")
	default:
		return "", fmt.Errorf("guest architecture %q: amilint guests are x86_64 or aarch64", m)
	}
}

// Carried lists the architectures fsys has a binary for.
func Carried(fsys fs.FS) []string {
	var out []string
	for _, a := range Archs {
		if _, err := fs.Stat(fsys, FileName(a)); err == nil {
			out = append(out, a)
		}
	}
	return out
}

// Binary returns the decompressed binary for linux/arch from fsys (the
// zstd frame's checksum is verified).
func Binary(fsys fs.FS, arch string) ([]byte, error) {
	f, err := fsys.Open(FileName(arch))
	if err != nil {
		carried := "no guest binaries (a development build: run make guest-binaries before building it)"
		if c := Carried(fsys); len(c) > 0 {
			carried = "linux/" + strings.Join(c, " and linux/") + " only"
		}
		return nil, fmt.Errorf("no amilint for linux/%s guests: this plugin build carries %s", arch, carried)
	}
	defer f.Close()
	dec, err := zstd.NewReader(f, zstd.WithDecoderConcurrency(1))
	if err != nil {
		return nil, fmt.Errorf("decompress %s: %w", FileName(arch), err)
	}
	defer dec.Close()
	var buf bytes.Buffer
	if _, err := io.Copy(&buf, dec); err != nil {
		return nil, fmt.Errorf("decompress %s: %w", FileName(arch), err)
	}
	return buf.Bytes(), nil
}
