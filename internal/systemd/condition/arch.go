package condition

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/amilint/amilint/internal/image/fs/tarfs"
	"github.com/amilint/amilint/internal/image/rootfs"
)

// archBinaries are read for the image's architecture, first found wins:
// the system manager itself, then a shell every image has.
var archBinaries = []string{"usr/lib/systemd/systemd", "lib/systemd/systemd", "usr/bin/sh", "bin/sh", "usr/bin/env", "bin/busybox"}

// architectures are the names systemd's architecture_from_string knows.
var architectures = []string{"x86", "x86-64", "ppc", "ppc-le", "ppc64", "ppc64-le", "ia64", "parisc", "parisc64",
	"s390", "s390x", "sparc", "sparc64", "mips", "mips-le", "mips64", "mips64-le", "alpha", "arm", "arm-be",
	"arm64", "arm64-be", "sh", "sh64", "m68k", "tilegx", "cris", "nios2", "riscv32", "riscv64", "arc", "arc-be", "loongarch64"}

// readArchitecture reads the ELF header of the image's first binary of
// archBinaries and names its architecture as systemd does; "" when none
// is an ELF file it knows.
func readArchitecture(fsys *rootfs.FS) (arch, source string, err error) {
	for _, p := range archBinaries {
		f, err := fsys.Open(p)
		if err != nil {
			if absent(err) || errors.Is(err, tarfs.ErrNotKept) {
				continue // the next binary may be readable
			}
			return "", "", fmt.Errorf("open /%s: %w", p, err)
		}
		var hdr [20]byte
		_, err = io.ReadFull(f, hdr[:])
		f.Close()
		if err != nil {
			continue // not an ELF file, or a truncated one
		}
		if a := elfArchitecture(hdr[:]); a != "" {
			return a, "/" + p, nil
		}
	}
	return "", "", nil
}

// ImageArchitecture is the architecture of the image's binaries in
// systemd's names ("x86-64", "arm64"), "" when none says.
func ImageArchitecture(fsys *rootfs.FS) string {
	arch, _, _ := readArchitecture(fsys)
	return arch
}

// ELF machine numbers.
const (
	emSPARC     = 2
	em386       = 3
	em68K       = 4
	emMIPS      = 8
	emPARISC    = 15
	emPPC       = 20
	emPPC64     = 21
	emS390      = 22
	emARM       = 40
	emSH        = 42
	emSPARCV9   = 43
	emIA64      = 50
	emX8664     = 62
	emCRIS      = 76
	emAARCH64   = 183
	emTILEGX    = 191
	emARCV2     = 195
	emRISCV     = 243
	emLOONGARCH = 258
	emNIOS2     = 113
	emALPHA     = 0x9026
)

// elfArchitecture names the architecture of an ELF header (its first 20
// bytes) as systemd's uname_architecture would on that machine.
func elfArchitecture(h []byte) string {
	if len(h) < 20 || string(h[:4]) != "\x7fELF" {
		return ""
	}
	is64 := h[4] == 2
	var bo binary.ByteOrder = binary.LittleEndian
	le := h[5] == 1
	if h[5] == 2 {
		bo = binary.BigEndian
	} else if h[5] != 1 {
		return ""
	}
	pick := func(le32, be32, le64, be64 string) string {
		switch {
		case is64 && le:
			return le64
		case is64:
			return be64
		case le:
			return le32
		}
		return be32
	}
	switch bo.Uint16(h[18:20]) {
	case emX8664:
		return "x86-64"
	case em386:
		return "x86"
	case emAARCH64:
		return pick("", "", "arm64", "arm64-be")
	case emARM:
		return pick("arm", "arm-be", "", "")
	case emPPC64:
		return pick("", "", "ppc64-le", "ppc64")
	case emPPC:
		return pick("ppc-le", "ppc", "", "")
	case emS390:
		return pick("", "s390", "", "s390x")
	case emRISCV:
		return pick("riscv32", "", "riscv64", "")
	case emMIPS:
		return pick("mips-le", "mips", "mips64-le", "mips64")
	case emLOONGARCH:
		return pick("", "", "loongarch64", "")
	case emSPARCV9:
		return "sparc64"
	case emSPARC:
		return "sparc"
	case emIA64:
		return "ia64"
	case emPARISC:
		return pick("", "parisc", "", "parisc64")
	case emALPHA:
		return "alpha"
	case em68K:
		return "m68k"
	case emSH:
		return pick("sh", "sh", "sh64", "sh64")
	case emTILEGX:
		return "tilegx"
	case emCRIS:
		return "cris"
	case emNIOS2:
		return "nios2"
	case emARCV2:
		return pick("arc", "arc-be", "", "")
	}
	return ""
}

// testArchitecture is condition_test_architecture against the image's
// architecture (or the assumed one).
func (e *Env) testArchitecture(v string) (Verdict, string) {
	arch, src := e.Host.Architecture, "the image's binaries are "+e.Host.Architecture+" ("+e.Host.ArchitectureSource+")"
	if a, ok := e.assume.get("architecture"); ok {
		arch, src = a, "assumed (--assume architecture="+a+")"
	}
	if arch == "" {
		return Unknown, "no binary of the image names its architecture; --assume architecture=... decides it"
	}
	if v == "native" {
		return True, src + "; native is the architecture systemd was built for"
	}
	if !slices.Contains(architectures, v) {
		return False, fmt.Sprintf("systemd knows no architecture %q", v)
	}
	return verdictOf(v == arch), src
}
