package condition

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/amilint/amilint/internal/image/rootfs"
	"github.com/amilint/amilint/internal/systemd/unit"
)

// volatileDirs are filled by the running machine (API file systems and
// tmpfs), so the image at rest says nothing about what is there at boot.
var volatileDirs = []string{"/run", "/proc", "/sys", "/dev", "/tmp"}

// volatile returns the volatile directory p is in, "" if none.
func volatile(p string) string {
	for _, d := range volatileDirs {
		if p == d || strings.HasPrefix(p, d+"/") {
			return d
		}
	}
	return ""
}

// Env is what conditions are decided against: one image, and what the
// user states about the machine that boots it.
type Env struct {
	fsys   *rootfs.FS
	assume Assumptions
	// Host is what the image says about the machine it boots, as read.
	Host Host
	// Version is the systemd version whose specifiers expand (%D is
	// new in 257); 0 is the oldest modelled.
	Version int
}

// Host is what an image says about the machine it boots.
type Host struct {
	// CmdLines are the kernel command lines the image's boot loader
	// configuration passes, each with its source; empty when the image
	// has none (a container image).
	CmdLines []CmdLine `json:"kernel_command_lines"`
	// CmdLinesUnread says why the boot loader configuration could not be
	// read whole (a tarball read from a stream keeps only some files);
	// the command line is then unknown.
	CmdLinesUnread string `json:"kernel_command_lines_unread,omitempty"`
	// Architecture is systemd's name for the architecture of the image's
	// binaries ("x86-64", "arm64"), "" when none could be read.
	Architecture string `json:"architecture,omitempty"`
	// ArchitectureSource is the binary it was read from.
	ArchitectureSource string `json:"architecture_source,omitempty"`
	// FirstBoot reports that the next boot is a first boot
	// (/etc/machine-id missing, unreadable or "uninitialized").
	FirstBoot bool `json:"first_boot"`
	// Kernels are the kernel versions the image installs (its
	// /usr/lib/modules directories), sorted.
	Kernels []string `json:"kernels"`
	// OSRelease are the image's os-release fields.
	OSRelease map[string]string `json:"-"`
	// Assumed are the user's assumptions about the machine, by key.
	Assumed Assumptions `json:"assumed"`
}

// CmdLine is one kernel command line and where it was read.
type CmdLine struct {
	Value  string `json:"value"`
	Source string `json:"source"`
}

// NewEnv reads what an image says about the machine it boots. firstBoot
// is whether the image's next boot is a first boot (install.FirstBoot).
// It fails only on an I/O error of the image.
func NewEnv(fsys *rootfs.FS, firstBoot bool, assume Assumptions) (*Env, error) {
	if assume == nil {
		assume = Assumptions{}
	}
	e := &Env{fsys: fsys, assume: assume, Host: Host{FirstBoot: firstBoot, Kernels: []string{}, CmdLines: []CmdLine{}, Assumed: assume}}
	var err error
	if e.Host.CmdLines, err = readCmdLines(fsys); err != nil {
		if !errors.Is(err, errNotKept) {
			return nil, err
		}
		e.Host.CmdLines = []CmdLine{}
		e.Host.CmdLinesUnread = err.Error() + " (the image was read from a stream, which keeps configuration files only)"
	}
	if e.Host.Architecture, e.Host.ArchitectureSource, err = readArchitecture(fsys); err != nil {
		return nil, err
	}
	e.Host.OSRelease = readOSRelease(fsys)
	for _, d := range []string{"usr/lib/modules", "lib/modules"} {
		ents, err := fsys.ReadDir(d)
		if err != nil {
			if absent(err) {
				continue
			}
			return nil, fmt.Errorf("read /%s: %w", d, err)
		}
		for _, ent := range ents {
			if ent.IsDir() && !slices.Contains(e.Host.Kernels, ent.Name()) {
				e.Host.Kernels = append(e.Host.Kernels, ent.Name())
			}
		}
		break
	}
	slices.Sort(e.Host.Kernels)
	return e, nil
}

