package fix

import (
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/amilint/amilint/internal/audit/finding"
)

// The rsyslog hardening entry keeps the file system read-only but for
// /var/log, rsyslog's spool and Postfix's chroot socket directory. A
// package may ask rsyslogd for a log socket elsewhere (HAProxy's chroot:
// /etc/rsyslog.d/49-haproxy.conf, $AddUnixListenSocket
// /var/lib/haproxy/dev/log); under that drop-in rsyslogd cannot make it
// (EROFS) and the chrooted daemon's logging is lost. So fix --harden reads
// the image's rsyslog configuration and lets the drop-in write each such
// directory too.

// rsyslogUnits are the names rsyslog's service has.
var rsyslogUnits = []string{"rsyslog.service", "syslog.service"}

// rsyslogConf is where rsyslogd reads its configuration.
const rsyslogConf = "etc/rsyslog.conf"

// Bounds on what the reader follows: the image's configuration is
// hostile input like any other file of it.
const (
	rsyslogMaxFiles = 256
	rsyslogMaxDepth = 16
	rsyslogMaxFile  = 1 << 20
)

// listenSocket is a Unix socket rsyslog's configuration asks for, and
// where: FILE:LINE.
type listenSocket struct {
	Path, Source string
}

// rsyslogSockets returns, in the order rsyslogd reads them, the Unix
// sockets the image's rsyslog configuration asks rsyslogd to listen on:
// the legacy $AddUnixListenSocket and RainerScript's input(type="imuxsock"
// socket="..."), in /etc/rsyslog.conf and the files it includes
// ($IncludeConfig, include(file="...")). A file that is missing, not
// readable or too large is passed over, as are includes whose directory
// part has a wildcard; each file is read once.
func rsyslogSockets(fsys fs.FS) []listenSocket {
	r := rsyslogReader{fsys: fsys, seen: map[string]bool{}}
	r.file(rsyslogConf, 0)
	return r.sockets
}

type rsyslogReader struct {
	fsys    fs.FS
	seen    map[string]bool
	sockets []listenSocket
}

func (r *rsyslogReader) file(name string, depth int) {
	if depth > rsyslogMaxDepth || r.seen[name] || len(r.seen) >= rsyslogMaxFiles {
		return
	}
	r.seen[name] = true
	st, err := fs.Stat(r.fsys, name)
	if err != nil || !st.Mode().IsRegular() || st.Size() > rsyslogMaxFile {
		return
	}
	b, err := fs.ReadFile(r.fsys, name)
	if err != nil || len(b) > rsyslogMaxFile {
		return
	}
	for _, d := range rsyslogDirectives(string(b)) {
		src := fmt.Sprintf("/%s:%d", name, d.line)
		switch d.kind {
		case "$addunixlistensocket":
			r.add(firstField(d.value), src)
		case "input":
			if strings.EqualFold(d.params["type"], "imuxsock") {
				r.add(d.params["socket"], src)
			}
		case "$includeconfig", "include":
			pattern := firstField(d.value)
			if d.kind == "include" {
				pattern = d.params["file"]
			}
			for _, f := range r.expand(pattern) {
				r.file(f, depth+1)
			}
		}
	}
}

func (r *rsyslogReader) add(p, src string) {
	if p == "" || !path.IsAbs(p) {
		return
	}
	r.sockets = append(r.sockets, listenSocket{Path: path.Clean(p), Source: src})
}

// expand is the files an include names: a file, every file of a
// directory, or a pattern's matches in one directory, sorted as rsyslogd
// takes them.
func (r *rsyslogReader) expand(pattern string) []string {
	if !path.IsAbs(pattern) {
		return nil
	}
	name := strings.TrimPrefix(path.Clean(pattern), "/")
	if name == "" || name == "." {
		return nil
	}
	dir, base := path.Split(name)
	dir = strings.TrimSuffix(dir, "/")
	if dir == "" {
		dir = "."
	}
	if hasMeta(dir) {
		return nil
	}
	if !hasMeta(base) {
		st, err := fs.Stat(r.fsys, name)
		if err != nil {
			return nil
		}
		if !st.IsDir() {
			return []string{name}
		}
		dir, base = name, "*"
	}
	entries, err := fs.ReadDir(r.fsys, dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		if ok, err := path.Match(base, e.Name()); err == nil && ok && !strings.HasPrefix(e.Name(), ".") {
			out = append(out, path.Join(dir, e.Name()))
		}
		if len(out) >= rsyslogMaxFiles {
			break
		}
	}
	slices.Sort(out)
	return out
}

