package boot

import (
	"errors"
	"io/fs"
	"path"
	"sort"
	"strings"

	"github.com/amilint/amilint/internal/image/rootfs"
)

// Package generators: systemd runs every executable in the generator
// directories before it loads a unit, and some packages ship one whose
// output is a function of the image's files alone. The model runs its own
// port of those, each only when the image has its executable (see
// generatorPath), and writes what the generator would into the /run the
// loader reads (genOut). systemd-fstab-generator (fstabgen.go) and
// systemd-ssh-generator (sshgen.go) are run the same way: their output is
// a function of the image (its /etc/fstab, its sshd) and the kernel
// command line its boot loader passes, for a boot on a virtual machine or
// bare metal, and so are systemd-debug-generator and
// systemd-run-generator (cmdgen.go), which write what the command line
// asks for, systemd-getty-generator (gettygen.go), for the consoles
// the command line names and the assumed virtualization's, and
// cloud-init-generator (cloudinitgen.go), whose output is a function of
// the image, the kernel command line and the cloud the machine offers,
// which the model assumes (Machine). Generators whose output depends on
// the running machine alone (gpt-auto, ...) are not run.

// pkgGenerator is one ported generator: its executable's name and its run.
type pkgGenerator struct {
	name string
	run  func(genRun) // writes into the run's tree
}

// pkgGenerators are the ported generators, systemd's own of sdgen.go
// included. Each writes only into the normal directory (argv[1]) but
// systemd-system-update-generator, systemd-debug-generator and
// cloud-init-generator, which write into the early one, and
// systemd-fstab-generator's tmpfs on /var (systemd.volatile=state), which
// goes into the late one (argv[3]).
var pkgGenerators = []pkgGenerator{
	{fstabGeneratorName, genFstab},
	{sshGeneratorName, genSSH},
	{"postgresql-generator", genPostgresql},
	{"openvpn-generator", genOpenvpn},
	{"postfix-instance-generator", genPostfix},
	{"rpc-pipefs-generator", genRPCPipefs},
	{"systemd-rc-local-generator", genRCLocal},
	{"systemd-system-update-generator", genSystemUpdate},
	{debugGeneratorName, genDebug},
	{runGeneratorName, genRunCmd},
	{gettyGeneratorName, genGetty},
	{cloudInitGeneratorName, genCloudInit},
}

// genRun is one generator's run: the image as generators see it at boot
// (an empty /run), the tree it writes and its executable's image path.
type genRun struct {
	fsys    *rootfs.FS
	out     *genOut
	exe     string
	version int
	// cmdline is the kernel command line of the boot.
	cmdline string
	// machine is what the model assumes of the machine.
	machine Machine
}

// runGenerators runs the ported generators the image ships over fsys (the
// image at boot, /run empty) for a boot with the kernel command line
// cmdline on a machine of virtualization virt and returns the tmpfs they leave at /run: empty when none ran,
// else with the generator directories PID 1 creates and what the
// generators wrote.
func runGenerators(fsys *rootfs.FS, version int, cmdline string, m Machine) *genOut {
	t := newGenOut()
	ran := false
	for _, pg := range pkgGenerators {
		exe := generatorPath(fsys, pg.name)
		if exe == "" {
			continue
		}
		if !ran {
			ran = true
			for _, d := range []string{genDirNormal, genDirEarly, genDirLate} {
				t.mkdirAll(d)
			}
		}
		pg.run(genRun{fsys: fsys, out: t, exe: exe, version: version, cmdline: cmdline, machine: m})
	}
	return t
}

