package boot

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/amilint/amilint/internal/systemd/unit"
)

// execSettings are the command settings of each unit type
// (config_parse_exec).
var execSettings = map[string][]string{
	"service": {"ExecCondition", "ExecStartPre", "ExecStart", "ExecStartPost", "ExecReload", "ExecStop", "ExecStopPost"},
	"socket":  {"ExecStartPre", "ExecStartPost", "ExecStopPre", "ExecStopPost"},
}

// hasExecContext reports whether units of type t have the execution
// settings (User=, WorkingDirectory=, ...).
func hasExecContext(t string) bool {
	switch t {
	case "service", "socket", "mount", "swap":
		return true
	}
	return false
}

// fatalSetting is where systemd version stops reading one unit file or
// drop-in, opts its assignments: the index of the first assignment whose
// parser fails the read (a command line, working or root directory, user
// or group, security label, PID file, ... it cannot use), the load state
// that leaves a unit whose unit file fails so (bad-setting for -ENOEXEC,
// error for any other error), and why; or len(opts) and nil. A drop-in
// that fails is only cut short there. Specifiers expand with the name the
// unit was requested by. Parsers that log and ignore a bad value are not
// modelled here: they change nothing this package computes.
func fatalSetting(opts []*unit.Option, path, t, requested string, version int) (int, LoadState, error) {
	if !hasExecContext(t) {
		return len(opts), "", nil
	}
	sec := sectionOf(t)
	for i, o := range opts {
		if o.Section != sec {
			continue
		}
		if why := badSetting(t, requested, version, o); why != "" {
			err := fmt.Errorf("%s: %s=%s: %s", path, o.Name, clip(o.Value), why)
			if failsWithError(o.Name) {
				if e := imagePolicyError(why); e != nil && o.Name != "PIDFile" {
					err = fmt.Errorf("%w (%w)", err, e)
				}
				return i, Error, fmt.Errorf("%w: %w", ErrRefusedSetting, err)
			}
			return i, BadSetting, fmt.Errorf("%w: %w", ErrBadSetting, err)
		}
	}
	return len(opts), "", nil
}

// failsWithError reports whether the parser of setting fails with an
// error other than -ENOEXEC, which leaves a unit in the load state error
// (PIDFile=, and the image policies of config_parse_image_policy).
func failsWithError(setting string) bool {
	switch setting {
	case "PIDFile", "RootImagePolicy", "MountImagePolicy", "ExtensionImagePolicy":
		return true
	}
	return false
}

// clip shortens a value for an error message.
func clip(v string) string {
	const max = 200
	if len(v) <= max {
		return v
	}
	i := max
	for i > 0 && !utf8.RuneStart(v[i]) {
		i--
	}
	return v[:i] + "…"
}

// badSetting is why the parser of o fails the load, or "".
func badSetting(t, id string, version int, o *unit.Option) string {
	v := o.Value
	for _, n := range execSettings[t] {
		if o.Name == n {
			_, why := parseCommands(id, version, v)
			return why
		}
	}
	switch o.Name {
	case "WorkingDirectory":
		// config_parse_working_directory: "~" is the user's home; "-"
		// makes any failure an ignored one.
		if v == "" || v == "~" || strings.HasPrefix(v, "-") {
			return ""
		}
		return badPath(id, version, v)
	case "RootDirectory", "RootImage", "RootVerity":
		// config_parse_unit_path_printf, fatal; config_parse_path unsets
		// the path when the value resolves to "" (%i without an
		// instance, say).
		if k, err := expand(version, id, v, unit.PathPrintfMax); err == nil && k == "" {
			return ""
		}
		return badPath(id, version, v)
	case "User", "Group", "SocketUser", "SocketGroup":
		if o.Name == "SocketUser" || o.Name == "SocketGroup" {
			if t != "socket" {
				return ""
			}
		}
		if v == "" {
			return ""
		}
		return badUser(id, version, v)
	case "SupplementaryGroups":
		// config_parse_user_group_strv_compat: words split without
		// unquoting; a bad word or a syntax error fails the load.
		for rest := v; ; {
			w, r, ok, err := unit.ExtractWord(rest, false, false)
			if err != nil {
				return "invalid syntax"
			}
			if !ok {
				return ""
			}
			if why := badUser(id, version, w); why != "" {
				return why
			}
			rest = r
		}
	case "PIDFile":
		if t == "service" {
			return badPIDFile(id, version, v)
		}
	case "DynamicUser":
		// config_parse_bool, fatal: anything but a boolean, even an
		// empty value.
		if _, ok := unit.ParseBoolean(v); !ok {
			return "not a boolean"
		}
	case "RootImagePolicy", "MountImagePolicy", "ExtensionImagePolicy":
		// config_parse_image_policy: an empty value resets the policy.
		if version < imagePolicySince || v == "" {
			return ""
		}
		return badImagePolicy(v)
	case "SELinuxContext", "AppArmorProfile", "SmackProcessLabel":
		// A leading "-" ignores a failure.
		if v == "" || strings.HasPrefix(v, "-") {
			return ""
		}
		if _, err := expand(version, id, v, unit.FullPrintfMax); err != nil {
			return "failed to resolve unit specifiers: " + err.Error()
		}
	}
	return ""
}