// firstField is a legacy directive's argument: its first word.
func firstField(s string) string {
	if f := strings.Fields(s); len(f) > 0 {
		return f[0]
	}
	return ""
}

func hasMeta(s string) bool { return strings.ContainsAny(s, `*?[\`) }

// rsyslogDirective is one statement of an rsyslog configuration that says
// where it listens or what it includes: a legacy $directive (kind is its
// name, lower case, value the rest of its line) or a RainerScript
// object (kind input, module or include; params by lower-case name).
type rsyslogDirective struct {
	kind   string
	value  string
	params map[string]string
	line   int
}

var (
	rainerObject = regexp.MustCompile(`(?i)\b(input|module|include)\s*\(`)
	rainerParam  = regexp.MustCompile(`([A-Za-z][A-Za-z0-9._]*)\s*=\s*("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')`)
)

// rsyslogDirectives reads the statements of one configuration file that
// rsyslogSockets needs, comments (# to the end of a line, /* */) set
// aside, in file order.
func rsyslogDirectives(text string) []rsyslogDirective {
	clean := stripRsyslogComments(text)
	var out []rsyslogDirective
	lineAt := func(off int) int { return strings.Count(clean[:off], "\n") + 1 }
	off := 0
	for _, l := range strings.SplitAfter(clean, "\n") {
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, "$") {
			name := strings.Fields(t)[0]
			out = append(out, rsyslogDirective{kind: strings.ToLower(name), value: strings.TrimSpace(t[len(name):]), line: lineAt(off)})
		}
		off += len(l)
	}
	for _, m := range rainerObject.FindAllStringSubmatchIndex(clean, -1) {
		end := closingParen(clean, m[1])
		if end < 0 {
			continue
		}
		params := map[string]string{}
		for _, p := range rainerParam.FindAllStringSubmatch(clean[m[1]:end], -1) {
			v := p[2][1 : len(p[2])-1]
			params[strings.ToLower(p[1])] = unescapeRainer(v)
		}
		out = append(out, rsyslogDirective{kind: strings.ToLower(clean[m[2]:m[3]]), params: params, line: lineAt(m[0])})
	}
	slices.SortStableFunc(out, func(a, b rsyslogDirective) int { return a.line - b.line })
	return out
}

// closingParen is the offset of the ")" closing an object whose
// parameters start at from, quoted strings skipped; -1 if none.
func closingParen(s string, from int) int {
	var quote byte
	for i := from; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0 && c == '\\':
			i++
		case quote != 0 && c == quote:
			quote = 0
		case quote != 0:
		case c == '"' || c == '\'':
			quote = c
		case c == ')':
			return i
		}
	}
	return -1
}

// stripRsyslogComments blanks comments, keeping every newline so line
// numbers stay: # to the end of the line and /* */, outside quotes.
func stripRsyslogComments(s string) string {
	b := []byte(s)
	var quote byte
	lineStart := true // only blanks since the last newline
	for i := 0; i < len(b); i++ {
		c := b[i]
		if quote == 0 && lineStart && c == '$' {
			// A legacy directive is its whole line, as rsyslogd's lexer
			// takes it: "/etc/rsyslog.d/*.conf" opens no comment.
			for i+1 < len(b) && b[i+1] != '\n' {
				i++
			}
			continue
		}
		lineStart = c == '\n' || (lineStart && (c == ' ' || c == '\t'))
		switch {
		case quote != 0 && c == '\\' && i+1 < len(b) && b[i+1] != '\n':
			i++
		case quote != 0 && (c == quote || c == '\n'):
			quote = 0
		case quote != 0:
		case c == '"' || c == '\'':
			quote = c
		case c == '#':
			for ; i+1 < len(b) && b[i+1] != '\n'; i++ {
				b[i] = ' '
			}
			b[i] = ' ' // the newline after it is read next
		case c == '/' && i+1 < len(b) && b[i+1] == '*':
			for ; i < len(b) && !(b[i] == '*' && i+1 < len(b) && b[i+1] == '/'); i++ {
				if b[i] != '\n' {
					b[i] = ' '
				}
			}
			if i < len(b) {
				b[i], b[i+1] = ' ', ' '
				i++
			}
		}
	}
	return string(b)
}

