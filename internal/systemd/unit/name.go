// Package unit owns systemd unit names and unit file syntax: the types a
// name can have, templates and instances, the search path of a system
// manager, and parsing of unit files and drop-ins. It knows nothing of
// enablement or boot; it never touches a filesystem itself.
package unit

import (
	"strings"
)

// Types are the unit types systemd 252 knows, as name suffixes.
var Types = []string{
	"service", "socket", "target", "device", "mount", "automount",
	"swap", "timer", "path", "slice", "scope",
}

// MaxNameLen is systemd's UNIT_NAME_MAX.
const MaxNameLen = 255

// SearchPath is the system manager's unit search path in precedence order,
// as image-root names (see rootfs), for systemd 252 as Debian and Ubuntu
// build it (split-usr: lib/systemd/system before usr/lib/systemd/system, as
// `systemd-analyze unit-paths` prints). The runtime and generator
// directories are included because systemctl consults them; they are empty
// in an image at rest.
var SearchPath = []string{
	"etc/systemd/system.control",
	"run/systemd/system.control",
	"run/systemd/transient",
	"run/systemd/generator.early",
	"etc/systemd/system",
	"etc/systemd/system.attached",
	"run/systemd/system",
	"run/systemd/system.attached",
	"run/systemd/generator",
	"usr/local/lib/systemd/system",
	"lib/systemd/system",
	"usr/lib/systemd/system",
	"run/systemd/generator.late",
}

// SplitUsrRemoved is the systemd version that dropped split-/usr support:
// from it on the search path has no lib/systemd/system, so on an image
// whose /lib is not a link to /usr/lib the units there are not seen.
const SplitUsrRemoved = 255

// SearchPathOf returns the search path of systemd version v: SearchPath
// before SplitUsrRemoved, SearchPath without lib/systemd/system from it on.
func SearchPathOf(v int) []string {
	if v < SplitUsrRemoved {
		return SearchPath
	}
	out := make([]string, 0, len(SearchPath)-1)
	for _, d := range SearchPath {
		if d != "lib/systemd/system" {
			out = append(out, d)
		}
	}
	return out
}

// Type returns the type suffix of name ("service" for "ecs.service"), or ""
// when name has no known type.
func Type(name string) string {
	i := strings.LastIndexByte(name, '.')
	if i < 0 {
		return ""
	}
	t := name[i+1:]
	for _, k := range Types {
		if k == t {
			return t
		}
	}
	return ""
}

// Prefix returns name without its type suffix and instance:
// "getty@tty1.service" gives "getty".
func Prefix(name string) string {
	s := strings.TrimSuffix(name, "."+Type(name))
	if i := strings.IndexByte(s, '@'); i >= 0 {
		return s[:i]
	}
	return s
}

// IsTemplate reports whether name is a template ("foo@.service").
func IsTemplate(name string) bool {
	t := Type(name)
	return t != "" && strings.HasSuffix(name, "@."+t)
}

// Instance returns the instance of an instance name ("tty1" for
// "getty@tty1.service") and whether name is one.
func Instance(name string) (string, bool) {
	t := Type(name)
	if t == "" {
		return "", false
	}
	s := strings.TrimSuffix(name, "."+t)
	i := strings.IndexByte(s, '@')
	if i < 0 || i == len(s)-1 {
		return "", false
	}
	return s[i+1:], true
}

// Template returns the template an instance name is made from
// ("getty@.service" for "getty@tty1.service"), or name itself.
func Template(name string) string {
	t := Type(name)
	inst, ok := Instance(name)
	if !ok {
		return name
	}
	s := strings.TrimSuffix(name, "."+t)
	return strings.TrimSuffix(s, inst) + "." + t
}

// WithInstance returns the instance name of template for inst.
func WithInstance(template, inst string) string {
	t := Type(template)
	return strings.TrimSuffix(template, "@."+t) + "@" + inst + "." + t
}

// validChars is systemd's VALID_CHARS for unit names, plus '@'.
var validChars = func() (t [256]bool) {
	for _, c := range []byte("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789:-_.\\@") {
		t[c] = true
	}
	return t
}()

// ValidChar reports whether c may appear in a unit name (a table lookup:
// name checks run for every directory entry of the search path).
func ValidChar(c byte) bool { return validChars[c] }

// Valid reports whether name is a valid unit name as systemd's
// unit_name_is_valid accepts it for plain, template or instance names.
func Valid(name string) bool {
	if name == "" || len(name) > MaxNameLen {
		return false
	}
	t := Type(name)
	if t == "" {
		return false
	}
	s := strings.TrimSuffix(name, "."+t)
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !validChars[s[i]] {
			return false
		}
	}
	// The prefix ends at the first '@'; systemd accepts more '@' in the
	// instance ("a@b@c.service").
	return strings.IndexByte(s, '@') != 0
}

// ASCIILower lowers the ASCII letters of s and leaves every other byte as
// it is, as the C locale's tolower does (ascii_strlower, strcasecmp).
func ASCIILower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}
