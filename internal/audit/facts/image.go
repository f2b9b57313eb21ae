package facts

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"

	"github.com/amilint/amilint/internal/image/ostree"
	"github.com/amilint/amilint/internal/image/rootfs"
	"github.com/amilint/amilint/internal/systemd/unit"
)

// systemd 252's built-in manager defaults (src/core/main.c, src/basic/def.h).
const (
	builtinRestartSec      = Seconds(0.1)
	builtinStartLimitSec   = Seconds(10)
	builtinStartLimitBurst = 5
	managerSection         = "Manager"
)

// systemConfDirs are where system.conf.d drop-ins live, in precedence order.
var systemConfDirs = []string{
	"etc/systemd/system.conf.d",
	"run/systemd/system.conf.d",
	"usr/local/lib/systemd/system.conf.d",
	"usr/lib/systemd/system.conf.d",
	"lib/systemd/system.conf.d",
}

// readImage reads os-release and the machine-id state.
func readImage(fsys *rootfs.FS) (Image, error) {
	im := Image{OSRelease: map[string]string{}}
	for _, p := range []string{"etc/os-release", "usr/lib/os-release"} {
		// Like systemd's os-release lookup, a file that cannot be read
		// (missing, a directory, a loop, a mask) falls through to the next.
		b, err := readLimited(fsys, p)
		if err != nil {
			continue
		}
		im.OSRelease = ParseEnv(b).Keys
		break
	}
	b, err := readLimited(fsys, "etc/machine-id")
	switch {
	case errors.Is(err, rootfs.ErrMasked):
		// A link to /dev/null reads as empty.
		im.MachineID = "empty"
	case errors.Is(err, fs.ErrNotExist):
		im.MachineID = "missing"
	case err != nil:
		// A directory, a link loop, an oversized file: systemd cannot
		// read it either and, with a warning, takes it as a first boot.
		im.MachineID = "unreadable"
	default:
		switch strings.TrimSpace(string(b)) {
		case "":
			im.MachineID = "empty"
		case "uninitialized":
			im.MachineID = "uninitialized"
		default:
			im.MachineID = "present"
		}
	}
	// systemd 252 (src/core/main.c) takes a boot as the first boot when
	// reading /etc/machine-id fails or it says "uninitialized" (an empty
	// file is not a first boot), and then applies presets to every unit.
	im.FirstBootPresets = im.MachineID == "missing" || im.MachineID == "uninitialized" || im.MachineID == "unreadable"
	if im.RuntimeFiles, err = runtimeFiles(fsys); err != nil {
		return im, err
	}
	im.EtcLayout = ostree.Layout(fsys)
	// A filesystem reader says when its tree may be stale (xfs.FS.Warnings).
	if w, ok := fsys.Source().(interface{ Warnings() []string }); ok {
		im.Warnings = w.Warnings()
	}
	return im, nil
}

// readManager reads the manager defaults policies need from system.conf
// and its drop-ins, in the order systemd applies them.
func readManager(fsys *rootfs.FS) (Manager, error) {
	m := Manager{
		DefaultRestartSec:            builtinRestartSec,
		DefaultStartLimitIntervalSec: builtinStartLimitSec,
		DefaultStartLimitBurst:       builtinStartLimitBurst,
		Sources:                      []string{},
	}
	files := []string{"etc/systemd/system.conf"}
	seen := map[string]bool{}
	var dropins []string
	for _, dir := range systemConfDirs {
		ents, err := fsys.ReadDir(dir)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, rootfs.ErrNotDir) {
				continue
			}
			return m, fmt.Errorf("read %s: %w", dir, err)
		}
		for _, e := range ents {
			n := e.Name()
			if !strings.HasSuffix(n, ".conf") || seen[n] {
				continue
			}
			seen[n] = true
			dropins = append(dropins, dir+"/"+n)
		}
	}
	slices.SortFunc(dropins, func(a, b string) int { return strings.Compare(pathBase(a), pathBase(b)) })
	files = append(files, dropins...)
	for _, f := range files {
		b, err := readLimited(fsys, f)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, rootfs.ErrMasked) {
			continue
		}
		if err != nil {
			return m, fmt.Errorf("read %s: %w", f, err)
		}
		opts, err := unit.ParseConfig(b)
		if err != nil {
			m.Problems = append(m.Problems, fmt.Sprintf("/%s: %v", f, err))
			continue
		}
		m.Sources = append(m.Sources, "/"+f)
		for _, o := range opts {
			if o.Section != managerSection {
				continue
			}
			switch o.Name {
			case "DefaultRestartSec":
				m.DefaultRestartSec = m.span(f, o, m.DefaultRestartSec)
			case "DefaultStartLimitIntervalSec", "DefaultStartLimitInterval":
				m.DefaultStartLimitIntervalSec = m.span(f, o, m.DefaultStartLimitIntervalSec)
			case "DefaultStartLimitBurst":
				n, err := atoiBounded(o.Value)
				if err != nil {
					m.Problems = append(m.Problems, fmt.Sprintf("/%s: %s: %v", f, o.Name, err))
					continue
				}
				m.DefaultStartLimitBurst = n
			}
		}
	}
	return m, nil
}

func (m *Manager) span(file string, o *unit.Option, old Seconds) Seconds {
	s, err := ParseSeconds(o.Value)
	if err != nil {
		m.Problems = append(m.Problems, fmt.Sprintf("/%s: %s: %v", file, o.Name, err))
		return old
	}
	return s
}

func pathBase(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[i+1:]
	}
	return p
}
