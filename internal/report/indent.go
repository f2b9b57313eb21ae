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
	_, err := w.Write(appendIndented(make([]byte, 0, 2*buf.Len()), buf.Bytes()))
	return err
}

// appendIndented appends src, compact JSON as encoding/json writes it
// (valid, no insignificant space), indented by two spaces per level the way
// json.Indent does it: an empty object or array stays "{}" or "[]", a
// member's name is followed by ": ", and what follows the last value
// (the Encoder's newline) is copied as is.
func appendIndented(dst, src []byte) []byte {
	depth := 0
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
					return append(dst, src[i:]...)
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
		case ':':
			dst = append(dst, ':', ' ')
			i++
		default:
			dst = append(dst, c)
			i++
		}
	}
	return dst
}
