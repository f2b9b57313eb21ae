package policy

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/open-policy-agent/opa/v1/ast"
)

// errJSON reports JSON the fast decoder does not accept.
var errJSON = errors.New("invalid JSON")

// maxJSONDepth bounds nesting, as encoding/json does (10000).
const maxJSONDepth = 10000

// decodeJSON turns one JSON document into a Rego value directly, without
// the map[string]any stage of ast.ValueFromReader: the facts document is
// converted for every evaluation, and this is its largest fixed cost.
// Numbers stay exact (json.Number). It accepts exactly RFC 8259 JSON with
// nothing but whitespace after the value; anything else is an error and
// the caller can use ast.ValueFromReader instead.
func decodeJSON(b []byte) (ast.Value, error) {
	d := jsonDecoder{b: b}
	t, err := d.value(0)
	if err != nil {
		return nil, err
	}
	d.space()
	if d.i != len(d.b) {
		return nil, fmt.Errorf("offset %d: data after the value: %w", d.i, errJSON)
	}
	return t.Value, nil
}

type jsonDecoder struct {
	b []byte
	i int
	// pairs and elems are scratch stacks shared by nested objects and
	// arrays, so building one costs one exact-size copy, not regrowth.
	pairs [][2]*ast.Term
	elems []*ast.Term
}

func (d *jsonDecoder) fail(what string) error {
	return fmt.Errorf("offset %d: %s: %w", d.i, what, errJSON)
}

func (d *jsonDecoder) space() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

func (d *jsonDecoder) value(depth int) (*ast.Term, error) {
	if depth > maxJSONDepth {
		return nil, d.fail("nested too deep")
	}
	d.space()
	if d.i >= len(d.b) {
		return nil, d.fail("unexpected end")
	}
	switch c := d.b[d.i]; {
	case c == '{':
		return d.object(depth)
	case c == '[':
		return d.array(depth)
	case c == '"':
		s, err := d.str()
		if err != nil {
			return nil, err
		}
		return ast.StringTerm(s), nil
	case c == 't':
		return d.literal("true", ast.BooleanTerm(true))
	case c == 'f':
		return d.literal("false", ast.BooleanTerm(false))
	case c == 'n':
		return d.literal("null", ast.NullTerm())
	case c == '-' || c >= '0' && c <= '9':
		return d.number()
	}
	return nil, d.fail("unexpected character")
}

func (d *jsonDecoder) literal(word string, t *ast.Term) (*ast.Term, error) {
	if len(d.b)-d.i < len(word) || string(d.b[d.i:d.i+len(word)]) != word {
		return nil, d.fail("invalid literal")
	}
	d.i += len(word)
	return t, nil
}

func (d *jsonDecoder) object(depth int) (*ast.Term, error) {
	d.i++ // {
	mark := len(d.pairs)
	defer func() { d.pairs = d.pairs[:mark] }()
	d.space()
	if d.i < len(d.b) && d.b[d.i] == '}' {
		d.i++
		return ast.ObjectTerm(), nil
	}
	for {
		d.space()
		if d.i >= len(d.b) || d.b[d.i] != '"' {
			return nil, d.fail("want an object key")
		}
		k, err := d.str()
		if err != nil {
			return nil, err
		}
		d.space()
		if d.i >= len(d.b) || d.b[d.i] != ':' {
			return nil, d.fail("want ':'")
		}
		d.i++
		v, err := d.value(depth + 1)
		if err != nil {
			return nil, err
		}
		d.pairs = append(d.pairs, [2]*ast.Term{ast.StringTerm(k), v})
		d.space()
		if d.i >= len(d.b) {
			return nil, d.fail("unterminated object")
		}
		switch d.b[d.i] {
		case ',':
			d.i++
		case '}':
			d.i++
			return ast.ObjectTerm(lastOfDuplicates(d.pairs[mark:])...), nil
		default:
			return nil, d.fail("want ',' or '}'")
		}
	}
}