// absent reports errors that only mean a path is not there to read.
func absent(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, rootfs.ErrNotDir) ||
		errors.Is(err, rootfs.ErrMasked) || errors.Is(err, rootfs.ErrTooManyLinks) || errors.Is(err, fs.ErrInvalid)
}

// test decides one check, negation not applied.
func (e *Env) test(kind, v string) (Verdict, string) {
	if pathKind(kind) {
		return e.testPath(kind, v)
	}
	switch kind {
	case "FirstBoot":
		want, ok := parseBool(v)
		if !ok {
			return False, fmt.Sprintf("%q is not a boolean, which systemd takes as failed", v)
		}
		first, src := e.firstBoot()
		if first == Unknown {
			return Unknown, src
		}
		return verdictOf((first == True) == want), src
	case "KernelCommandLine":
		return e.testCmdLine(v)
	case "Architecture":
		return e.testArchitecture(v)
	case "OSRelease":
		return e.testOSRelease(v)
	case "User":
		// The system manager runs as root, with no other groups.
		return verdictOf(v == "root" || v == "0" || v == "@system"), "the system manager runs units' conditions as root"
	case "Group":
		return verdictOf(v == "root" || v == "0"), "the system manager runs as root, group root, with no other groups"
	case "KernelVersion":
		return e.testKernelVersion(v)
	case "MemoryPressure", "CPUPressure", "IOPressure":
		return Unknown, "pressure is measured on the running machine"
	}
	return e.testAssumed(kind, v)
}

// testPath decides the path checks against the image.
// rootShell is what %s, the shell of the manager's user (root), expands
// to: default_root_shell, /bin/bash when the image has it (a link to
// /dev/null counts: it exists at boot), /bin/sh otherwise.
func (e *Env) rootShell() string {
	if e.fsys != nil {
		if _, err := e.fsys.Stat("bin/bash"); err == nil || errors.Is(err, rootfs.ErrMasked) {
			return "/bin/bash"
		}
	}
	return "/bin/sh"
}

func (e *Env) testPath(kind, p string) (Verdict, string) {
	if d := volatile(p); d != "" {
		return Unknown, fmt.Sprintf("%s is filled by the running machine", d)
	}
	switch kind {
	case "PathIsMountPoint":
		if p == "/" {
			return True, "/ is always a mount point"
		}
		return Unknown, "what is mounted is decided at boot"
	case "PathIsReadWrite", "PathIsEncrypted":
		return Unknown, "decided by how the running machine mounts it"
	case "NeedsUpdate":
		return e.testNeedsUpdate(p)
	case "PathExistsGlob":
		return e.testGlob(p)
	}
	name := rootfs.Clean(p)
	if kind == "PathIsSymbolicLink" {
		fi, err := e.fsys.Lstat(name)
		if err != nil {
			return e.pathErr(p, err)
		}
		return verdictOf(fi.Mode()&fs.ModeSymlink != 0), inImage(p, fi.Mode()&fs.ModeSymlink != 0, "a symbolic link")
	}
	if r, err := e.fsys.Resolve(name); err == nil || errors.Is(err, fs.ErrNotExist) {
		if d := volatile("/" + r); d != "" && r != rootfs.NullName {
			return Unknown, fmt.Sprintf("%s resolves to %s, which the running machine fills", p, "/"+r)
		}
	}
	fi, err := e.fsys.Stat(name)
	if errors.Is(err, rootfs.ErrMasked) {
		// A link to /dev/null: a character device at boot.
		switch kind {
		case "PathExists":
			return True, fmt.Sprintf("%s is a link to /dev/null in the image", p)
		}
		return False, fmt.Sprintf("%s is a link to /dev/null in the image", p)
	}
	if err != nil {
		return e.pathErr(p, err)
	}
	switch kind {
	case "PathExists":
		return True, fmt.Sprintf("%s exists in the image", p)
	case "PathIsDirectory":
		return verdictOf(fi.IsDir()), inImage(p, fi.IsDir(), "a directory")
	case "FileNotEmpty":
		ok := fi.Mode().IsRegular() && fi.Size() > 0
		return verdictOf(ok), inImage(p, ok, "a non-empty regular file")
	case "FileIsExecutable":
		ok := fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
		return verdictOf(ok), inImage(p, ok, "an executable regular file")
	case "DirectoryNotEmpty":
		if !fi.IsDir() {
			return False, fmt.Sprintf("%s is not a directory in the image", p)
		}
		ents, err := e.fsys.ReadDir(name)
		if err != nil {
			return e.pathErr(p, err)
		}
		for _, ent := range ents {
			if !unit.HiddenOrBackup(ent.Name()) {
				return True, fmt.Sprintf("%s holds %s in the image", p, ent.Name())
			}
		}
		return False, fmt.Sprintf("%s is empty in the image", p)
	}
	return Unknown, "not decided"
}

