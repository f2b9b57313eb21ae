package finding

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Printable is s as a terminal or a page may show it: C0 and C1 control
// characters, DEL, the bidirectional formatting characters and invalid
// UTF-8 replaced with U+FFFD. A finding's text quotes what a hostile image
// or user named (a unit's description, a cgroup path), whose escape
// sequences must not reach a terminal, and whose bidirectional overrides
// must not make one text read as another ("Trojan Source",
// CVE-2021-42574).
func Printable(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if strings.IndexFunc(s, isControl) < 0 {
		return s
	}
	return strings.Map(func(r rune) rune {
		if isControl(r) {
			return '\uFFFD'
		}
		return r
	}, s)
}

func isControl(r rune) bool { return r < 0x20 || r >= 0x7f && r <= 0x9f || IsBidi(r) }

// ShowBidi writes each bidirectional formatting character of s as the
// visible text [U+XXXX], for a page a browser lays out: there such a
// character would reorder what is shown, and the page shows text as it
// was, not replaced. The replacement is ASCII letters, digits and
// brackets, safe wherever the character was, text or attribute.
func ShowBidi(s string) string {
	if strings.IndexFunc(s, IsBidi) < 0 {
		return s
	}
	var b strings.Builder
	last := 0
	for i, r := range s {
		if IsBidi(r) {
			b.WriteString(s[last:i])
			fmt.Fprintf(&b, "[U+%04X]", r)
			last = i + utf8.RuneLen(r)
		}
	}
	b.WriteString(s[last:])
	return b.String()
}

// IsBidi reports the bidirectional formatting characters: ALM, LRM, RLM,
// the embeddings and overrides (U+202A to U+202E) and the isolates
// (U+2066 to U+2069).
func IsBidi(r rune) bool {
	return r == 0x061c || r == 0x200e || r == 0x200f || r >= 0x202a && r <= 0x202e || r >= 0x2066 && r <= 0x2069
}
