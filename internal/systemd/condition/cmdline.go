package condition

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"

	"slices"
	"strings"

	"github.com/amilint/amilint/internal/image/fs/tarfs"
	"github.com/amilint/amilint/internal/image/rootfs"
)

// maxConfigFile bounds what is read of one boot loader configuration file.
const maxConfigFile = 1 << 20

// errNotKept reports a file whose metadata the image reader has but not
// its content (a tarball read once from a stream keeps configuration
// only): what depends on it cannot be decided.
var errNotKept = errors.New("not kept")

// readSmall reads an image file of at most maxConfigFile bytes; ok is
// false when it is missing, not a file, or larger. A file whose content
// the reader did not keep is errNotKept.
func readSmall(fsys *rootfs.FS, name string) ([]byte, bool, error) {
	fi, err := fsys.Stat(name)
	if err != nil {
		if absent(err) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("stat /%s: %w", name, err)
	}
	if !fi.Mode().IsRegular() || fi.Size() > maxConfigFile {
		return nil, false, nil
	}
	b, err := fsys.ReadFile(name)
	if err != nil {
		switch {
		case absent(err):
			return nil, false, nil
		case errors.Is(err, tarfs.ErrNotKept):
			return nil, false, fmt.Errorf("read /%s: %w", name, errNotKept)
		}
		return nil, false, fmt.Errorf("read /%s: %w", name, err)
	}
	return b, true, nil
}

// readCmdLines finds the kernel command lines an image's boot loader
// passes: /etc/kernel/cmdline (kernel-install, unified kernel images),
// Boot Loader Specification entries (their options, $variables from
// grubenv expanded), the first linux line of GRUB's grub.cfg (the default
// entry), else what grub-mkconfig would write from /etc/default/grub and
// its grub.d drop-ins. Each is a candidate: a check the candidates
// disagree on is unknown.
func readCmdLines(fsys *rootfs.FS) ([]CmdLine, error) {
	out := []CmdLine{}
	add := func(v, src string) {
		v = strings.Join(splitWords(v), " ")
		out = append(out, CmdLine{Value: v, Source: src})
	}
	if b, ok, err := readSmall(fsys, "etc/kernel/cmdline"); err != nil {
		return nil, err
	} else if ok {
		add(strings.ReplaceAll(string(b), "\n", " "), "/etc/kernel/cmdline")
	}
	env := map[string]string{}
	for _, p := range []string{"boot/grub2/grubenv", "boot/grub/grubenv", "boot/efi/EFI/fedora/grubenv"} {
		b, ok, err := readSmall(fsys, p)
		if err != nil {
			return nil, err
		}
		if ok {
			for _, l := range strings.Split(string(b), "\n") {
				if k, v, found := strings.Cut(l, "="); found && !strings.HasPrefix(l, "#") {
					env[k] = v
				}
			}
		}
	}
	for _, dir := range []string{"boot/loader/entries", "efi/loader/entries", "boot/efi/loader/entries"} {
		ents, err := fsys.ReadDir(dir)
		if err != nil {
			if absent(err) {
				continue
			}
			return nil, fmt.Errorf("read /%s: %w", dir, err)
		}
		for _, e := range ents {
			if !strings.HasSuffix(e.Name(), ".conf") {
				continue
			}
			p := dir + "/" + e.Name()
			b, ok, err := readSmall(fsys, p)
			if err != nil {
				return nil, err
			}
			if !ok {
				continue
			}
			var opts []string
			for _, l := range strings.Split(string(b), "\n") {
				if rest, found := strings.CutPrefix(strings.TrimSpace(l), "options"); found && (rest == "" || rest[0] == ' ' || rest[0] == '\t') {
					opts = append(opts, expandVars(rest, env))
				}
			}
			if len(opts) > 0 {
				add(strings.Join(opts, " "), "/"+p)
			}
		}
	}
	grubCfg := false
	for _, p := range []string{"boot/grub/grub.cfg", "boot/grub2/grub.cfg"} {
		b, ok, err := readSmall(fsys, p)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		if v, found := grubLinuxLine(b); found {
			add(v, "/"+p)
			grubCfg = true
			break
		}
	}
	if !grubCfg && len(out) == 0 {
		v, src, err := defaultGrub(fsys)
		if err != nil {
			return nil, err
		}
		if src != "" {
			add(v, src)
		}
	}
	return out, nil
}