// generatorPath returns the image path of the generator name that
// systemd would run, "" if none: execute_directories lists the generator
// directories with conf_files_list_strv(CONF_FILES_EXECUTABLE|
// CONF_FILES_REGULAR|CONF_FILES_FILTER_MASKED), whose files_add takes, by
// name, the first entry that stat(2)s (links followed) as an executable
// regular file; an entry that is /dev/null, a character device or an
// empty file masks the name in every later directory, and an entry that
// does not stat (a dangling link), is no regular file or has no execute
// bit is skipped, leaving the name to the next directory.
func generatorPath(fsys *rootfs.FS, name string) string {
	for _, d := range generatorDirs {
		p := d + "/" + name
		if _, err := fsys.Lstat(p); err != nil {
			continue
		}
		fi, err := fsys.Stat(p)
		switch {
		case errors.Is(err, rootfs.ErrMasked):
			return ""
		case err != nil:
			continue
		case fi.Mode()&fs.ModeCharDevice != 0, fi.Mode().IsRegular() && fi.Size() == 0:
			return ""
		case !fi.Mode().IsRegular(), fi.Mode().Perm()&0o111 == 0:
			continue
		}
		return "/" + p
	}
	return ""
}

// exists is test -e: stat(2) succeeds (a link to /dev/null exists).
func exists(fsys *rootfs.FS, p string) bool {
	_, err := fsys.Stat(p)
	return err == nil || errors.Is(err, rootfs.ErrMasked)
}

// isBlank is the C locale's isspace.
func isBlank(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
}

// ifsFields splits s as the shell splits an unquoted expansion with the
// default IFS (space, tab, newline).
func ifsFields(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ' ' || r == '\t' || r == '\n' })
}

// hasGlob reports a word the shell would expand as a pattern.
func hasGlob(w string) bool { return strings.ContainsAny(w, "*?[") }

// genPostgresql ports postgresql-common's postgresql-generator: every
// cluster /etc/postgresql/VERSION/CLUSTER with a postgresql.conf (a
// dangling link counts), whose start.conf is missing or says "auto", and
// whose version's /usr/lib/postgresql/VERSION/bin/postgres is executable,
// gets a postgresql.service.wants/postgresql@VERSION-CLUSTER.service link.
// The script runs under set -e: a start.conf it cannot read, or a second
// cluster giving the same link name, ends it there.
func genPostgresql(r genRun) {
	want := genDirNormal + "/postgresql.service.wants"
	r.out.mkdirAll(want)
	for _, conf := range globClusters(r.fsys) {
		dir := path.Dir(conf)
		start := "auto"
		if exists(r.fsys, dir+"/start.conf") {
			data, err := r.fsys.ReadFile(dir + "/start.conf")
			switch {
			case errors.Is(err, rootfs.ErrMasked):
				start = ""
			case err != nil:
				return // sed fails, and set -e ends the script
			default:
				start = startConf(data)
			}
		}
		if start != "auto" {
			continue
		}
		version := path.Base(path.Dir(dir))
		fi, err := r.fsys.Stat("usr/lib/postgresql/" + version + "/bin/postgres")
		if err != nil || !fi.IsDir() && fi.Mode().Perm()&0o111 == 0 {
			continue // the version's package was removed
		}
		name := "postgresql@" + version + "-" + path.Base(dir) + ".service"
		if !r.out.symlink("/lib/systemd/system/postgresql@.service", want, name, r.exe) {
			return // ln -s fails, and set -e ends the script
		}
	}
}

// globClusters expands /etc/postgresql/*/*/postgresql.conf as dash does:
// "*" matches no name starting with ".", the middle components must open
// as directories, the last is kept when lstat(2) finds it; the matches are
// sorted as strings.
func globClusters(fsys *rootfs.FS) []string {
	var out []string
	vers, _ := fsys.ReadDir("etc/postgresql")
	for _, v := range vers {
		if strings.HasPrefix(v.Name(), ".") {
			continue
		}
		cls, _ := fsys.ReadDir("etc/postgresql/" + v.Name())
		for _, c := range cls {
			if strings.HasPrefix(c.Name(), ".") {
				continue
			}
			p := "etc/postgresql/" + v.Name() + "/" + c.Name() + "/postgresql.conf"
			if _, err := fsys.Lstat(p); err == nil {
				out = append(out, p)
			}
		}
	}
	sort.Strings(out)
	return out
}

