package policy

import (
	"encoding"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/open-policy-agent/opa/v1/ast"
)

// errNotJSONShaped reports a Go value whose JSON form goValue does not
// build itself (a ",string" option, conflicting embedded fields); the
// caller goes through encoding/json instead.
var errNotJSONShaped = errors.New("not a plain JSON-shaped value")

var (
	jsonMarshaler = reflect.TypeFor[json.Marshaler]()
	textMarshaler = reflect.TypeFor[encoding.TextMarshaler]()
)

// goValue builds the Rego value of v's JSON form directly, without
// encoding/json's bytes and their parsing: the facts document is converted
// for every evaluation, and this is its largest fixed cost. The value is
// the one encoding/json's output decodes to, field names, omitempty,
// Marshalers and the repair of invalid UTF-8 included (the tests compare
// the two on every document type amilint evaluates).
func goValue(v any) (ast.Value, error) {
	e := newGoEncoder()
	rv := reflect.ValueOf(v)
	if !rv.IsValid() {
		return ast.NullValue, nil
	}
	n, err := e.value(rv, e.typ(rv.Type()), 0)
	if err != nil {
		return nil, err
	}
	return n.t.Value, nil
}

// goEncoder holds what one conversion learnt of the types it met and the
// terms it shares. A facts document repeats the same values thousands of
// times (the 81 security checks of every service differ in a few of their
// members from one service to the next), and OPA's terms are immutable,
// so one term serves every equal value: each value shared gets a number,
// and an object or array whose members all have one is looked up by
// their numbers before it is built (hash-consing). Of the Debian root's
// 11,138 objects, 1,339 are built.
type goEncoder struct {
	types  map[reflect.Type]*goType
	strs   map[string]strNode
	nums   map[string]node
	shared map[string]node
	next   uint32
	// ids and terms are stacks of the members of the objects and arrays
	// being built, each value pushing its members above its parent's.
	ids   []uint64
	terms []*ast.Term
	key   []byte
	pairs [][2]*ast.Term
	// split: a large map may be converted in two halves side by side
	// (prunedMapSplit); set for the first one of a conversion.
	split bool
}

func newGoEncoder() *goEncoder {
	return &goEncoder{
		types:  map[reflect.Type]*goType{},
		strs:   map[string]strNode{},
		nums:   map[string]node{},
		shared: map[string]node{},
		next:   firstID,
	}
}

// node is a term and, when it is shared, its number (0: not shared, its
// value may be equal to another's).
type node struct {
	t  *ast.Term
	id uint32
}

// The numbers of the values every conversion shares.
const (
	idNull uint32 = iota + 1
	idFalse
	idTrue
	idEmptyArray
	idEmptyObject
	firstID
)

var (
	nullNode        = node{ast.InternedNullTerm, idNull}
	emptyArrayNode  = node{ast.InternedEmptyArray, idEmptyArray}
	emptyObjectNode = node{ast.InternedEmptyObject, idEmptyObject}
)

func boolNode(b bool) node {
	if b {
		return node{ast.InternedTerm(true), idTrue}
	}
	return node{ast.InternedTerm(false), idFalse}
}

func (e *goEncoder) id() uint32 {
	e.next++
	return e.next - 1
}

// strNode is a string's node and whether its invalid UTF-8 was repaired.
type strNode struct {
	node
	repaired bool
}

func (e *goEncoder) str(s string) node { return e.strRepaired(s).node }

func (e *goEncoder) strRepaired(s string) strNode {
	if n, ok := e.strs[s]; ok {
		return n
	}
	r := validUTF8(s)
	n := strNode{node{ast.StringTerm(r), e.id()}, r != s}
	e.strs[s] = n
	return n
}

func (e *goEncoder) num(s string) node {
	if n, ok := e.nums[s]; ok {
		return n
	}
	n := node{ast.NumberTerm(json.Number(s)), e.id()}
	e.nums[s] = n
	return n
}

