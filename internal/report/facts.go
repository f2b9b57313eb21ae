package report

import (
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
			for p := int(next.Add(1)) - 1; p < len(pieces); p = int(next.Add(1)) - 1 {
				pieces[p], errs[p] = unitsPiece(names[p*perPiece:min(len(names), (p+1)*perPiece)], units)
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

// unitsPiece is the members of units named in names, each on its own line
// at depth 2 and indented as WriteJSON does, separated by commas, after a
// byte of room for the comma before the piece.
func unitsPiece(names []string, units map[string]*facts.Unit) ([]byte, error) {
	vs := make([][]byte, len(names))
	size := 1
	for i, name := range names {
		v, err := json.Marshal(units[name])
		if err != nil {
			return nil, err
		}
		vs[i] = v
		size += 2*len(v) + len(name) + 16 // indenting about doubles a unit
	}
	out := make([]byte, 1, size)
	for i, name := range names {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, "\n    "...)
		k, err := json.Marshal(name)
		if err != nil {
			return nil, err
		}
		out = append(append(out, k...), ':', ' ')
		if out, err = indentAt(out, vs[i], 2, nil); err != nil {
			return nil, err
		}
	}
	return out, nil
}