// startConf is what postgresql-generator's
//
//	start=$(sed 's/#.*$//; /^[[:space:]]*$/d; s/^\s*//; s/\s*$//' start.conf)
//
// leaves (C locale): each line without its comment and surrounding
// spaces, blank lines dropped, joined by newlines; dash's command
// substitution then drops NUL bytes and the trailing newlines.
func startConf(data []byte) string {
	var kept []string
	lines := strings.Split(string(data), "\n")
	if len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1] // the final newline ends the last line
	}
	for _, l := range lines {
		if i := strings.IndexByte(l, '#'); i >= 0 {
			l = l[:i]
		}
		l = strings.TrimFunc(l, func(r rune) bool { return r < 0x80 && isBlank(byte(r)) })
		if l != "" {
			kept = append(kept, l)
		}
	}
	return strings.TrimRight(strings.ReplaceAll(strings.Join(kept, "\n"), "\x00", ""), "\n")
}

// genOpenvpn ports openvpn's openvpn-generator: it sources
// /etc/default/openvpn for AUTOSTART (default "all"); "none" starts no
// tunnel, "all" or "" starts one per *.conf in /etc/openvpn (the names
// `ls` prints), and a list starts each named tunnel whose NAME.conf
// exists, each as an openvpn.service.wants/openvpn@NAME.service link.
//
// Not modelled: the file is not run as a shell script. Only its simple
// AUTOSTART= assignments are read (see shellAssignment), wherever they
// are (inside an if as well); a value built from expansions, a
// multi-line quoted one or a script that fails is not seen. List words
// with pattern characters (which the shell would expand against /), and
// *.conf names that are directories (which ls would list), are skipped.
func genOpenvpn(r genRun) {
	want := genDirNormal + "/openvpn.service.wants"
	r.out.mkdirAll(want)
	autostart := "all"
	if exists(r.fsys, "etc/default/openvpn") {
		if data, err := r.fsys.ReadFile("etc/default/openvpn"); err == nil {
			if v, ok := shellAssignment(data, "AUTOSTART"); ok {
				autostart = v
			}
		}
	}
	const svc = "/lib/systemd/system/openvpn@.service"
	link := func(name string) bool { return r.out.symlink(svc, want, "openvpn@"+name+".service", r.exe) }
	switch autostart {
	case "none":
		return
	case "all", "":
		// cd /etc/openvpn; ls *.conf — in / (the generator's working
		// directory) when the cd fails.
		dir := "etc/openvpn"
		if fi, err := r.fsys.Stat(dir); err != nil || !fi.IsDir() {
			dir = "."
		}
		ents, _ := r.fsys.ReadDir(dir)
		var names []string
		for _, e := range ents {
			n := e.Name()
			if strings.HasPrefix(n, ".") || !strings.HasSuffix(n, ".conf") {
				continue
			}
			if fi, err := r.fsys.Stat(path.Join(dir, n)); err == nil && fi.IsDir() {
				continue
			}
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			for _, w := range ifsFields(n) {
				if !link(strings.TrimSuffix(w, ".conf")) {
					return
				}
			}
		}
	default:
		for _, w := range ifsFields(autostart) {
			if hasGlob(w) || !exists(r.fsys, rootfs.Clean("etc/openvpn/"+w+".conf")) {
				continue
			}
			if !link(w) {
				return
			}
		}
	}
}

