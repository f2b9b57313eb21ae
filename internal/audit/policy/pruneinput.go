package policy

import (
	"reflect"
	"runtime"
	"slices"
	"sync"
	"unicode/utf8"

	"github.com/open-policy-agent/opa/v1/ast"
)

// prune says what of a value an input leaves out.
type prune struct {
	// drop: the value, a member of an object, is left out.
	drop bool
	// members, when there are any, prune the value's members by name (JSON
	// names, map keys); "*" prunes every member without an entry of its
	// own. A member without an entry is kept whole.
	members map[string]prune
}

var (
	dropped = prune{drop: true}
	whole   = prune{}
)

func membersOf(m map[string]prune) prune { return prune{members: m} }

// unreadByCatalog is what of the facts document the built-in catalog
// never reads: of every unit, the 81 security checks of a service (most
// of the document; the catalog reads units.NAME.security's exposure,
// level and top), the directives but Install's DefaultInstance and
// Mount's What and Where, and the members no catalog module names. TestCatalogReadsNoneOfWhatItIsNotGiven
// holds the catalog to it. When the catalog is all an engine evaluates,
// its input leaves them out; a user's policy (--policy) gets the whole
// document. It is built on first use, not at every program start.
//
// OPA's ast.LazyObject, which converts a member when it is first read,
// does not serve instead: a lazy object inside an ordinary one is
// converted whole when its parent is built (objects hash their members),
// any function call with a unit as argument converts that unit (the call
// cache hashes arguments: the catalog's exposure rule alone converted the
// checks of more services than the Debian root has), and OPA hands a lazy
// object's native Go map, unconverted, to whatever reads the results.
var unreadByCatalog = sync.OnceValue(func() prune {
	return membersOf(map[string]prune{"units": membersOf(map[string]prune{"*": membersOf(map[string]prune{
		"security": membersOf(map[string]prune{"checks": dropped, "notes": dropped}),
		"directives": membersOf(map[string]prune{
			"Install": membersOf(map[string]prune{"DefaultInstance": whole, "*": dropped}),
			"Mount":   membersOf(map[string]prune{"What": whole, "Where": whole, "*": dropped}),
			"*":       dropped,
		}),
		"fragment":          dropped,
		"drop_ins":          dropped,
		"aliases":           dropped,
		"conditions":        dropped,
		"would_run":         dropped,
		"type":              dropped,
		"exec_start_pre":    dropped,
		"user":              dropped,
		"group":             dropped,
		"dynamic_user":      dropped,
		"environment_files": dropped,
		"sandboxing":        dropped,
		"wants":             dropped,
		"requires":          dropped,
		"after":             dropped,
		"wanted_by":         dropped,
		"problems":          dropped,
	})})})
})

// tree is p as JSON-shaped values, for tests: a dropped member is nil, a
// whole one true, a pruned one the tree of its members.
func (p prune) tree() any {
	switch {
	case p.drop:
		return nil
	case len(p.members) == 0:
		return true
	}
	out := make(map[string]any, len(p.members))
	for k, m := range p.members {
		out[k] = m.tree()
	}
	return out
}

// prunedGoValue is goValue(v) pruned by path. Where the path meets a value
// whose JSON form goValue does not build member by member (a Marshaler,
// map keys that may collide once invalid UTF-8 is repaired), that value is
// whole.
func prunedGoValue(v any, path prune) (ast.Value, error) {
	if len(path.members) == 0 {
		return goValue(v)
	}
	e := newGoEncoder()
	e.split = runtime.GOMAXPROCS(0) > 1
	rv := reflect.ValueOf(v)
	if !rv.IsValid() {
		return ast.NullValue, nil
	}
	n, err := e.pruned(rv, e.typ(rv.Type()), path, 0)
	if err != nil {
		return nil, err
	}
	return n.t.Value, nil
}

