package report

import (
	"encoding/json"
	"io"
	"maps"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/amilint/amilint/internal/audit/facts"
	"github.com/amilint/amilint/internal/image/rootfs"
)

// WriteFacts writes doc exactly as WriteJSON(w, doc, true) does, with the
// units, which are nearly all of a facts document (a few MB on a Debian
// root), written on every core and handed to w as they are done, in
// order. As WriteJSON, it writes nothing when a value cannot be
// marshalled: every member that can fail is marshalled or checked before
// the first write.
//
// The document's members are written here one by one, in the struct's
// order; TestFactsWritersKnowTheirTypes fails when Document gains a member
// this function does not write.
func WriteFacts(w io.Writer, doc *facts.Document) error {
	if doc == nil {
		return WriteJSON(w, doc, true)
	}
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
	names := slices.Sorted(maps.Keys(doc.Units))
	if err := checkUnits(doc.Units, names); err != nil {
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
	if _, err := w.Write(head); err != nil {
		return err
	}
	if err := writeUnits(w, doc.Units, names); err != nil {
		return err
	}
	_, err = w.Write(tail)
	return err
}

// marshalMember is `"name":value` as encoding/json writes a struct member.
func marshalMember(name string, v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append([]byte(`"`+name+`":`), b...), nil
}

// checkUnits returns the error writing the units would meet, the one
// encoding/json would stop at: the first in the order of the names, which
// are the units' sorted. The spans, which marshal themselves, are the only
// members of a unit that can fail (a number no JSON number holds).
func checkUnits(units map[string]*facts.Unit, names []string) error {
	for _, name := range names {
		if u := units[name]; u != nil {
			for _, s := range []facts.Seconds{u.RestartSec, u.StartLimitIntervalSec} {
				if _, err := appendSeconds(nil, s); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// writeUnits writes the units map as WriteJSON writes it one level deep,
// after checkUnits found nothing that fails. The names, sorted, are cut into
// pieces of a few units, in their order; a worker a core writes a piece
// at a time into a buffer, and the worker that completes the next piece
// in order hands it to w, with any done after it, and takes its buffer
// back. In a run that never collects garbage every byte allocated is a
// page fault on its first write: reusing a few buffers (a piece of eight
// services is about 100 KB) touches a fraction of the 3 MB a Debian
// root's units are.
func writeUnits(w io.Writer, units map[string]*facts.Unit, names []string) error {
	if len(units) == 0 {
		b, err := json.Marshal(units) // null or {}
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	const perPiece = 8 // a few units each balance the workers
	var (
		mu    sync.Mutex
		done  = make([][]byte, (len(names)+perPiece-1)/perPiece)
		next  int      // the piece w gets next
		free  [][]byte // buffers written, to reuse
		err   error    // w's failure: nothing more is written
		fails atomic.Bool
	)
	scratches := make([]scratch, runtime.GOMAXPROCS(0))
	rootfs.ForEachOn(len(scratches), len(done), func(wk, p int) {
		if fails.Load() {
			return
		}
		mu.Lock()
		var buf []byte
		if n := len(free); n > 0 {
			buf, free = free[n-1], free[:n-1]
		}
		mu.Unlock()
		if buf == nil {
			buf = make([]byte, 0, pieceRoom)
		}
		b := unitsPiece(buf, names[p*perPiece:min(len(names), (p+1)*perPiece)], units, &scratches[wk])
		mu.Lock()
		defer mu.Unlock()
		done[p] = b
		for ; err == nil && next < len(done) && done[next] != nil; next++ {
			b := done[next]
			b[0] = ',' // the piece's byte of room: a comma, or the brace opening the map
			if next == 0 {
				b[0] = '{'
			}
			if _, err = w.Write(b); err != nil {
				fails.Store(true)
			}
			free = append(free, b[:0])
			done[next] = nil
		}
	})
	if err != nil {
		return err
	}
	_, err = w.Write([]byte("\n  }"))
	return err
}

// scratch is what a worker of writeUnits keeps from piece to piece: the
// previous service's sorted check ids.
type scratch struct {
	ids []string
}

// pieceRoom is the room a new buffer of writeUnits takes: room never
// written costs nothing, and a piece larger grows by append.
const pieceRoom = 256 << 10

// unitsPiece appends to buf the members of units named in names, each on
// its own line at depth 2 and indented as WriteJSON does, separated by
// commas, after a byte of room for the comma before the piece.
func unitsPiece(buf []byte, names []string, units map[string]*facts.Unit, sc *scratch) []byte {
	out := append(buf, 0)
	for i, name := range names {
		if i > 0 {
			out = append(out, ',')
		}
		out = appendUnit(append(appendString(append(out, "\n    "...), name), ':', ' '), units[name], sc)
	}
	return out
}

// appendString appends s as encoding/json writes a string with HTML
// escaped: as is between quotes when every byte is plain (plainBytes),
// else as json.Marshal writes it.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 0x80 || plainBytes[c>>6]&(1<<(c&63)) == 0 {
			m, _ := json.Marshal(s) // a string always marshals
			return append(b, m...)
		}
	}
	return append(append(append(b, '"'), s...), '"')
}

// plainBytes is the set of bytes encoding/json writes as they are in a
// string with HTML escaped, as a bit mask of bytes 0-63 and 64-127: the
// printable ASCII bytes but " & < > and \\.
var plainBytes = [2]uint64{
	0xffffffff00000000 &^ (1<<'"' | 1<<'&' | 1<<'<' | 1<<'>'),
	0x7fffffffffffffff &^ (1 << ('\\' - 64)),
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