// shellAssignment returns the value of the last simple assignment to name
// in a shell script a generator sources: a line "name=VALUE" (leading
// blanks allowed, optionally after "export "), VALUE a plain word without
// quoting or expansions, '…' or "…" without $, ` or \ inside, followed
// by nothing but blanks and a # comment. Other lines are ignored.
func shellAssignment(data []byte, name string) (string, bool) {
	val, found := "", false
	for l := range strings.SplitSeq(string(data), "\n") {
		l = strings.TrimLeft(l, " \t")
		l = strings.TrimPrefix(l, "export ")
		rest, ok := strings.CutPrefix(l, name+"=")
		if !ok {
			continue
		}
		var v string
		switch {
		case strings.HasPrefix(rest, "'"):
			end := strings.IndexByte(rest[1:], '\'')
			if end < 0 {
				continue
			}
			v, rest = rest[1:1+end], rest[2+end:]
		case strings.HasPrefix(rest, `"`):
			end := strings.IndexByte(rest[1:], '"')
			if end < 0 || strings.ContainsAny(rest[1:1+end], "$`\\") {
				continue
			}
			v, rest = rest[1:1+end], rest[2+end:]
		default:
			end := strings.IndexAny(rest, " \t")
			if end < 0 {
				end = len(rest)
			}
			v, rest = rest[:end], rest[end:]
			if strings.ContainsAny(v, "$`\\'\"(){}<>|&;~") {
				continue
			}
		}
		if t := strings.TrimLeft(rest, " \t"); t != "" && (t[0] != '#' || t == rest) {
			continue // more than a comment follows
		}
		val, found = v, true
	}
	return val, found
}

// genPostfix ports postfix's postfix-instance-generator (Debian 12): a
// postfix.service.wants/postfix@-.service link for the default instance,
// and one postfix@NAME.service per directory of
// `postconf -h multi_instance_directories`, NAME being that directory's
// `postconf -hc DIR multi_instance_name` (empty when unset: the link then
// names the template, which systemd ignores). postconf prints values as
// written (no $name expansion without -x): the model reads them from each
// main.cf as postconf does (postfixMainCF).
func genPostfix(r genRun) {
	want := genDirNormal + "/postfix.service.wants"
	const svc = "/lib/systemd/system/postfix@.service"
	r.out.mkdirAll(want)
	if !r.out.symlink(svc, want, "postfix@-.service", r.exe) {
		return
	}
	if !onPath(r.fsys, "postconf") {
		return // $(postconf …) fails: no instance
	}
	dirs, _ := postfixMainCF(r.fsys, "etc/postfix", "multi_instance_directories")
	for _, d := range ifsFields(dirs) {
		if hasGlob(d) {
			continue // the shell would expand it against /: not modelled
		}
		n, _ := postfixMainCF(r.fsys, d, "multi_instance_name")
		if !r.out.symlink(svc, want, "postfix@"+n+".service", r.exe) {
			return
		}
	}
}

// generatorPATH is the PATH PID 1 gives generators (DEFAULT_PATH, with
// /sbin and /bin as Debian 12's split-/usr build adds them).
var generatorPATH = []string{"usr/local/sbin", "usr/local/bin", "usr/sbin", "usr/bin", "sbin", "bin"}

// onPath reports whether the shell finds the command name on the
// generators' PATH: an executable file in one of its directories.
func onPath(fsys *rootfs.FS, name string) bool {
	for _, d := range generatorPATH {
		if fi, err := fsys.Stat(d + "/" + name); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return true
		}
	}
	return false
}

// postfixMainCF is `postconf -c DIR -h NAME` for the parameters whose
// default is empty: the value of NAME's last assignment in DIR/main.cf, as
// written. A main.cf line "name = value" starts a logical line, a line
// starting with blanks continues it, blank and # lines are skipped.
func postfixMainCF(fsys *rootfs.FS, dir, name string) (string, bool) {
	data, err := fsys.ReadFile(rootfs.Clean(dir + "/main.cf"))
	if err != nil {
		return "", false
	}
	var val, cur string
	found, in := false, false
	flush := func() {
		if in {
			val, found = cur, true
		}
		in = false
	}
	for l := range strings.SplitSeq(string(data), "\n") {
		t := strings.TrimSpace(l)
		if t == "" || t[0] == '#' {
			continue
		}
		if l[0] == ' ' || l[0] == '\t' {
			if in {
				cur += " " + t
			}
			continue
		}
		flush()
		k, v, ok := strings.Cut(l, "=")
		if ok && strings.TrimSpace(k) == name {
			cur, in = strings.TrimSpace(v), true
		}
	}
	flush()
	return val, found
}