// badPath is why a fatal path setting fails, or "".
func badPath(id string, version int, v string) string {
	_, why := absPath(version, id, v)
	return why
}

// absPath is a path setting's value as unit_path_printf and
// path_simplify_and_warn with PATH_CHECK_ABSOLUTE read it: the expanded,
// simplified path, or why it is refused.
func absPath(version int, id, v string) (string, string) {
	k, err := expand(version, id, v, unit.PathPrintfMax)
	if err != nil {
		return "", "failed to resolve unit specifiers: " + err.Error()
	}
	return unit.SimplifyPath(version, k, true)
}

// badPIDFile is config_parse_pid_file: a value whose specifiers fail is
// ignored; a relative one lives in /run; the result must pass
// path_simplify_and_warn, which from 257 also refuses a path in /dev,
// /proc or /sys.
func badPIDFile(id string, version int, v string) string {
	if v == "" {
		return ""
	}
	k, err := expand(version, id, v, unit.PathPrintfMax)
	if err != nil {
		return ""
	}
	if !strings.HasPrefix(k, "/") {
		k = "/run/" + k
	}
	p, why := unit.SimplifyPath(version, k, true)
	if why != "" {
		return why
	}
	if version >= 257 && belowAPIVFS(p) {
		return "path is below API VFS"
	}
	return ""
}

// belowAPIVFS is path_below_api_vfs: /dev, /proc, /sys or below.
func belowAPIVFS(p string) bool {
	for _, d := range []string{"/dev", "/proc", "/sys"} {
		if p == d || strings.HasPrefix(p, d+"/") {
			return true
		}
	}
	return false
}

// logNamespace is the LogNamespace= of u's section sec, as
// config_parse_log_namespace reads it (an empty value resets it, an
// invalid one is ignored), and the file that set it.
func logNamespace(u *Unit, sec, id string, version int) (ns, src string) {
	for _, s := range u.Sources {
		for _, o := range s.Options {
			if o.Section != sec || o.Name != "LogNamespace" {
				continue
			}
			if o.Value == "" {
				ns, src = "", ""
				continue
			}
			k, err := expand(version, id, o.Value, 255) // NAME_MAX
			if err != nil || !logNamespaceValid(k) {
				continue
			}
			ns, src = k, s.Path
		}
	}
	return ns, src
}

