package facts

import (
	"errors"
	"fmt"
	"strings"
)

// ErrCommandLine reports an Exec*= value that systemd would refuse.
var ErrCommandLine = errors.New("invalid command line")

// Command is one parsed Exec*= command line.
type Command struct {
	// Prefixes are the special executable prefixes systemd strips from the
	// first word: "@", "-", ":", "+", "!", "!!".
	Prefixes string
	// Argv is the command line split into words, quotes and escapes
	// removed; Argv[0] is the executable with its prefixes stripped (with
	// "@", Argv[1] is the argv[0] the process sees).
	Argv []string
}

// maxWords bounds how many words one command line may have.
const maxWords = 4096

// ParseCommand splits an Exec*= value the way systemd 252's
// config_parse_exec does: leading special prefixes, then words separated by
// whitespace with double and single quotes and C-style backslash escapes.
// Only the first command is returned when a lone ";" separates several.
func ParseCommand(v string) (*Command, error) {
	s := strings.TrimLeft(v, " \t\n")
	c := &Command{}
	for len(s) > 0 {
		switch s[0] {
		case '@', '-', ':', '+':
			c.Prefixes += s[:1]
			s = s[1:]
			continue
		case '!':
			c.Prefixes += "!"
			s = s[1:]
			continue
		}
		break
	}
	words, err := splitWords(s)
	if err != nil {
		return nil, fmt.Errorf("parse command %q: %w", truncate(v), err)
	}
	for i, w := range words {
		if w == ";" {
			words = words[:i]
			break
		}
	}
	if len(words) == 0 {
		return nil, fmt.Errorf("parse command %q: empty: %w", truncate(v), ErrCommandLine)
	}
	c.Argv = words
	return c, nil
}

// splitWords is extract_first_word with EXTRACT_UNQUOTE|EXTRACT_CUNESCAPE,
// applied until the end of s.
func splitWords(s string) ([]string, error) {
	var words []string
	i := 0
	for {
		for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
			i++
		}
		if i >= len(s) {
			return words, nil
		}
		if len(words) >= maxWords {
			return nil, fmt.Errorf("more than %d words: %w", maxWords, ErrCommandLine)
		}
		var b strings.Builder
		var quote byte
	word:
		for i < len(s) {
			c := s[i]
			switch {
			case c == '\\':
				if i+1 >= len(s) {
					return nil, fmt.Errorf("trailing backslash: %w", ErrCommandLine)
				}
				b.WriteByte(unescape(s[i+1]))
				i += 2
			case quote != 0 && c == quote:
				quote = 0
				i++
			case quote != 0:
				b.WriteByte(c)
				i++
			case c == '"' || c == '\'':
				quote = c
				i++
			case c == ' ' || c == '\t' || c == '\n' || c == '\r':
				break word
			default:
				b.WriteByte(c)
				i++
			}
		}
		if quote != 0 {
			return nil, fmt.Errorf("unterminated quote: %w", ErrCommandLine)
		}
		words = append(words, b.String())
	}
}

func unescape(c byte) byte {
	switch c {
	case 'n':
		return '\n'
	case 't':
		return '\t'
	case 'r':
		return '\r'
	case 'a':
		return '\a'
	case 'b':
		return '\b'
	case 'f':
		return '\f'
	case 'v':
		return '\v'
	case 's':
		return ' '
	}
	return c
}