func inImage(p string, ok bool, what string) string {
	if ok {
		return fmt.Sprintf("%s is %s in the image", p, what)
	}
	return fmt.Sprintf("%s is not %s in the image", p, what)
}

// pathErr is the verdict of a path the image does not hold.
func (e *Env) pathErr(p string, err error) (Verdict, string) {
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, rootfs.ErrNotDir) {
		return False, fmt.Sprintf("%s does not exist in the image", p)
	}
	if errors.Is(err, rootfs.ErrTooManyLinks) {
		return False, fmt.Sprintf("%s is a link loop in the image", p)
	}
	return Unknown, fmt.Sprintf("%s cannot be read in the image: %v", p, err)
}

// testGlob is glob_exists over the image: a shell pattern per component.
func (e *Env) testGlob(p string) (Verdict, string) {
	if strings.ContainsAny(p, "{}") {
		return Unknown, "brace patterns are not decided"
	}
	parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
	found, err := e.glob(".", parts, 0)
	if err != nil {
		return Unknown, err.Error()
	}
	if found != "" {
		return True, fmt.Sprintf("%s matches %s in the image", found, p)
	}
	return False, fmt.Sprintf("nothing matches %s in the image", p)
}

// maxGlob bounds how many directories a glob lists.
const maxGlob = 4096

func (e *Env) glob(dir string, parts []string, listed int) (string, error) {
	if len(parts) == 0 {
		return "/" + strings.TrimPrefix(dir, "./"), nil
	}
	join := func(n string) string {
		if dir == "." {
			return n
		}
		return dir + "/" + n
	}
	pat := parts[0]
	if !strings.ContainsAny(pat, "*?[") {
		next := join(pat)
		if len(parts) > 1 {
			if fi, err := e.fsys.Stat(next); err != nil || !fi.IsDir() {
				return "", nil
			}
		} else if _, err := e.fsys.Stat(next); err != nil && !errors.Is(err, rootfs.ErrMasked) {
			return "", nil
		}
		return e.glob(next, parts[1:], listed)
	}
	if listed++; listed > maxGlob {
		return "", fmt.Errorf("the pattern lists too many directories to decide")
	}
	ents, err := e.fsys.ReadDir(dir)
	if err != nil {
		return "", nil
	}
	for _, ent := range ents {
		if ok, err := path.Match(pat, ent.Name()); err != nil || !ok || strings.HasPrefix(ent.Name(), ".") && !strings.HasPrefix(pat, ".") {
			continue
		}
		next := join(ent.Name())
		if len(parts) > 1 {
			if fi, err := e.fsys.Stat(next); err != nil || !fi.IsDir() {
				continue
			}
		}
		if found, err := e.glob(next, parts[1:], listed); err != nil || found != "" {
			return found, err
		}
	}
	return "", nil
}