func (d *jsonDecoder) array(depth int) (*ast.Term, error) {
	d.i++ // [
	mark := len(d.elems)
	defer func() { d.elems = d.elems[:mark] }()
	d.space()
	if d.i < len(d.b) && d.b[d.i] == ']' {
		d.i++
		return ast.ArrayTerm(), nil
	}
	for {
		v, err := d.value(depth + 1)
		if err != nil {
			return nil, err
		}
		d.elems = append(d.elems, v)
		d.space()
		if d.i >= len(d.b) {
			return nil, d.fail("unterminated array")
		}
		switch d.b[d.i] {
		case ',':
			d.i++
		case ']':
			d.i++
			// NewArray keeps its slice: give it its own.
			return ast.ArrayTerm(append([]*ast.Term(nil), d.elems[mark:]...)...), nil
		default:
			return nil, d.fail("want ',' or ']'")
		}
	}
}

// str reads a string token. Strings without escapes are sliced directly;
// the rest go through encoding/json, which knows every escape.
func (d *jsonDecoder) str() (string, error) {
	start := d.i
	d.i++ // "
	escaped := false
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch {
		case c == '"':
			d.i++
			if !escaped {
				raw := d.b[start+1 : d.i-1]
				for _, r := range raw {
					if r >= 0x80 {
						// Let encoding/json check and repair UTF-8.
						escaped = true
						break
					}
				}
				if !escaped {
					return string(raw), nil
				}
			}
			var s string
			if err := json.Unmarshal(d.b[start:d.i], &s); err != nil {
				return "", d.fail("invalid string")
			}
			return s, nil
		case c == '\\':
			escaped = true
			d.i += 2
		case c < 0x20:
			return "", d.fail("control character in string")
		default:
			d.i++
		}
	}
	return "", d.fail("unterminated string")
}

func (d *jsonDecoder) number() (*ast.Term, error) {
	start := d.i
	if d.b[d.i] == '-' {
		d.i++
	}
	digits := func() int {
		n := 0
		for d.i < len(d.b) && d.b[d.i] >= '0' && d.b[d.i] <= '9' {
			d.i++
			n++
		}
		return n
	}
	if d.i < len(d.b) && d.b[d.i] == '0' {
		d.i++
	} else if digits() == 0 {
		return nil, d.fail("invalid number")
	}
	if d.i < len(d.b) && d.b[d.i] == '.' {
		d.i++
		if digits() == 0 {
			return nil, d.fail("invalid number")
		}
	}
	if d.i < len(d.b) && (d.b[d.i] == 'e' || d.b[d.i] == 'E') {
		d.i++
		if d.i < len(d.b) && (d.b[d.i] == '+' || d.b[d.i] == '-') {
			d.i++
		}
		if digits() == 0 {
			return nil, d.fail("invalid number")
		}
	}
	if err := checkNumber(string(d.b[start:d.i])); err != nil {
		return nil, fmt.Errorf("offset %d: %w", start, err)
	}
	return ast.NumberTerm(json.Number(d.b[start:d.i])), nil
}

// lastOfDuplicates keeps, of pairs with the same key, the last one, where
// the first one stood, as encoding/json keeps the last value: OPA's
// NewObject takes its pairs as unique. The keys are strings.
func lastOfDuplicates(pairs [][2]*ast.Term) [][2]*ast.Term {
	seen := make(map[ast.String]int, len(pairs))
	var out [][2]*ast.Term
	for i, p := range pairs {
		k := p[0].Value.(ast.String)
		j, dup := seen[k]
		if !dup {
			seen[k] = i
			if out != nil {
				seen[k] = len(out)
				out = append(out, p)
			}
			continue
		}
		if out == nil {
			out = append(make([][2]*ast.Term, 0, len(pairs)), pairs[:i]...)
		}
		out[j][1] = p[1]
	}
	if out == nil {
		return pairs
	}
	return out
}