// unescapeRainer undoes a RainerScript string's backslash escapes.
func unescapeRainer(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// safeUnitPath is a path a unit file can name in ReadWritePaths= as it
// is: no blanks, quotes, backslashes or specifiers ("%").
var safeUnitPath = regexp.MustCompile(`^/[A-Za-z0-9._+@:/-]*$`)

// AdaptToImage returns the drop-ins with what the image's own
// configuration needs of them added. A drop-in of rsyslog's service that
// sets ProtectSystem=strict gets, for each directory the image's rsyslog
// configuration makes a listen socket in and the drop-in's
// ReadWritePaths= does not cover, a ReadWritePaths=-DIR line with a
// comment naming where the configuration asks for it. A socket path is
// taken only when a unit file can name it as it is. Sockets under /dev,
// /proc and /sys (API file systems ProtectSystem= leaves as they are; the
// entry's /dev is private) and paths a unit file cannot name as they are
// are left alone.
func AdaptToImage(fsys fs.FS, dropins []DropIn) []DropIn {
	out := slices.Clone(dropins)
	var sockets []listenSocket
	read := false
	for i, d := range out {
		if !slices.Contains(rsyslogUnits, d.Unit) || !strictSystem(d.Content) {
			continue
		}
		if !read {
			sockets, read = rsyslogSockets(fsys), true
		}
		writable := readWritePaths(d.Content)
		var lines []string
		for _, s := range sockets {
			dir := path.Dir(s.Path)
			if !safeUnitPath.MatchString(s.Path) || dir == "/" || underAny(dir, []string{"/dev", "/proc", "/sys"}) || underAny(dir, writable) {
				continue
			}
			writable = append(writable, dir)
			lines = append(lines, fmt.Sprintf("# %s asks rsyslogd for the socket %s\nReadWritePaths=-%s\n", finding.Printable(s.Source), s.Path, dir))
		}
		if len(lines) > 0 {
			out[i].Content = strings.TrimRight(d.Content, "\n") + "\n\n# Added by amilint fix --harden: directories this image's rsyslog configuration makes\n# listen sockets in (\"-\": none is needed to exist).\n[Service]\n" + strings.Join(lines, "")
		}
	}
	return out
}

// strictSystem reports whether a drop-in's last ProtectSystem= is strict.
func strictSystem(content string) bool {
	v := ""
	for _, l := range strings.Split(content, "\n") {
		if k, val, ok := strings.Cut(strings.TrimSpace(l), "="); ok && strings.TrimSpace(k) == "ProtectSystem" {
			v = strings.TrimSpace(val)
		}
	}
	return v == "strict"
}

// readWritePaths are the paths a drop-in's ReadWritePaths= lines name,
// their "-" and "+" prefixes taken off; an empty assignment resets them.
func readWritePaths(content string) []string {
	var out []string
	for _, l := range strings.Split(content, "\n") {
		k, val, ok := strings.Cut(strings.TrimSpace(l), "=")
		if !ok || strings.TrimSpace(k) != "ReadWritePaths" {
			continue
		}
		if strings.TrimSpace(val) == "" {
			out = nil
			continue
		}
		for _, p := range strings.Fields(val) {
			p = strings.TrimLeft(p, "-+")
			if path.IsAbs(p) {
				out = append(out, path.Clean(p))
			}
		}
	}
	return out
}

// underAny reports whether p is one of dirs or below one.
func underAny(p string, dirs []string) bool {
	return slices.ContainsFunc(dirs, func(d string) bool {
		return p == d || strings.HasPrefix(p, strings.TrimSuffix(d, "/")+"/")
	})
}
