package facts

import (
	"fmt"
	"strings"
)

// EnvFile is a parsed KEY=VALUE environment file such as /etc/ecs/ecs.config
// or a unit's EnvironmentFile=.
type EnvFile struct {
	// Keys maps each assigned variable to its last value.
	Keys map[string]string
	// Problems lists the lines that were ignored, as systemd ignores them
	// with a warning ("line 3: invalid variable name \"1A\"").
	Problems []string
}

// ParseEnv parses an environment file with the syntax systemd 252 accepts
// for EnvironmentFile= (load_env_file in src/basic/env-file.c): lines of
// KEY=VALUE, blank lines and lines starting with # or ; ignored, whitespace
// around keys and unquoted values dropped, single quotes literal, double
// quotes with backslash escapes of " \ ` $ and newline, a backslash before a
// newline continuing the line. Adjacent quoted and unquoted parts
// concatenate. Invalid lines are reported in Problems, never as a panic.
func ParseEnv(b []byte) *EnvFile {
	p := &envParser{src: string(b), out: &EnvFile{Keys: map[string]string{}}, line: 1}
	p.run()
	return p.out
}

type envParser struct {
	src  string
	out  *EnvFile
	line int
}

func (p *envParser) problem(line int, format string, args ...any) {
	// Bound what a hostile file can make us keep.
	if len(p.out.Problems) < 100 {
		p.out.Problems = append(p.out.Problems, fmt.Sprintf("line %d: ", line)+fmt.Sprintf(format, args...))
	}
}

func (p *envParser) run() {
	s := p.src
	i := 0
	for i < len(s) {
		// Pre-key: skip whitespace and empty lines.
		c := s[i]
		switch {
		case c == '\n':
			p.line++
			i++
			continue
		case c == ' ' || c == '\t' || c == '\r':
			i++
			continue
		case c == '#' || c == ';':
			i = p.skipComment(i)
			continue
		}
		start := p.line
		// Key: up to '=' or end of line.
		j := i
		for j < len(s) && s[j] != '=' && s[j] != '\n' {
			j++
		}
		key := strings.TrimRight(s[i:j], " \t\r")
		if j >= len(s) || s[j] == '\n' {
			p.problem(start, "no '=' in %q", truncate(key))
			i = j
			continue
		}
		var val string
		val, i = p.value(j + 1)
		if !validEnvName(key) {
			p.problem(start, "invalid variable name %q", truncate(key))
			continue
		}
		p.out.Keys[key] = val
	}
}

// skipComment skips a comment line; a backslash before its newline
// continues the comment, as in systemd.
func (p *envParser) skipComment(i int) int {
	s := p.src
	for i < len(s) {
		switch s[i] {
		case '\\':
			if i+1 < len(s) && s[i+1] == '\n' {
				p.line++
			}
			i += 2
			continue
		case '\n':
			return i
		}
		i++
	}
	return i
}

// value parses a value starting at i and returns it and the index of the
// newline (or end) that ends it. It is the value half of systemd's
// parse_env_file_internal state machine: quotes open only where a value
// starts or right after a closing quote (PRE_VALUE, which also skips
// blanks); elsewhere they are literal; trailing blanks of unquoted text
// are dropped.
func (p *envParser) value(i int) (string, int) {
	s := p.src
	var b strings.Builder
	const (
		preValue = iota
		unquoted
	)
	state := preValue
	trail := -1 // start of trailing blanks of unquoted text, -1 if none
	for i < len(s) {
		c := s[i]
		if c == '\n' {
			break
		}
		switch {
		case state == preValue && (c == ' ' || c == '\t' || c == '\r'):
			i++
		case state == preValue && c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				p.problem(p.line, "unterminated single quote")
				b.WriteString(s[i+1:])
				p.line += strings.Count(s[i+1:], "\n")
				return b.String(), len(s)
			}
			seg := s[i+1 : i+1+j]
			p.line += strings.Count(seg, "\n")
			b.WriteString(seg)
			i += j + 2
		case state == preValue && c == '"':
			i = p.doubleQuoted(&b, i+1)
		case c == '\\':
			state = unquoted
			if i+1 >= len(s) {
				i++
				continue
			}
			if s[i+1] == '\n' {
				p.line++ // an escaped newline is eaten entirely
			} else {
				b.WriteByte(s[i+1])
				trail = -1
			}
			i += 2
		default:
			state = unquoted
			if c == ' ' || c == '\t' || c == '\r' {
				if trail < 0 {
					trail = b.Len()
				}
			} else {
				trail = -1
			}
			b.WriteByte(c)
			i++
		}
	}
	v := b.String()
	if state == unquoted && trail >= 0 {
		v = v[:trail]
	}
	return v, i
}

// doubleQuoted reads a double-quoted section starting after its opening
// quote into b and returns the index after the closing quote.
func (p *envParser) doubleQuoted(b *strings.Builder, i int) int {
	s := p.src
	for i < len(s) {
		d := s[i]
		switch {
		case d == '"':
			return i + 1
		case d == '\\' && i+1 < len(s):
			switch e := s[i+1]; e {
			case '"', '\\', '`', '$':
				b.WriteByte(e)
			case '\n':
				p.line++
			default:
				b.WriteByte('\\')
				b.WriteByte(e)
			}
			i += 2
			continue
		case d == '\n':
			p.line++
		}
		b.WriteByte(d)
		i++
	}
	p.problem(p.line, "unterminated double quote")
	return i
}

// validEnvName is systemd's env_name_is_valid: letters, digits and '_',
// not starting with a digit.
func validEnvName(k string) bool {
	if k == "" || len(k) > 4096 {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		switch {
		case c == '_', c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