// goType is what encoding/json does with the values of one type, worked
// out once per conversion (asking the method sets per value was a tenth
// of the work).
type goType struct {
	t    reflect.Type
	kind reflect.Kind
	// addrJSON and addrText: the pointer's Marshaler, used when the value
	// is addressable; json and text: the type's own.
	addrJSON, json, addrText, text bool
	// elem is the element type of a pointer, slice, array or map.
	elem *goType
	// bytes: a []byte, written in base64.
	bytes bool
	// fields are a struct's JSON members (err: it has a layout goValue
	// leaves to encoding/json).
	fields []goField
	err    error
	// byAddr: a value of this type reached through an addressable value
	// may use a pointer Marshaler somewhere inside (it, or a field or
	// element stored in it).
	byAddr bool
	// marshaled remembers what the Marshaler of a scalar type wrote, by
	// value: security.Tenths and facts.Seconds see nothing else.
	marshaled map[uint64]node
}

// goField is one JSON member of a struct: its name, the index path to it
// (through embedded structs), its type and its options.
type goField struct {
	name      string
	key       node
	index     []int
	typ       *goType
	omitEmpty bool
	omitZero  bool
}

func (e *goEncoder) typ(t reflect.Type) *goType {
	if g, ok := e.types[t]; ok {
		return g
	}
	k := t.Kind()
	g := &goType{t: t, kind: k,
		addrJSON: k != reflect.Pointer && reflect.PointerTo(t).Implements(jsonMarshaler),
		json:     t.Implements(jsonMarshaler),
		addrText: k != reflect.Pointer && reflect.PointerTo(t).Implements(textMarshaler),
		text:     t.Implements(textMarshaler),
	}
	e.types[t] = g // before the elements: a type may refer to itself
	// byAddr follows what a value holds by value only, which has no cycle,
	// so it never reads a goType still being filled in (as an element's
	// below may be: the type that refers to itself).
	g.byAddr = byAddr(t)
	switch k {
	case reflect.Pointer, reflect.Slice, reflect.Array, reflect.Map:
		g.elem = e.typ(t.Elem())
		g.bytes = k == reflect.Slice && t.Elem().Kind() == reflect.Uint8 && !g.elem.addrJSON && !g.elem.addrText
	case reflect.Struct:
		g.fields, g.err = e.layout(t)
	}
	if g.json && kindScalar(k) {
		g.marshaled = map[uint64]node{}
	}
	return g
}

// byAddr reports whether a value of type t, or a field or array element
// stored in it, has a Marshaler only its pointer has: what it writes then
// depends on whether the value is addressable. Every field counts, even
// one encoding/json skips: the answer only has to be safe.
func byAddr(t reflect.Type) bool {
	if t.Kind() != reflect.Pointer && t.Kind() != reflect.Interface {
		pt := reflect.PointerTo(t)
		for _, m := range []reflect.Type{jsonMarshaler, textMarshaler} {
			if pt.Implements(m) && !t.Implements(m) {
				return true
			}
		}
	}
	switch t.Kind() {
	case reflect.Array:
		return byAddr(t.Elem())
	case reflect.Struct:
		for i := range t.NumField() {
			if byAddr(t.Field(i).Type) {
				return true
			}
		}
	}
	return false
}

func kindScalar(k reflect.Kind) bool {
	switch k {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64:
		return true
	}
	return false
}

// scalarBits is a value of a scalar kind as a map key.
func scalarBits(v reflect.Value) uint64 {
	switch v.Kind() {
	case reflect.Bool:
		if v.Bool() {
			return 1
		}
		return 0
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return uint64(v.Int())
	case reflect.Float32, reflect.Float64:
		return math.Float64bits(v.Float())
	}
	return v.Uint()
}