// testNeedsUpdate is condition_test_needs_update: /usr changed after the
// directory's .updated stamp was written (no stamp: an update is needed).
func (e *Env) testNeedsUpdate(p string) (Verdict, string) {
	if p != "/etc" && p != "/var" {
		return False, fmt.Sprintf("%s is neither /etc nor /var", p)
	}
	stamp := rootfs.Clean(p + "/.updated")
	fi, err := e.fsys.Stat(stamp)
	if err != nil {
		if absent(err) {
			return True, fmt.Sprintf("the image has no %s/.updated", p)
		}
		return Unknown, err.Error()
	}
	usr, err := e.fsys.Stat("usr")
	if err != nil {
		return Unknown, "the image's /usr cannot be read"
	}
	return verdictOf(usr.ModTime().After(fi.ModTime())),
		fmt.Sprintf("/usr was modified %s, %s/.updated %s", usr.ModTime().UTC().Format("2006-01-02 15:04:05"), p, fi.ModTime().UTC().Format("2006-01-02 15:04:05"))
}

// firstBoot is in_first_boot: the systemd.condition-first-boot= kernel
// argument, else the machine-id.
func (e *Env) firstBoot() (Verdict, string) {
	if v, ok := e.assume.get("firstboot"); ok {
		b, valid := parseBool(v)
		if !valid {
			return Unknown, fmt.Sprintf("--assume first-boot=%s is not a boolean", v)
		}
		return verdictOf(b), "assumed (--assume first-boot)"
	}
	if v, src, found := e.cmdLineArg("systemd.condition-first-boot"); found != Unknown {
		if found == True {
			b, valid := parseBool(v)
			if valid {
				return verdictOf(b), "systemd.condition-first-boot=" + v + " on the kernel command line (" + src + ")"
			}
		}
	}
	if e.Host.FirstBoot {
		return True, "/etc/machine-id is missing, unreadable or \"uninitialized\": the next boot is a first boot"
	}
	return False, "/etc/machine-id is set: the next boot is not a first boot"
}

// fnmatch is fnmatch(3) without flags: "*" and "?" match "/" too.
func fnmatch(pattern, s string) bool {
	hide := strings.NewReplacer("/", "\x00")
	m, err := path.Match(hide.Replace(pattern), hide.Replace(s))
	return err == nil && m
}

// testOSRelease is condition_test_os_release: space-separated KEY OP VALUE
// expressions over os-release, all of which must hold; OP is =, !=, <,
// <=, >, >= (versions compared as systemd's strverscmp_improved), $= and
// !$= (shell patterns).
func (e *Env) testOSRelease(v string) (Verdict, string) {
	if len(e.Host.OSRelease) == 0 {
		return Unknown, "the image has no os-release"
	}
	for _, expr := range strings.Fields(v) {
		key, op, want, ok := splitOp(expr)
		if !ok {
			return False, fmt.Sprintf("%q is not KEY=VALUE, which systemd takes as failed", expr)
		}
		have := e.Host.OSRelease[key]
		if !compare(have, op, want) {
			return False, fmt.Sprintf("os-release has %s=%q", key, have)
		}
	}
	return True, "the image's os-release matches"
}

// ops are the comparison operators of systemd's conditions, longest first.
var ops = []string{"!$=", "$=", "<=", ">=", "!=", "=", "<", ">"}

func splitOp(expr string) (key, op, value string, ok bool) {
	for i := 0; i < len(expr); i++ {
		for _, o := range ops {
			if strings.HasPrefix(expr[i:], o) {
				return expr[:i], o, expr[i+len(o):], i > 0
			}
		}
	}
	return "", "", "", false
}

func compare(have, op, want string) bool {
	switch op {
	case "$=", "!$=":
		return fnmatch(want, have) == (op == "$=")
	case "=":
		return have == want
	case "!=":
		return have != want
	}
	c := verCmp(have, want)
	switch op {
	case "<":
		return c < 0
	case "<=":
		return c <= 0
	case ">":
		return c > 0
	case ">=":
		return c >= 0
	}
	return false
}