// pruned is the node of v (of type g) pruned by path, which has members.
func (e *goEncoder) pruned(v reflect.Value, g *goType, path prune, depth int) (node, error) {
	for g.kind == reflect.Pointer || g.kind == reflect.Interface {
		if depth > maxJSONDepth || g.json || g.text || v.IsNil() {
			return e.value(v, g, depth)
		}
		v, depth = v.Elem(), depth+1
		if g.kind == reflect.Interface {
			g = e.typ(v.Type())
		} else {
			g = g.elem
		}
	}
	if depth > maxJSONDepth || g.json || g.text || v.CanAddr() && (g.addrJSON || g.addrText) {
		return e.value(v, g, depth)
	}
	switch g.kind {
	case reflect.Struct:
		if g.err != nil {
			return node{}, g.err
		}
		base, tbase := len(e.ids), len(e.terms)
		for _, f := range g.fields {
			fv, ok := fieldByIndex(v, f.index)
			if !ok || f.omitEmpty && isEmpty(fv) || f.omitZero && isZero(fv) {
				continue
			}
			x, keep, err := e.prunedMember(fv, f.typ, f.name, path, depth)
			if err != nil {
				return node{}, err
			}
			if keep {
				e.push(f.key, x)
			}
		}
		if len(e.ids) == base {
			return emptyObjectNode, nil
		}
		return e.share('o', base, tbase), nil
	case reflect.Map:
		if g.t.Key().Kind() != reflect.String || v.IsNil() || v.Len() == 0 {
			return e.value(v, g, depth)
		}
		for it := v.MapRange(); it.Next(); {
			if !utf8.ValidString(it.Key().String()) {
				return e.value(v, g, depth) // keys that may collide once repaired
			}
		}
		if e.split && v.Len() >= splitMapMin {
			return e.prunedMapSplit(v, g, path, depth)
		}
		base, tbase := len(e.ids), len(e.terms)
		for it := v.MapRange(); it.Next(); {
			k := it.Key().String()
			x, keep, err := e.prunedMember(it.Value(), g.elem, k, path, depth)
			if err != nil {
				return node{}, err
			}
			if keep {
				e.push(e.str(k), x)
			}
		}
		if len(e.ids) == base {
			return emptyObjectNode, nil
		}
		slices.Sort(e.ids[base:]) // the map's order: the members' numbers key the object
		return e.share('o', base, tbase), nil
	}
	return e.value(v, g, depth)
}

// splitMapMin is the size from which prunedMapSplit converts a map: the
// units of a facts document (hundreds), not the maps inside a unit.
const splitMapMin = 64

// prunedMapSplit is the pruned node of map v (of type g, string keys of
// valid UTF-8) converted in two halves side by side, the second by an
// encoder of its own (an encoder and its type plans are one goroutine's):
// the conversion of the catalog's input runs between the facts and the
// evaluation, on one core while the other waits. Once per conversion; the
// object is not shared, which costs its parent nothing it would share.
func (e *goEncoder) prunedMapSplit(v reflect.Value, g *goType, path prune, depth int) (node, error) {
	e.split = false
	keys := v.MapKeys()
	half := len(keys) / 2
	var (
		other    [][2]*ast.Term
		otherErr error
		wg       sync.WaitGroup
	)
	wg.Go(func() {
		w := newGoEncoder()
		other, otherErr = w.prunedPairs(v, w.typ(g.t), path, depth, keys[half:])
	})
	pairs, err := e.prunedPairs(v, g, path, depth, keys[:half])
	wg.Wait()
	if err == nil {
		err = otherErr
	}
	if err != nil {
		return node{}, err
	}
	pairs = append(pairs, other...)
	if len(pairs) == 0 {
		return emptyObjectNode, nil
	}
	return node{t: ast.ObjectTerm(pairs...)}, nil
}

// prunedPairs is the members of map v (of type g) under keys, pruned by
// path, as key and value terms.
func (e *goEncoder) prunedPairs(v reflect.Value, g *goType, path prune, depth int, keys []reflect.Value) ([][2]*ast.Term, error) {
	out := make([][2]*ast.Term, 0, len(keys))
	for _, k := range keys {
		x, keep, err := e.prunedMember(v.MapIndex(k), g.elem, k.String(), path, depth)
		if err != nil {
			return nil, err
		}
		if keep {
			out = append(out, [2]*ast.Term{e.str(k.String()).t, x.t})
		}
	}
	return out, nil
}

// prunedMember is the node of member name (value v, of type g) of an
// object pruned by path, and whether it is kept.
func (e *goEncoder) prunedMember(v reflect.Value, g *goType, name string, path prune, depth int) (node, bool, error) {
	sub, on := path.members[name]
	if !on {
		sub = path.members["*"]
	}
	if sub.drop {
		return node{}, false, nil
	}
	if len(sub.members) == 0 {
		n, err := e.value(v, g, depth+1)
		return n, true, err
	}
	n, err := e.pruned(v, g, sub, depth+1)
	return n, true, err
}