// value is the node of v, of type g. v's type is g's unless g is an
// interface.
func (e *goEncoder) value(v reflect.Value, g *goType, depth int) (node, error) {
	if depth > maxJSONDepth {
		return node{}, fmt.Errorf("encode input: nested too deep")
	}
	if g.addrJSON && v.CanAddr() {
		return e.marshaler(v.Addr(), g)
	}
	if g.json {
		if (g.kind == reflect.Pointer || g.kind == reflect.Interface) && v.IsNil() {
			return nullNode, nil
		}
		return e.marshaler(v, g)
	}
	if g.addrText && v.CanAddr() {
		return e.text(v.Addr())
	}
	if g.text {
		if (g.kind == reflect.Pointer || g.kind == reflect.Interface) && v.IsNil() {
			return nullNode, nil
		}
		return e.text(v)
	}
	switch g.kind {
	case reflect.Bool:
		return boolNode(v.Bool()), nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return e.num(strconv.FormatInt(v.Int(), 10)), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return e.num(strconv.FormatUint(v.Uint(), 10)), nil
	case reflect.Float32, reflect.Float64:
		n, err := jsonFloat(v.Float(), g.t.Bits())
		if err != nil {
			return node{}, err
		}
		return e.num(string(n)), nil
	case reflect.String:
		return e.str(v.String()), nil
	case reflect.Interface:
		if v.IsNil() {
			return nullNode, nil
		}
		x := v.Elem()
		return e.value(x, e.typ(x.Type()), depth+1)
	case reflect.Pointer:
		if v.IsNil() {
			return nullNode, nil
		}
		return e.value(v.Elem(), g.elem, depth+1)
	case reflect.Slice:
		if v.IsNil() {
			return nullNode, nil
		}
		if g.bytes {
			return e.str(base64.StdEncoding.EncodeToString(v.Bytes())), nil
		}
		return e.array(v, g, depth)
	case reflect.Array:
		return e.array(v, g, depth)
	case reflect.Map:
		if v.IsNil() {
			return nullNode, nil
		}
		return e.mapping(v, g, depth)
	case reflect.Struct:
		return e.object(v, g, depth)
	}
	return node{}, fmt.Errorf("encode input: unsupported type %s", g.t)
}

// marshaler is the value of what v's MarshalJSON writes. That of a scalar
// type is remembered by value.
func (e *goEncoder) marshaler(v reflect.Value, g *goType) (node, error) {
	s := v
	if s.Kind() == reflect.Pointer {
		s = s.Elem() // a pointer Marshaler of an addressable value
	}
	memo := g.marshaled
	if memo == nil && g.kind == reflect.Pointer && !v.IsNil() && g.elem.json {
		memo = g.elem.marshaled // *T where T has the method: the same one
	}
	var bits uint64
	if memo != nil {
		bits = scalarBits(s)
		if n, ok := memo[bits]; ok {
			return n, nil
		}
	}
	b, err := v.Interface().(json.Marshaler).MarshalJSON()
	if err != nil {
		return node{}, fmt.Errorf("encode input: %w", err)
	}
	// encoding/json compacts and checks what a Marshaler writes.
	x, err := decodeJSON(b)
	if err != nil {
		return node{}, fmt.Errorf("encode input: %s.MarshalJSON: %w", v.Type(), err)
	}
	if memo == nil {
		return node{t: ast.NewTerm(x)}, nil
	}
	n := node{ast.NewTerm(x), e.id()}
	memo[bits] = n
	return n, nil
}

func (e *goEncoder) text(v reflect.Value) (node, error) {
	b, err := v.Interface().(encoding.TextMarshaler).MarshalText()
	if err != nil {
		return node{}, fmt.Errorf("encode input: %w", err)
	}
	return e.str(string(b)), nil
}

// push puts a member on the stacks: its key (for an object) and value.
func (e *goEncoder) push(key, val node) {
	if key.t != nil {
		e.terms = append(e.terms, key.t)
	}
	e.terms = append(e.terms, val.t)
	e.ids = append(e.ids, uint64(key.id)<<32|uint64(val.id))
}

func (e *goEncoder) array(v reflect.Value, g *goType, depth int) (node, error) {
	n := v.Len()
	if n == 0 {
		return emptyArrayNode, nil
	}
	base, tbase := len(e.ids), len(e.terms)
	for i := range n {
		x, err := e.value(v.Index(i), g.elem, depth+1)
		if err != nil {
			return node{}, err
		}
		e.push(node{}, x)
	}
	return e.share('a', base, tbase), nil
}

func (e *goEncoder) mapping(v reflect.Value, g *goType, depth int) (node, error) {
	if v.Len() == 0 {
		return emptyObjectNode, nil
	}
	kt := g.t.Key()
	if kt.Kind() != reflect.String || g.elem.byAddr {
		return e.mappingSorted(v, g, depth)
	}
	// The map's own order: no key can collide with another unless its
	// invalid UTF-8 is repaired, and the members' numbers are sorted to
	// key the object. Keys and values are read into one variable each
	// (reflect copies them otherwise): neither is addressable in a map,
	// and byAddr says no Marshaler would see the difference.
	base, tbase := len(e.ids), len(e.terms)
	key := reflect.New(kt).Elem()
	val := reflect.New(g.t.Elem()).Elem()
	var it reflect.MapIter
	it.Reset(v)
	for it.Next() {
		key.SetIterKey(&it)
		k := e.strRepaired(key.String())
		if k.repaired {
			e.ids, e.terms = e.ids[:base], e.terms[:tbase]
			return e.mappingSorted(v, g, depth)
		}
		val.SetIterValue(&it)
		x, err := e.value(val, g.elem, depth+1)
		if err != nil {
			return node{}, err
		}
		e.push(k.node, x)
	}
	slices.Sort(e.ids[base:])
	return e.share('o', base, tbase), nil
}

