package boot

import (
	"encoding/base64"
	"strings"

	"github.com/amilint/amilint/internal/systemd/unit"
)

// credentialsExec is the first systemd version modelled where a service
// with credentials and no Type= is Type=exec (252 picks simple or oneshot
// as for any other service).
const credentialsExec = 257

// credentialNameMax is the longest credential name, that of a file
// descriptor name.
const credentialNameMax = 255

// hasCredentials reports whether the settings of section sec leave the
// unit with a credential to pass: a SetCredential=, SetCredentialEncrypted=,
// LoadCredential=, LoadCredentialEncrypted= or ImportCredential= the parser
// keeps. Set and load credentials (plain and encrypted alike) and imports
// are three lists; an empty assignment empties its own list, and an
// assignment the parser refuses is ignored.
func hasCredentials(u *Unit, sec, id string, version int) bool {
	set, load, imports := 0, 0, 0
	for _, s := range u.Sources {
		for _, o := range s.Options {
			if o.Section != sec {
				continue
			}
			var n *int
			var keep func(string) bool
			switch o.Name {
			case "SetCredential":
				n, keep = &set, func(v string) bool { return setCredentialKept(v, id, version, false) }
			case "SetCredentialEncrypted":
				n, keep = &set, func(v string) bool { return setCredentialKept(v, id, version, true) }
			case "LoadCredential", "LoadCredentialEncrypted":
				n, keep = &load, func(v string) bool { return loadCredentialKept(v, id, version) }
			case "ImportCredential":
				n, keep = &imports, func(v string) bool { return importCredentialKept(v, id, version) }
			default:
				continue
			}
			switch {
			case o.Value == "":
				*n = 0
			case keep(o.Value):
				*n++
			}
		}
	}
	return set+load+imports > 0
}

// setCredentialKept reports whether a SetCredential= (or, encrypted,
// SetCredentialEncrypted=) value is kept: a valid name after specifiers,
// ":", and data that is not empty and is either C-escaped text (NUL
// escapes allowed) or, encrypted, Base64.
func setCredentialKept(v, id string, version int, encrypted bool) bool {
	word, data, err := credentialSplit(v)
	if err != nil || data == "" {
		return false
	}
	name, err := expand(version, id, word, credentialNameMax)
	if err != nil || !credentialNameValid(name) {
		return false
	}
	if encrypted {
		return base64Valid(data)
	}
	return unescapeValid(data)
}

// loadCredentialKept reports whether a LoadCredential= (or
// LoadCredentialEncrypted=) value is kept: a valid name after specifiers
// and, after a ":", an optional source that, after specifiers, is an
// absolute normalized path or a credential name.
func loadCredentialKept(v, id string, version int) bool {
	word, src, err := credentialSplit(v)
	if err != nil {
		return false
	}
	name, err := expand(version, id, word, credentialNameMax)
	if err != nil || !credentialNameValid(name) {
		return false
	}
	if src == "" {
		return true
	}
	p, err := expand(version, id, src, unit.PathPrintfMax)
	if err != nil {
		return false
	}
	if strings.HasPrefix(p, "/") {
		return unit.PathNormalized(p)
	}
	return credentialNameValid(p)
}

// importCredentialKept reports whether an ImportCredential= value is kept:
// a credential glob after specifiers and, after a ":", an optional new
// name, taken as written.
func importCredentialKept(v, id string, version int) bool {
	word, rename, err := credentialSplit(v)
	if err != nil {
		return false
	}
	glob, err := expand(version, id, word, credentialNameMax)
	if err != nil || !credentialGlobValid(glob) {
		return false
	}
	return rename == "" || credentialNameValid(rename)
}

// credentialSplit splits a credential setting at its first ":" as
// extract_first_word does without flags and with separators not
// coalesced: a backslash takes the next character as it is, one ending
// the value is an error, and the first word may be empty.
func credentialSplit(v string) (word, rest string, err error) {
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		switch c := v[i]; c {
		case '\\':
			if i+1 >= len(v) {
				return "", "", errSyntax
			}
			i++
			b.WriteByte(v[i])
		case ':':
			return b.String(), v[i+1:], nil
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), "", nil
}

// credentialNameValid is credential_name_valid: a valid file name that is
// also a valid file descriptor name (printable ASCII, no ":").
func credentialNameValid(s string) bool {
	if !filenameIsValid(s) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] >= 127 || s[i] == ':' {
			return false
		}
	}
	return true
}

// credentialGlobValid is credential_glob_valid: a credential name, or one
// followed by a single trailing "*", or "*" alone; no other glob
// characters.
func credentialGlobValid(s string) bool {
	n := strings.IndexAny(s, "*?[]")
	switch {
	case s == "":
		return false
	case n < 0:
		return credentialNameValid(s)
	case s[n:] != "*":
		return false
	case n == 0:
		return true
	}
	return credentialNameValid(s[:n])
}

// base64Valid is whether unbase64mem accepts s: the standard or the URL
// safe alphabet, whitespace ignored, whole padded groups of four, no
// stray bits after the last byte.
func base64Valid(s string) bool {
	t := strings.Map(func(r rune) rune {
		switch {
		case strings.ContainsRune(whitespace, r):
			return -1
		case r == '-':
			return '+'
		case r == '_':
			return '/'
		}
		return r
	}, s)
	_, err := base64.StdEncoding.Strict().DecodeString(t)
	return err == nil
}

// unescapeValid is whether cunescape with NUL escapes allowed accepts s:
// every backslash starts a valid escape, none ends s.
func unescapeValid(s string) bool {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			continue
		}
		if i+1 >= len(s) {
			return false
		}
		n := cunescape(s[i+1:], &b)
		if n == 0 {
			n = nulEscape(s[i+1:])
		}
		if n == 0 {
			return false
		}
		i += n
	}
	return true
}

// nulEscape is how many bytes an escape for NUL at the start of s (what
// follows the backslash) takes, 0 when it is not one.
func nulEscape(s string) int {
	for _, e := range []string{"x00", "000", "u0000", "U00000000"} {
		if strings.HasPrefix(s, e) {
			return len(e)
		}
	}
	return 0
}
