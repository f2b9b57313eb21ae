package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/amilint/amilint/internal/audit/facts"
)

// WriteFacts writes doc exactly as WriteJSON(w, doc, true) does, with the
// units, which are nearly all of a facts document (a few MB on a Debian
// root), marshalled and indented on every core: encoding/json alone was
// the larger half of the facts command's time. As WriteJSON, it writes
// nothing when a value cannot be marshalled.
//
// The document's members are written here one by one, in the struct's
// order; TestWriteFactsKnowsEveryMember fails when Document gains a member
// this function does not write.
func WriteFacts(w io.Writer, doc *facts.Document) error {
	compact := []byte{'{'}
	for _, m := range []struct {
		name string
		v    any
	}{
		{"schema", doc.Schema},
		{"image", doc.Image},
		{"systemd", doc.Systemd},
		{"boot", doc.Boot},
		{"manager", doc.Manager},
	} {
		b, err := marshalMember(m.name, m.v)
		if err != nil {
			return err
		}
		compact = append(append(compact, b...), ',')
	}
	// The trailing comma leaves the indentation one level deep.
	head, err := indentAt(nil, compact, 0, nil)
	if err != nil {
		return err
	}
	head = append(head, `"units": `...)
	units, err := indentUnits(doc.Units)
	if err != nil {
		return err
	}
	b, err := marshalMember("config_files", doc.ConfigFiles)
	if err != nil {
		return err
	}
	// The closing brace returns the indentation to the top level.
	tail, err := indentAt([]byte(",\n  "), append(b, '}'), 1, nil)
	if err != nil {
		return err
	}
	tail = append(tail, '\n')
	for _, b := range append(append([][]byte{head}, units...), tail) {
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	return nil
}

// marshalMember is `"name":value` as encoding/json writes a struct member.
func marshalMember(name string, v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append([]byte(`"`+name+`":`), b...), nil
}

// indentUnits is the units map as WriteJSON writes it one level deep, in
// pieces to write one after the other: in the order of the names, a few
// units to a piece, each piece marshalled and indented by a worker.
func indentUnits(units map[string]*facts.Unit) ([][]byte, error) {
	if len(units) == 0 {
		b, err := json.Marshal(units) // null or {}
		return [][]byte{b}, err
	}
	names := slices.Sorted(maps.Keys(units))
	// Pieces of a few units each balance the workers.
	const perPiece = 8
	pieces := make([][]byte, (len(names)+perPiece-1)/perPiece)
	errs := make([]error, len(pieces))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(pieces)) {
		wg.Go(func() {
			var sc scratch
			sc.enc = json.NewEncoder(&sc.compact)
			for p := int(next.Add(1)) - 1; p < len(pieces); p = int(next.Add(1)) - 1 {
				pieces[p], errs[p] = unitsPiece(names[p*perPiece:min(len(names), (p+1)*perPiece)], units, &sc)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	pieces[0][0] = '{' // the first piece's byte of room opens the map
	for _, piece := range pieces[1:] {
		piece[0] = ','
	}
	return append(pieces, []byte("\n  }")), nil
}

// scratch is what a worker of indentUnits reuses from piece to piece: the
// units' compact JSON, and the previous service's sorted check ids.
type scratch struct {
	compact bytes.Buffer
	enc     *json.Encoder // writing to compact
	ids     []string
}

// unitsPiece is the members of units named in names, each on its own line
// at depth 2 and indented as WriteJSON does, separated by commas, after a
// byte of room for the comma before the piece. The units are marshalled
// into sc.compact first, which sizes the output: in a run that never
// collects garbage every allocated byte is fresh memory, and growing
// buffers by copying was a third of the time.
func unitsPiece(names []string, units map[string]*facts.Unit, sc *scratch) ([]byte, error) {
	sc.compact.Reset()
	ends := make([]int, len(names))
	size := 1
	for i, name := range names {
		if err := encodeUnit(sc, units[name]); err != nil {
			return nil, err
		}
		ends[i] = sc.compact.Len()
		size += len(name) + 16
	}
	src := sc.compact.Bytes()
	out := make([]byte, 1, size+2*len(src)) // indenting about doubles a unit
	start := 0
	for i, name := range names {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(appendString(append(out, "\n    "...), name), ':', ' ')
		var err error
		if out, err = indentAt(out, src[start:ends[i]], 2, nil); err != nil {
			return nil, err
		}
		start = ends[i]
	}
	return out, nil
}

// encodeUnit appends json.Marshal(u) to sc.compact. A service's security
// checks, 81 of them each with a sentence, are three quarters of a facts
// document; encoding/json would sort a map and walk a struct by
// reflection per check, so they are appended by appendSecurity. Security
// is the last member of a Unit (TestFactsWritersKnowTheirTypes).
func encodeUnit(sc *scratch, u *facts.Unit) error {
	buf := &sc.compact
	if u == nil || u.Security == nil {
		if err := sc.enc.Encode(u); err != nil {
			return err
		}
		buf.Truncate(buf.Len() - 1) // the Encoder's newline
		return nil
	}
	rest := *u
	rest.Security = nil
	if err := sc.enc.Encode(&rest); err != nil {
		return err
	}
	buf.Truncate(buf.Len() - 2) // the closing brace and the newline
	b, err := appendSecurity(append(buf.AvailableBuffer(), `,"security":`...), u.Security, &sc.ids)
	if err != nil {
		return err
	}
	buf.Write(append(b, '}'))
	return nil
}

// appendSecurity appends json.Marshal(s) for a non-nil s, member by member
// in the struct's order; TestMarshalUnitKnowsSecurity fails when Security
// changes.
//
// ids is the previous service's check ids, sorted: every service of an
// image has the same checks, which need not be sorted again.
func appendSecurity(b []byte, s *facts.Security, ids *[]string) ([]byte, error) {
	b = append(b, `{"exposure":`...)
	b, err := appendMarshal(b, s.Exposure)
	if err != nil {
		return nil, err
	}
	if s.Level != "" {
		b = appendString(append(b, `,"level":`...), s.Level)
	}
	b = append(b, `,"checks":`...)
	if s.Checks == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '{')
		*ids = sortedAgain(*ids, s.Checks)
		for i, id := range *ids {
			if i > 0 {
				b = append(b, ',')
			}
			c := s.Checks[id]
			b = append(appendString(b, id), `:{"name":`...)
			b = append(appendString(b, c.Name), `,"set":`...)
			switch {
			case c.Set == nil:
				b = append(b, "null"...)
			case *c.Set:
				b = append(b, "true"...)
			default:
				b = append(b, "false"...)
			}
			b = append(b, `,"exposure":`...)
			if c.Exposure == nil {
				b = append(b, "null"...)
			} else {
				b = c.Exposure.AppendJSON(b)
			}
			b = append(appendString(append(b, `,"description":`...), c.Description), '}')
		}
		b = append(b, '}')
	}
	if b, err = appendMarshal(append(b, `,"top":`...), s.Top); err != nil {
		return nil, err
	}
	if len(s.Notes) > 0 {
		if b, err = appendMarshal(append(b, `,"notes":`...), s.Notes); err != nil {
			return nil, err
		}
	}
	if s.Error != "" {
		b = appendString(append(b, `,"error":`...), s.Error)
	}
	return append(b, '}'), nil
}

// appendMarshal appends json.Marshal(v).
func appendMarshal(b []byte, v any) ([]byte, error) {
	m, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(b, m...), nil
}

// appendString appends s as encoding/json writes a string with HTML
// escaped: as is between quotes when no byte needs escaping (printable
// ASCII other than " \ < > &), else as json.Marshal writes it.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x80 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			m, _ := json.Marshal(s) // a string always marshals
			return append(b, m...)
		}
	}
	return append(append(append(b, '"'), s...), '"')
}

// sortedAgain is m's keys, sorted: prev when it holds exactly those.
func sortedAgain[V any](prev []string, m map[string]V) []string {
	if len(prev) == len(m) {
		same := true
		for _, k := range prev {
			if _, ok := m[k]; !ok {
				same = false
				break
			}
		}
		if same {
			return prev
		}
	}
	return slices.Sorted(maps.Keys(m))
}