// mappingSorted is a map whose keys may collide as encoding/json writes
// them (repaired UTF-8, TextMarshaler keys): encoding/json writes keys
// sorted, and decoding the output keeps the last of equal keys.
func (e *goEncoder) mappingSorted(v reflect.Value, g *goType, depth int) (node, error) {
	type kv struct {
		key string
		val reflect.Value
	}
	kvs := make([]kv, 0, v.Len())
	it := v.MapRange()
	for it.Next() {
		k, err := mapKey(it.Key())
		if err != nil {
			return node{}, err
		}
		kvs = append(kvs, kv{k, it.Value()})
	}
	slices.SortFunc(kvs, func(a, b kv) int { return strings.Compare(a.key, b.key) })
	pairs := make([][2]*ast.Term, len(kvs))
	for i, p := range kvs {
		x, err := e.value(p.val, g.elem, depth+1)
		if err != nil {
			return node{}, err
		}
		pairs[i] = [2]*ast.Term{e.str(p.key).t, x.t}
	}
	return node{t: ast.ObjectTerm(lastOfDuplicates(pairs)...)}, nil
}

func (e *goEncoder) object(v reflect.Value, g *goType, depth int) (node, error) {
	if g.err != nil {
		return node{}, g.err
	}
	base, tbase := len(e.ids), len(e.terms)
	for _, f := range g.fields {
		fv, ok := fieldByIndex(v, f.index)
		if !ok {
			continue // behind a nil embedded pointer
		}
		if f.omitEmpty && isEmpty(fv) || f.omitZero && isZero(fv) {
			continue
		}
		x, err := e.value(fv, f.typ, depth+1)
		if err != nil {
			return node{}, err
		}
		e.push(f.key, x)
	}
	if len(e.ids) == base {
		return emptyObjectNode, nil
	}
	return e.share('o', base, tbase), nil
}

// share pops the members of an object or array off the stacks and is its
// term: the one built before for the same member numbers, or a new one,
// remembered. A member with no number makes its parent unshared.
func (e *goEncoder) share(kind byte, base, tbase int) node {
	ids, terms := e.ids[base:], e.terms[tbase:]
	defer func() { e.ids, e.terms = e.ids[:base], e.terms[:tbase] }()
	shared := true
	for _, id := range ids {
		if uint32(id) == 0 {
			shared = false
			break
		}
	}
	var key []byte
	if shared {
		key = append(e.key[:0], kind)
		for _, id := range ids {
			key = binary.LittleEndian.AppendUint64(key, id)
		}
		e.key = key
		if n, ok := e.shared[string(key)]; ok {
			return n
		}
	}
	var t *ast.Term
	if kind == 'a' {
		t = ast.ArrayTerm(slices.Clone(terms)...)
	} else {
		pairs := e.pairs[:0]
		for i := 0; i < len(terms); i += 2 {
			pairs = append(pairs, [2]*ast.Term{terms[i], terms[i+1]})
		}
		e.pairs = pairs
		t = ast.ObjectTerm(pairs...)
	}
	if !shared {
		return node{t: t}
	}
	n := node{t, e.id()}
	e.shared[string(key)] = n
	return n
}