// grubLinuxLine returns the arguments of the first linux command of a
// grub.cfg (the default entry as grub-mkconfig orders them), with the
// variables the file sets expanded.
func grubLinuxLine(b []byte) (string, bool) {
	vars := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), maxConfigFile)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if rest, ok := strings.CutPrefix(l, "set "); ok {
			if k, v, found := strings.Cut(rest, "="); found {
				vars[strings.TrimSpace(k)] = unquote(strings.TrimSpace(v))
			}
			continue
		}
		f := strings.Fields(l)
		if len(f) >= 2 && (f[0] == "linux" || f[0] == "linuxefi" || f[0] == "linux16") {
			return expandVars(strings.Join(f[2:], " "), vars), true
		}
	}
	return "", false
}

// defaultGrub is what grub-mkconfig puts on the command line from
// /etc/default/grub and /etc/default/grub.d/*.cfg: ro,
// GRUB_CMDLINE_LINUX, GRUB_CMDLINE_LINUX_DEFAULT (the root= it adds from
// the running system is not known).
func defaultGrub(fsys *rootfs.FS) (string, string, error) {
	vars := map[string]string{}
	var srcs []string
	files := []string{"etc/default/grub"}
	if ents, err := fsys.ReadDir("etc/default/grub.d"); err == nil {
		for _, e := range ents {
			if strings.HasSuffix(e.Name(), ".cfg") {
				files = append(files, "etc/default/grub.d/"+e.Name())
			}
		}
	} else if !absent(err) {
		return "", "", fmt.Errorf("read /etc/default/grub.d: %w", err)
	}
	for _, p := range files {
		b, ok, err := readSmall(fsys, p)
		if err != nil {
			return "", "", err
		}
		if !ok {
			continue
		}
		srcs = append(srcs, "/"+p)
		for _, l := range strings.Split(string(b), "\n") {
			l = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "export "))
			k, v, found := strings.Cut(l, "=")
			if !found || strings.HasPrefix(l, "#") || strings.ContainsAny(k, " \t$") {
				continue
			}
			vars[k] = expandVars(unquote(v), vars)
		}
	}
	if len(srcs) == 0 {
		return "", "", nil
	}
	_, linux := vars["GRUB_CMDLINE_LINUX"]
	_, def := vars["GRUB_CMDLINE_LINUX_DEFAULT"]
	if !linux && !def {
		return "", "", nil
	}
	return "ro " + vars["GRUB_CMDLINE_LINUX"] + " " + vars["GRUB_CMDLINE_LINUX_DEFAULT"], strings.Join(srcs, ", "), nil
}

// unquote removes one level of shell quotes around a value.
func unquote(v string) string {
	if len(v) >= 2 && (v[0] == '"' && v[len(v)-1] == '"' || v[0] == '\'' && v[len(v)-1] == '\'') {
		return v[1 : len(v)-1]
	}
	return v
}

// expandVars replaces $NAME and ${NAME} by vars' values; unknown ones
// expand to nothing, as in the shell and GRUB.
func expandVars(s string, vars map[string]string) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		j := i + 1
		var name string
		if s[j] == '{' {
			k := strings.IndexByte(s[j:], '}')
			if k < 0 {
				b.WriteByte(s[i])
				continue
			}
			name, i = s[j+1:j+k], j+k
		} else {
			k := j
			for k < len(s) && (s[k] == '_' || s[k] >= 'a' && s[k] <= 'z' || s[k] >= 'A' && s[k] <= 'Z' || s[k] >= '0' && s[k] <= '9') {
				k++
			}
			if k == j {
				b.WriteByte(s[i])
				continue
			}
			name, i = s[j:k], k-1
		}
		b.WriteString(vars[name])
	}
	return b.String()
}

