package report

import (
	"bytes"
	"encoding/json"
	"io"
)

// WriteJSON writes v as encoding/json's Encoder does with SetIndent("",
// "  ") and SetEscapeHTML(escapeHTML): the same bytes, trailing newline
// included. It marshals compactly and indents in one pass over the result,
// which is several times cheaper than the Encoder's indenting: that one
// re-validates every byte through a state machine, which on a facts
// document of a few MB cost more than marshalling it (measured: facts of
// the Debian root spent 37% of its CPU time in json.appendIndent).
func WriteJSON(w io.Writer, v any, escapeHTML bool) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(escapeHTML)
	if err := enc.Encode(v); err != nil {
		return err
	}
	src := buf.Bytes()
	out, err := indentAt(make([]byte, 0, min(2*len(src), 2*chunk)), src, 0, w)
	if err == nil {
		_, err = w.Write(out)
	}
	return err
}

// chunk is about how much indented output WriteJSON hands the writer at a
// time: an output of a few MB is not built whole (allocating and zeroing
// it was a sixth of the JSON writing's CPU time on the Debian root's facts).
const chunk = 64 << 10

// appendIndented appends src, compact JSON as encoding/json writes it
// (valid, no insignificant space), indented by two spaces per level the way
// json.Indent does it: an empty object or array stays "{}" or "[]", a
// member's name is followed by ": ", and what follows the last value
// (the Encoder's newline) is copied as is.
func appendIndented(dst, src []byte) []byte {
	dst, _ = indentAt(dst, src, 0, nil)
	return dst
}

// indentAt is appendIndented of a value depth levels deep, handing w what
// it has so far, when w is not nil, each time that is chunk bytes or more
// after a ','; it returns the rest.
func indentAt(dst, src []byte, depth int, w io.Writer) ([]byte, error) {
	spaces := []byte("\n                                                                ")
	newline := func() {
		for len(spaces) < 1+2*depth {
			spaces = append(spaces, spaces[1:]...)
		}
		dst = append(dst, spaces[:1+2*depth]...)
	}
	for i := 0; i < len(src); {
		switch c := src[i]; c {
		case '"':
			j := i + 1
			for {
				k := bytes.IndexByte(src[j:], '"')
				if k < 0 { // not encoding/json's output: copy the rest
					return append(dst, src[i:]...), nil
				}
				j += k
				b := j // the quote ends the string unless an odd run of backslashes escapes it
				for b > i+1 && src[b-1] == '\\' {
					b--
				}
				if (j-b)%2 == 0 {
					break
				}
				j++
			}
			dst = append(dst, src[i:j+1]...)
			i = j + 1
		case '{', '[':
			if i+1 < len(src) && src[i+1] == c+2 { // {} and [] ('}' is '{'+2, ']' is '['+2)
				dst = append(dst, c, c+2)
				i += 2
				continue
			}
			dst = append(dst, c)
			depth++
			newline()
			i++
		case '}', ']':
			depth--
			newline()
			dst = append(dst, c)
			i++
		case ',':
			dst = append(dst, ',')
			newline()
			i++
			if w != nil && len(dst) >= chunk {
				if _, err := w.Write(dst); err != nil {
					return nil, err
				}
				dst = dst[:0]
			}
		case ':':
			dst = append(dst, ':', ' ')
			i++
		default:
			dst = append(dst, c)
			i++
		}
	}
	return dst, nil
}
