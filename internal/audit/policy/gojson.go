package policy

import (
	"encoding"
	"encoding/base64"
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
	e := goEncoder{fields: map[reflect.Type][]goField{}, strs: map[string]*ast.Term{}}
	t, err := e.value(reflect.ValueOf(v), 0)
	if err != nil {
		return nil, err
	}
	return t.Value, nil
}

// goEncoder holds the struct layouts of one conversion and its short
// strings: a facts document repeats the same few hundred names and values
// thousands of times, and OPA's terms are immutable, so one term serves
// them all.
type goEncoder struct {
	fields map[reflect.Type][]goField
	strs   map[string]*ast.Term
}

// maxShared is the longest string shared between terms.
const maxShared = 64

func (e *goEncoder) str(s string) *ast.Term {
	if len(s) > maxShared {
		return ast.StringTerm(validUTF8(s))
	}
	if t, ok := e.strs[s]; ok {
		return t
	}
	t := ast.StringTerm(validUTF8(s))
	e.strs[s] = t
	return t
}

// goField is one JSON member of a struct: its name, the index path to it
// (through embedded structs) and its options.
type goField struct {
	name      string
	key       *ast.Term
	index     []int
	omitEmpty bool
	omitZero  bool
}

func (e *goEncoder) value(v reflect.Value, depth int) (*ast.Term, error) {
	if depth > maxJSONDepth {
		return nil, fmt.Errorf("encode input: nested too deep")
	}
	if !v.IsValid() {
		return ast.NullTerm(), nil
	}
	t := v.Type()
	if t.Kind() != reflect.Pointer && v.CanAddr() && reflect.PointerTo(t).Implements(jsonMarshaler) {
		return e.marshaler(v.Addr())
	}
	if t.Implements(jsonMarshaler) {
		if (t.Kind() == reflect.Pointer || t.Kind() == reflect.Interface) && v.IsNil() {
			return ast.NullTerm(), nil
		}
		return e.marshaler(v)
	}
	if t.Kind() != reflect.Pointer && v.CanAddr() && reflect.PointerTo(t).Implements(textMarshaler) {
		return textTerm(v.Addr())
	}
	if t.Implements(textMarshaler) {
		if (t.Kind() == reflect.Pointer || t.Kind() == reflect.Interface) && v.IsNil() {
			return ast.NullTerm(), nil
		}
		return textTerm(v)
	}
	switch t.Kind() {
	case reflect.Bool:
		return ast.InternedTerm(v.Bool()), nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return ast.NumberTerm(json.Number(strconv.FormatInt(v.Int(), 10))), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return ast.NumberTerm(json.Number(strconv.FormatUint(v.Uint(), 10))), nil
	case reflect.Float32, reflect.Float64:
		n, err := jsonFloat(v.Float(), t.Bits())
		if err != nil {
			return nil, err
		}
		return ast.NumberTerm(n), nil
	case reflect.String:
		return e.str(v.String()), nil
	case reflect.Interface, reflect.Pointer:
		if v.IsNil() {
			return ast.NullTerm(), nil
		}
		return e.value(v.Elem(), depth+1)
	case reflect.Slice:
		if v.IsNil() {
			return ast.NullTerm(), nil
		}
		if t.Elem().Kind() == reflect.Uint8 && !reflect.PointerTo(t.Elem()).Implements(jsonMarshaler) && !reflect.PointerTo(t.Elem()).Implements(textMarshaler) {
			return ast.StringTerm(base64.StdEncoding.EncodeToString(v.Bytes())), nil
		}
		return e.array(v, depth)
	case reflect.Array:
		return e.array(v, depth)
	case reflect.Map:
		if v.IsNil() {
			return ast.NullTerm(), nil
		}
		return e.mapping(v, depth)
	case reflect.Struct:
		return e.object(v, depth)
	}
	return nil, fmt.Errorf("encode input: unsupported type %s", t)
}

func (e *goEncoder) marshaler(v reflect.Value) (*ast.Term, error) {
	b, err := v.Interface().(json.Marshaler).MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("encode input: %w", err)
	}
	// encoding/json compacts and checks what a Marshaler writes.
	x, err := decodeJSON(b)
	if err != nil {
		return nil, fmt.Errorf("encode input: %s.MarshalJSON: %w", v.Type(), err)
	}
	return ast.NewTerm(x), nil
}

func textTerm(v reflect.Value) (*ast.Term, error) {
	b, err := v.Interface().(encoding.TextMarshaler).MarshalText()
	if err != nil {
		return nil, fmt.Errorf("encode input: %w", err)
	}
	return ast.StringTerm(validUTF8(string(b))), nil
}

func (e *goEncoder) array(v reflect.Value, depth int) (*ast.Term, error) {
	n := v.Len()
	if n == 0 {
		return ast.InternedEmptyArray, nil
	}
	elems := make([]*ast.Term, n)
	for i := range n {
		t, err := e.value(v.Index(i), depth+1)
		if err != nil {
			return nil, err
		}
		elems[i] = t
	}
	return ast.ArrayTerm(elems...), nil
}

func (e *goEncoder) mapping(v reflect.Value, depth int) (*ast.Term, error) {
	type kv struct {
		key string
		val reflect.Value
	}
	kvs := make([]kv, 0, v.Len())
	it := v.MapRange()
	for it.Next() {
		k, err := mapKey(it.Key())
		if err != nil {
			return nil, err
		}
		kvs = append(kvs, kv{k, it.Value()})
	}
	// encoding/json writes keys sorted; keys that collide once invalid
	// UTF-8 is repaired then keep the last, as decoding the output does.
	slices.SortFunc(kvs, func(a, b kv) int { return strings.Compare(a.key, b.key) })
	pairs := make([][2]*ast.Term, len(kvs))
	for i, p := range kvs {
		t, err := e.value(p.val, depth+1)
		if err != nil {
			return nil, err
		}
		pairs[i] = [2]*ast.Term{e.str(p.key), t}
	}
	if len(pairs) == 0 {
		return ast.InternedEmptyObject, nil
	}
	return ast.ObjectTerm(lastOfDuplicates(pairs)...), nil
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

func (e *goEncoder) object(v reflect.Value, depth int) (*ast.Term, error) {
	fields, err := e.layout(v.Type())
	if err != nil {
		return nil, err
	}
	pairs := make([][2]*ast.Term, 0, len(fields))
	for _, f := range fields {
		fv, ok := fieldByIndex(v, f.index)
		if !ok {
			continue // behind a nil embedded pointer
		}
		if f.omitEmpty && isEmpty(fv) || f.omitZero && isZero(fv) {
			continue
		}
		t, err := e.value(fv, depth+1)
		if err != nil {
			return nil, err
		}
		pairs = append(pairs, [2]*ast.Term{f.key, t})
	}
	return ast.ObjectTerm(pairs...), nil
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

// layout lists the JSON members of struct type t in encoding/json's
// order. Embedded structs' fields are promoted; a name two fields at the
// same depth claim is errNotJSONShaped (encoding/json's rules for it are
// subtle, and no amilint type has one).
func (e *goEncoder) layout(t reflect.Type) ([]goField, error) {
	if fs, ok := e.fields[t]; ok {
		return fs, nil
	}
	type candidate struct {
		goField
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
			cands = append(cands, candidate{f, depth})
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
		out = append(out, f)
	}
	// encoding/json orders members by index sequence.
	slices.SortStableFunc(out, func(a, b goField) int { return slices.Compare(a.index, b.index) })
	e.fields[t] = out
	return out, nil
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