// logNamespaceValid is log_namespace_name_valid: a file name of at most
// 222 bytes (NAME_MAX less a machine id and a dot), of unit instance
// characters, without a backslash.
func logNamespaceValid(s string) bool {
	if s == "" || s == "." || s == ".." || len(s) > 222 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(isAlnum(c) || strings.IndexByte(":-_.@", c) >= 0) {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// badUser is config_parse_user_group_compat's check of one name.
func badUser(id string, version int, v string) string {
	k, err := expand(version, id, v, unit.FullPrintfMax)
	if err != nil {
		return "failed to resolve unit specifiers: " + err.Error()
	}
	if !unit.ValidUserGroupName(k, true, true) {
		return "invalid user/group name or numeric ID"
	}
	return ""
}

// commandCount is how many commands the command setting name of u's
// section sec holds once its assignments are parsed as config_parse_exec
// does: an empty one empties the list, one systemd ignores adds nothing.
func commandCount(u *Unit, sec, name, id string, version int) int {
	n := 0
	for _, src := range u.Sources {
		for _, o := range src.Options {
			if o.Section != sec || o.Name != name {
				continue
			}
			if o.Value == "" {
				n = 0
				continue
			}
			k, _ := parseCommands(id, version, o.Value)
			n += k
		}
	}
	return n
}

// parseCommands is config_parse_exec on one non-empty Exec*= value: how
// many commands it adds (several may be separated by a lone ";"), and why
// it fails the load, or "". A "-" prefix turns a failure into the end of
// the value, as does a syntax error in a first word.
func parseCommands(id string, version int, v string) (n int, why string) {
	p := v
	for {
		first, rest, ok, err := execWord(p)
		if err != nil || !ok {
			return n, ""
		}
		p = rest
		if first == ";" {
			continue
		}
		f := first
		ignore, argv0, noEnv, plus, bang, bangbang := false, false, false, false, false, false
	prefixes:
		for f != "" {
			switch {
			case f[0] == '-' && !ignore:
				ignore = true
			case f[0] == '@' && !argv0:
				argv0 = true
			case f[0] == ':' && !noEnv:
				noEnv = true
			case f[0] == '+' && !plus && !bang && !bangbang:
				plus = true
			case f[0] == '!' && !plus && !bang && !bangbang:
				bang = true
			case f[0] == '!' && !plus && !bangbang:
				bang, bangbang = false, true
			default:
				break prefixes
			}
			f = f[1:]
		}
		fail := func(why string) (int, string) {
			if ignore {
				return n, ""
			}
			return n, why
		}
		path, err := expand(version, id, f, unit.PathPrintfMax)
		switch {
		case err != nil:
			return fail("failed to resolve unit specifiers: " + err.Error())
		case path == "":
			return fail("empty path in command line")
		case !unit.StringIsSafe(path):
			return fail("executable path contains special characters")
		case impliesDirectory(path, version):
			return fail("executable path specifies a directory")
		case strings.HasPrefix(path, "/") && !pathIsValid(path),
			!strings.HasPrefix(path, "/") && !filenameIsValid(path):
			return fail("neither a valid executable name nor an absolute path")
		}
		args := 0
		if !argv0 {
			args++
		}
		semicolon := false
		for p != "" {
			if p[0] == ';' && (len(p) == 1 || strings.IndexByte(whitespace, p[1]) >= 0) {
				p, semicolon = strings.TrimLeft(p[1:], whitespace), true
				break
			}
			if strings.HasPrefix(p, `\;`) && (len(p) == 2 || strings.IndexByte(whitespace, p[2]) >= 0) {
				p = strings.TrimLeft(p[2:], whitespace)
				args++
				continue
			}
			w, r, ok, err := execWord(p)
			if err != nil {
				return fail("invalid syntax")
			}
			if !ok {
				break
			}
			p = r
			if _, err := expand(version, id, w, unit.FullPrintfMax); err != nil {
				return fail("failed to resolve unit specifiers: " + err.Error())
			}
			args++
		}
		if args == 0 {
			return fail("empty executable name or zeroeth argument")
		}
		n++
		if !semicolon {
			return n, ""
		}
	}
}

// expand is unit_full_printf_full with the bound max; the machine's
// specifiers, which resolve at boot, expand to stand-ins.
func expand(version int, id, s string, max int) (string, error) {
	return unit.Expand(version, id, s, max, unit.MachineStandIn)
}

// whitespace is systemd's WHITESPACE, the separators of words.
const whitespace = " \t\n\r"

// impliesDirectory is the check for an executable that names a
// directory: a trailing "/" in systemd 252, path_implies_directory (also
// "." or ".." as the last component) from 257.
func impliesDirectory(p string, version int) bool {
	if strings.HasSuffix(p, "/") {
		return true
	}
	if version < 257 {
		return false
	}
	return p == "." || p == ".." || strings.HasSuffix(p, "/.") || strings.HasSuffix(p, "/..")
}

// pathIsValid is path_is_valid: no component longer than NAME_MAX and
// shorter than PATH_MAX in all.
func pathIsValid(p string) bool {
	if p == "" || len(p) > unit.PathPrintfMax {
		return false
	}
	for _, c := range strings.Split(p, "/") {
		if len(c) > 255 {
			return false
		}
	}
	return true
}

// filenameIsValid is filename_is_valid: one component, not "." or "..",
// at most NAME_MAX bytes.
func filenameIsValid(s string) bool {
	return s != "" && s != "." && s != ".." && !strings.Contains(s, "/") && len(s) <= 255
}

// execWord ports extract_first_word_and_warn with EXTRACT_UNQUOTE and
// EXTRACT_CUNESCAPE: the first word of s with quotes removed and C
// escapes decoded (an unknown escape kept as written, as the retry with
// EXTRACT_UNESCAPE_RELAX does), the rest after the separators that
// follow it, and whether there was a word. An unbalanced quote, or a
// backslash ending s inside quotes, is an error.
func execWord(s string) (word, rest string, ok bool, err error) {
	i := 0
	for i < len(s) && strings.IndexByte(whitespace, s[i]) >= 0 {
		i++
	}
	if i >= len(s) {
		return "", "", false, nil
	}
	var b strings.Builder
	var quote byte
	for i < len(s) {
		c := s[i]
		switch {
		case c == '\\':
			if i+1 >= len(s) {
				if quote != 0 {
					return "", "", false, errSyntax
				}
				b.WriteByte('\\')
				return b.String(), "", true, nil
			}
			n := cunescape(s[i+1:], &b)
			if n == 0 {
				b.WriteByte('\\')
				b.WriteByte(s[i+1])
				n = 1
			}
			i += 1 + n
		case quote != 0:
			if c == quote {
				quote = 0
			} else {
				b.WriteByte(c)
			}
			i++
		case c == '"' || c == '\'':
			quote = c
			i++
		case strings.IndexByte(whitespace, c) >= 0:
			return b.String(), strings.TrimLeft(s[i:], whitespace), true, nil
		default:
			b.WriteByte(c)
			i++
		}
	}
	if quote != 0 {
		return "", "", false, errSyntax
	}
	return b.String(), "", true, nil
}

// errSyntax is extract_first_word's -EINVAL.
var errSyntax = errors.New("unbalanced quoting")

// The one-character escapes and what they stand for ("\s" is a space).
const (
	simpleEscapes = "abfnrtv\\\"'s"
	simpleValues  = "\a\b\f\n\r\t\v\\\"' "
)

// cunescape is cunescape_one without NUL: it writes the character the
// escape at the start of s (what follows the backslash) stands for and
// returns how many bytes of s it took, or 0 for an invalid escape.
func cunescape(s string, b *strings.Builder) int {
	if i := strings.IndexByte(simpleEscapes, s[0]); i >= 0 {
		b.WriteByte(simpleValues[i])
		return 1
	}
	hex := func(t string) (uint32, bool) {
		var v uint32
		for i := 0; i < len(t); i++ {
			d := unit.HexVal(t[i])
			if d < 0 {
				return 0, false
			}
			v = v<<4 | uint32(d)
		}
		return v, true
	}
	switch c := s[0]; {
	case c == 'x':
		if len(s) < 3 {
			return 0
		}
		v, ok := hex(s[1:3])
		if !ok || v == 0 {
			return 0
		}
		b.WriteByte(byte(v))
		return 3
	case c == 'u' || c == 'U':
		n := 4
		if c == 'U' {
			n = 8
		}
		if len(s) < n+1 {
			return 0
		}
		v, ok := hex(s[1 : n+1])
		if !ok || v == 0 || c == 'U' && !unicharValid(v) {
			return 0
		}
		b.WriteString(encodeUnichar(v))
		return n + 1
	case c >= '0' && c <= '7':
		if len(s) < 3 || s[1] < '0' || s[1] > '7' || s[2] < '0' || s[2] > '7' {
			return 0
		}
		v := uint32(c-'0')<<6 | uint32(s[1]-'0')<<3 | uint32(s[2]-'0')
		if v == 0 || v > 255 {
			return 0
		}
		b.WriteByte(byte(v))
		return 3
	}
	return 0
}

// unicharValid is unichar_is_valid.
func unicharValid(c uint32) bool {
	return c < 0x110000 && c&0xfffff800 != 0xd800 && !(c >= 0xfdd0 && c <= 0xfdef) && c&0xfffe != 0xfffe
}

// encodeUnichar is utf8_encode_unichar, which encodes surrogates too.
func encodeUnichar(c uint32) string {
	switch {
	case c < 0x80:
		return string([]byte{byte(c)})
	case c < 0x800:
		return string([]byte{0xc0 | byte(c>>6), 0x80 | byte(c&0x3f)})
	case c < 0x10000:
		return string([]byte{0xe0 | byte(c>>12), 0x80 | byte(c>>6&0x3f), 0x80 | byte(c&0x3f)})
	}
	return string([]byte{0xf0 | byte(c>>18&0x07), 0x80 | byte(c>>12&0x3f), 0x80 | byte(c>>6&0x3f), 0x80 | byte(c&0x3f)})
}