// verCmp compares versions as strverscmp_improved does for the common
// cases: runs of digits numerically, everything else byte by byte, a "~"
// sorting before anything.
func verCmp(a, b string) int {
	for a != "" || b != "" {
		if a == "" {
			if strings.HasPrefix(b, "~") {
				return 1
			}
			return -1
		}
		if b == "" {
			if strings.HasPrefix(a, "~") {
				return -1
			}
			return 1
		}
		if isDigit(a[0]) && isDigit(b[0]) {
			i, j := digits(a), digits(b)
			na, nb := strings.TrimLeft(a[:i], "0"), strings.TrimLeft(b[:j], "0")
			if len(na) != len(nb) {
				return cmp.Compare(len(na), len(nb))
			}
			if c := strings.Compare(na, nb); c != 0 {
				return c
			}
			a, b = a[i:], b[j:]
			continue
		}
		if a[0] != b[0] {
			switch {
			case a[0] == '~':
				return -1
			case b[0] == '~':
				return 1
			}
			return cmp.Compare(int(a[0]), int(b[0]))
		}
		a, b = a[1:], b[1:]
	}
	return 0
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func digits(s string) int {
	i := 0
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	return i
}

// kernels are the kernel releases the machine may boot, and where that
// is read: the assumed one (--assume kernel-version), else every kernel
// the image installs (the machine boots one of them). None when the image
// installs no kernel: a container runs its host's.
func (e *Env) kernels() ([]string, string) {
	if a, ok := e.assume.get("kernelversion"); ok {
		return []string{a}, "assumed (--assume kernel-version)"
	}
	switch len(e.Host.Kernels) {
	case 0:
		return nil, "the image installs no kernel (a container runs its host's); --assume kernel-version=VERSION decides it"
	case 1:
		return e.Host.Kernels, "the image installs kernel " + e.Host.Kernels[0]
	}
	return e.Host.Kernels, fmt.Sprintf("the image installs %d kernels (%s)", len(e.Host.Kernels), strings.Join(e.Host.Kernels, ", "))
}

// testKernelVersion is condition_test_kernel_version over the kernel the
// image boots: the assumed one, or each kernel the image installs, the
// check decided when they all agree. Every space-separated expression
// must hold; one without an operator is a shell pattern.
func (e *Env) testKernelVersion(v string) (Verdict, string) {
	ks, src := e.kernels()
	if len(ks) == 0 {
		return Unknown, src
	}
	var got []Verdict
	for _, k := range ks {
		got = append(got, kernelVersionHolds(k, v))
	}
	if r, ok := agree(got); ok {
		return r, src
	}
	return Unknown, src + ": " + perKernel(ks, got)
}

// kernelVersionHolds decides ConditionKernelVersion=v for kernel.
func kernelVersionHolds(kernel, v string) Verdict {
	for _, expr := range strings.Fields(v) {
		op, want := "", expr
		for _, o := range []string{"<=", ">=", "!=", "=", "<", ">"} {
			if w, ok := strings.CutPrefix(expr, o); ok {
				op, want = o, w
				break
			}
		}
		var ok bool
		if op == "" {
			ok = fnmatch(want, kernel)
		} else {
			ok = compare(kernel, op, want)
		}
		if !ok {
			return False
		}
	}
	return True
}

// agree is the one verdict all of vs are, ok false when they differ (or
// there are none).
func agree(vs []Verdict) (Verdict, bool) {
	if len(vs) == 0 {
		return Unknown, false
	}
	for _, v := range vs[1:] {
		if v != vs[0] {
			return Unknown, false
		}
	}
	return vs[0], true
}

// perKernel lists each kernel's verdict, for a reason.
func perKernel(ks []string, vs []Verdict) string {
	parts := make([]string, len(ks))
	for i, k := range ks {
		parts[i] = k + " " + string(vs[i])
	}
	return strings.Join(parts, ", ")
}

// testAssumed decides the host checks from --assume, else leaves them
// unknown.
func (e *Env) testAssumed(kind, v string) (Verdict, string) {
	key := normKey(kind)
	have, ok := e.assume.get(key)
	flag := "--assume " + assumeName(kind)
	if !ok && kind == "Capability" {
		// Outside a container PID 1 holds every capability.
		if virt, known := e.assume.get("virtualization"); known && !slices.Contains(containers, strings.ToLower(virt)) && virt != "private-users" {
			return True, "assumed not a container (--assume virtualization=" + virt + "): PID 1 holds every capability"
		}
	}
	if !ok {
		return Unknown, fmt.Sprintf("depends on the machine that boots the image (%s=VALUE decides it)", flag)
	}
	src := "assumed (" + flag + "=" + have + ")"
	switch kind {
	case "Virtualization":
		return testVirtualization(v, have), src
	case "Memory":
		return testSize(v, have, parseBytes, src)
	case "CPUs":
		return testSize(v, have, func(s string) (float64, bool) {
			n, err := strconv.Atoi(s)
			return float64(n), err == nil
		}, src)
	case "ACPower":
		want, ok1 := parseBool(v)
		h, ok2 := parseBool(have)
		if !ok1 || !ok2 {
			return False, src + "; not a boolean"
		}
		return verdictOf(want == h), src
	case "Host":
		return verdictOf(fnmatch(v, have) || strings.EqualFold(v, have)), src
	}
	// Sets: the check holds when its value is one of the assumed ones.
	for _, h := range strings.Split(have, ",") {
		if strings.TrimSpace(h) == v {
			return True, src
		}
	}
	return False, src
}

// testSize compares a [OP]VALUE check with an assumed value.
func testSize(v, have string, parse func(string) (float64, bool), src string) (Verdict, string) {
	op, want := ">=", v
	for _, o := range []string{"<=", ">=", "!=", "=", "<", ">"} {
		if w, ok := strings.CutPrefix(v, o); ok {
			op, want = o, w
			break
		}
	}
	a, ok1 := parse(strings.TrimSpace(have))
	b, ok2 := parse(strings.TrimSpace(want))
	if !ok1 || !ok2 {
		return Unknown, src + "; the values do not parse"
	}
	r := false
	switch op {
	case "<":
		r = a < b
	case "<=":
		r = a <= b
	case "=":
		r = a == b
	case "!=":
		r = a != b
	case ">":
		r = a > b
	default:
		r = a >= b
	}
	return verdictOf(r), src
}

// parseBytes is parse_size with base 1024: "512M", "4G", "1.5T".
func parseBytes(s string) (float64, bool) {
	mult := 1.0
	units := map[byte]float64{'K': 1 << 10, 'M': 1 << 20, 'G': 1 << 30, 'T': 1 << 40, 'P': 1 << 50, 'E': 1 << 60}
	s = strings.TrimSuffix(strings.TrimSpace(s), "B")
	if s != "" {
		if m, ok := units[s[len(s)-1]]; ok {
			mult, s = m, s[:len(s)-1]
		}
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	return f * mult, err == nil && f >= 0
}

// VM and container identifiers of detect_virtualization.
var (
	vms        = []string{"qemu", "kvm", "amazon", "zvm", "vmware", "microsoft", "oracle", "powervm", "xen", "bochs", "uml", "parallels", "bhyve", "qnx", "acrn", "apple", "sre", "google", "vm-other"}
	containers = []string{"systemd-nspawn", "lxc-libvirt", "lxc", "openvz", "docker", "podman", "rkt", "wsl", "proot", "pouch", "container-other"}
)

// testVirtualization is condition_test_virtualization with the assumed
// detection result (an id, or "none").
func testVirtualization(v, have string) Verdict {
	have = strings.ToLower(strings.TrimSpace(have))
	none := have == "none" || have == "no" || have == "false"
	if b, ok := parseBool(v); ok {
		return verdictOf(b == !none)
	}
	switch v {
	case "vm":
		return verdictOf(slices.Contains(vms, have))
	case "container":
		return verdictOf(slices.Contains(containers, have))
	case "private-users":
		return verdictOf(have == "private-users")
	}
	return verdictOf(!none && v == have)
}

// parseBool is parse_boolean of a value with its surrounding blanks
// removed.
func parseBool(v string) (bool, bool) { return unit.ParseBoolean(strings.TrimSpace(v)) }