// layout lists the JSON members of struct type t in encoding/json's
// order. Embedded structs' fields are promoted; a name two fields at the
// same depth claim is errNotJSONShaped (encoding/json's rules for it are
// subtle, and no amilint type has one).
func (e *goEncoder) layout(t reflect.Type) ([]goField, error) {
	type candidate struct {
		goField
		ft    reflect.Type
		depth int
	}
	var cands []candidate
	var walk func(t reflect.Type, index []int, depth int, seen []reflect.Type) error
	walk = func(t reflect.Type, index []int, depth int, seen []reflect.Type) error {
		if slices.Contains(seen, t) {
			return nil
		}
		seen = append(seen, t)
		for i := range t.NumField() {
			sf := t.Field(i)
			tag := sf.Tag.Get("json")
			if tag == "-" {
				continue
			}
			name, opts, _ := strings.Cut(tag, ",")
			ft := sf.Type
			if sf.Anonymous {
				if ft.Kind() == reflect.Pointer {
					ft = ft.Elem()
				}
				if !sf.IsExported() && ft.Kind() != reflect.Struct {
					continue
				}
				if name == "" && ft.Kind() == reflect.Struct {
					if err := walk(ft, append(slices.Clone(index), i), depth+1, seen); err != nil {
						return err
					}
					continue
				}
			} else if !sf.IsExported() {
				continue
			}
			f := goField{name: name, index: append(slices.Clone(index), i)}
			if f.name == "" {
				f.name = sf.Name
			}
			for o := range strings.SplitSeq(opts, ",") {
				switch o {
				case "omitempty":
					f.omitEmpty = true
				case "omitzero":
					f.omitZero = true
				case "string":
					return errNotJSONShaped
				}
			}
			cands = append(cands, candidate{f, sf.Type, depth})
		}
		return nil
	}
	if err := walk(t, nil, 0, nil); err != nil {
		return nil, err
	}
	// Of fields claiming one name, the shallowest wins; two at that depth
	// is a conflict encoding/json resolves by tags, which this leaves to it.
	best := map[string]int{}
	for i, c := range cands {
		j, ok := best[c.name]
		switch {
		case !ok || c.depth < cands[j].depth:
			best[c.name] = i
		case c.depth == cands[j].depth:
			return nil, errNotJSONShaped
		}
	}
	out := make([]goField, 0, len(best))
	for _, i := range best {
		f := cands[i].goField
		f.key = e.str(f.name)
		f.typ = e.typ(cands[i].ft)
		out = append(out, f)
	}
	// encoding/json orders members by index sequence.
	slices.SortStableFunc(out, func(a, b goField) int { return slices.Compare(a.index, b.index) })
	return out, nil
}

// mapKey is a map key as encoding/json spells it.
func mapKey(k reflect.Value) (string, error) {
	if k.Kind() == reflect.String {
		return k.String(), nil
	}
	if k.Type().Implements(textMarshaler) {
		if k.Kind() == reflect.Pointer && k.IsNil() {
			return "", nil
		}
		b, err := k.Interface().(encoding.TextMarshaler).MarshalText()
		if err != nil {
			return "", fmt.Errorf("encode input: %w", err)
		}
		return string(b), nil
	}
	switch k.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.FormatInt(k.Int(), 10), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return strconv.FormatUint(k.Uint(), 10), nil
	}
	return "", fmt.Errorf("encode input: unsupported map key type %s", k.Type())
}

func fieldByIndex(v reflect.Value, index []int) (reflect.Value, bool) {
	for i, x := range index {
		if i > 0 && v.Kind() == reflect.Pointer {
			if v.IsNil() {
				return reflect.Value{}, false
			}
			v = v.Elem()
		}
		v = v.Field(x)
	}
	return v, true
}

func isEmpty(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Array, reflect.Map, reflect.Slice, reflect.String:
		return v.Len() == 0
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Interface, reflect.Pointer:
		return v.IsZero()
	}
	return false
}

func isZero(v reflect.Value) bool {
	if z, ok := v.Interface().(interface{ IsZero() bool }); ok {
		if (v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface) && v.IsNil() {
			return true
		}
		return z.IsZero()
	}
	return v.IsZero()
}

// jsonFloat spells f as encoding/json does (ES6 number formatting).
func jsonFloat(f float64, bits int) (json.Number, error) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return "", fmt.Errorf("encode input: unsupported value %s", strconv.FormatFloat(f, 'g', -1, bits))
	}
	format := byte('f')
	if a := math.Abs(f); a != 0 {
		if bits == 64 && (a < 1e-6 || a >= 1e21) || bits == 32 && (float32(a) < 1e-6 || float32(a) >= 1e21) {
			format = 'e'
		}
	}
	b := strconv.AppendFloat(nil, f, format, -1, bits)
	if format == 'e' {
		// clean up e-09 to e-9
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return json.Number(b), nil
}

// validUTF8 replaces each byte of s that is not part of valid UTF-8 with
// U+FFFD, as encoding/json does.
func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			b.WriteString("\uFFFD")
		} else {
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}