// splitWords splits a command line into words as the kernel and
// proc_cmdline do: on whitespace, double quotes grouping.
func splitWords(s string) []string {
	var out []string
	var w strings.Builder
	inWord, quoted := false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"':
			quoted, inWord = !quoted, true
		case !quoted && (c == ' ' || c == '\t' || c == '\n' || c == '\r'):
			if inWord {
				out = append(out, w.String())
				w.Reset()
				inWord = false
			}
		default:
			w.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		out = append(out, w.String())
	}
	return out
}

// cmdLines are the candidates a check is decided on: the assumed command
// line, or the image's.
func (e *Env) cmdLines() []CmdLine {
	if v, ok := e.assume.get("kernelcommandline"); ok {
		return []CmdLine{{Value: v, Source: "assumed (--assume kernel-command-line)"}}
	}
	return e.Host.CmdLines
}

// hasArg is condition_test_kernel_command_line on one command line: with
// a "=", a word equal to it; without, a word that is it or starts with it
// and a "=".
func hasArg(cmdline, want string) bool {
	for _, w := range splitWords(cmdline) {
		if strings.Contains(want, "=") {
			if w == want {
				return true
			}
		} else if w == want || strings.HasPrefix(w, want+"=") {
			return true
		}
	}
	return false
}

func (e *Env) testCmdLine(want string) (Verdict, string) {
	cands := e.cmdLines()
	if len(cands) == 0 && e.Host.CmdLinesUnread != "" {
		return Unknown, "the boot loader configuration could not be read: " + e.Host.CmdLinesUnread + "; --assume kernel-command-line=... decides it"
	}
	if len(cands) == 0 {
		return Unknown, "the image has no boot loader configuration (GRUB, BLS entries, /etc/kernel/cmdline); --assume kernel-command-line=... decides it"
	}
	var yes, no []string
	for _, c := range cands {
		if hasArg(c.Value, want) {
			yes = append(yes, c.Source)
		} else {
			no = append(no, c.Source)
		}
	}
	switch {
	case len(no) == 0:
		return True, fmt.Sprintf("%s is on the kernel command line (%s)", want, strings.Join(yes, ", "))
	case len(yes) == 0:
		return False, fmt.Sprintf("%s is not on the kernel command line the image boots with (%s)", want, strings.Join(no, ", "))
	}
	return Unknown, fmt.Sprintf("the image's boot entries disagree: %s has %s, %s has not", strings.Join(yes, ", "), want, strings.Join(no, ", "))
}

func dashes(k string) string { return strings.ReplaceAll(k, "_", "-") }

// cmdLineArg returns the value of key=value on the kernel command line:
// found is True when every candidate has it (with one value), False when
// none does, Unknown otherwise.
func (e *Env) cmdLineArg(key string) (value, source string, found Verdict) {
	cands := e.cmdLines()
	if len(cands) == 0 && e.Host.CmdLinesUnread != "" {
		return "", "", Unknown
	}
	if len(cands) == 0 {
		return "", "", Unknown
	}
	var vals []string
	for _, c := range cands {
		v, ok := "", false
		for _, w := range splitWords(c.Value) {
			// proc_cmdline_key_streq: "-" and "_" are the same in keys.
			k, rest, has := strings.Cut(w, "=")
			if dashes(k) == dashes(key) {
				v, ok = rest, true
				if !has {
					v = ""
				}
			}
		}
		if ok {
			vals = append(vals, v)
		}
	}
	switch {
	case len(vals) == 0:
		return "", "", False
	case len(vals) == len(cands):
		distinct := slices.Clone(vals)
		slices.Sort(distinct)
		if len(slices.Compact(distinct)) == 1 {
			return vals[0], cands[0].Source, True
		}
	}
	return "", "", Unknown
}

// BootCmdLine is the kernel command line the image's boot loader passes,
// for the boot model's generators: the value every candidate
// (readCmdLines) agrees on; "" (an empty command line, the default) when
// the image has no boot loader configuration, its candidates disagree or
// they cannot be read.
func BootCmdLine(fsys *rootfs.FS) string {
	cls, err := readCmdLines(fsys)
	if err != nil || len(cls) == 0 {
		return ""
	}
	for _, c := range cls[1:] {
		if c.Value != cls[0].Value {
			return ""
		}
	}
	return cls[0].Value
}
