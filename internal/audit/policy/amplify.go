package policy

import (
	"errors"
	"math"
	"math/big"
	"runtime/metrics"
	"strconv"
	"strings"
	"unsafe"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/topdown"
)

// A step of OPA is not interrupted, and a few built-ins build, in one
// call, a result far larger than what the policy holds: concat or
// json.marshal of an array holding one large string a thousand times
// (the array holds a thousand pointers), sprintf with a width of a
// billion. Those built-ins are wrapped: under a memory budget, the size
// of their result is worked out from their operands first, and a result
// that would take the heap past twice the budget (where the watchdog
// stops any evaluation) is refused as the budget running out, before it
// is built: the same holds for bits.lsh, whose result grows with the
// value of an operand, not its size. Other built-ins grow their result at
// most a few hundred times over their operands, or check for
// cancellation as they go (numbers.range, replace); a call that goes on
// once stopped is given up (stuck.go).

// heapKey is the context key of an evaluation's heapBudget.
type heapKey struct{}

// heapBudget is what the wrapped built-ins check a result against.
type heapBudget struct {
	start, limit uint64
	over         func()
	// runaway is closed when, stopped, the evaluation goes on to hold
	// two budgets more (watchHeap, stuck.go).
	runaway chan struct{}
}

// errTooLarge is the wrapped built-ins' error: the evaluation is
// cancelled with ErrMemory as its cause, which is what Evaluate reports.
var errTooLarge = errors.New("result over the memory budget")

// room reports whether a result of n bytes keeps the heap within twice
// the budget. A result of at most an eighth of the budget is the
// watchdog's to judge, once it is built: a finding's message asks no
// reading of the heap.
func (b *heapBudget) room(n uint64) bool {
	if n <= b.limit/8 {
		return true
	}
	s := []metrics.Sample{{Name: heapObjects}}
	metrics.Read(s)
	held := s[0].Value.Uint64()
	if held > b.start {
		held -= b.start
	} else {
		held = 0
	}
	return n <= 2*b.limit && held+n <= 2*b.limit
}

// amplifiers are the wrapped built-ins and how each sizes its result.
var amplifiers = map[string]func(ops []*ast.Term) uint64{
	ast.Concat.Name:                 concatSize,
	ast.Sprintf.Name:                sprintfSize,
	ast.JSONMarshal.Name:            func(ops []*ast.Term) uint64 { return new(sizer).json(ops[0]) },
	ast.JSONMarshalWithOptions.Name: marshalWithOptionsSize,
	ast.YAMLMarshal.Name:            yamlSize,
	ast.BitsShiftLeft.Name:          shiftSize,
}

// shiftSize bounds what bits.lsh(x, s) builds: a number of bitlen(x)+s
// bits, then its decimal digits (0.3 a bit), and the scratch of writing
// them: five bytes for every eight bits.
func shiftSize(ops []*ast.Term) uint64 {
	if len(ops) < 2 {
		return 0
	}
	x, _ := ops[0].Value.(ast.Number)
	s, _ := ops[1].Value.(ast.Number)
	shift, err := strconv.ParseUint(string(s), 10, 64)
	if err != nil {
		// 1e3 and 8.0 are integers too, for OPA.
		f, ok := new(big.Float).SetString(string(s))
		if !ok || f.Sign() < 0 || !f.IsInt() {
			return 0 // OPA refuses it
		}
		u, acc := f.Uint64()
		if acc != big.Exact {
			u = math.MaxUint64 // past 64 bits: refused
		}
		shift = u
	}
	bits := sat(mul(uint64(len(x)), 4), shift) // a digit is under 4 bits
	return mul(bits/8+1, 5)
}

func init() {
	// Replacing OPA's implementations in its registry is done once, before
	// any evaluation can read it; the wrappers cost a context lookup when
	// no budget is set.
	for name, size := range amplifiers {
		orig := topdown.GetBuiltin(name)
		if orig == nil {
			continue
		}
		// OPA hands these an empty context unless told otherwise.
		if bi := ast.BuiltinMap[name]; bi != nil {
			bi.CanSkipBctx = false
		}
		topdown.RegisterBuiltinFunc(name, func(bctx topdown.BuiltinContext, ops []*ast.Term, iter func(*ast.Term) error) error {
			if bctx.Context == nil {
				return orig(bctx, ops, iter)
			}
			if b, ok := bctx.Context.Value(heapKey{}).(*heapBudget); ok && len(ops) > 0 {
				if !b.room(size(ops)) {
					// Halt: an error alone would make the call undefined
					// and the evaluation go on (OPA's non-strict
					// built-in errors) into the next package.
					b.over()
					return topdown.Halt{Err: errTooLarge}
				}
			}
			return orig(bctx, ops, iter)
		})
	}
}

// concatSize is the length of concat(delimiter, collection).
func concatSize(ops []*ast.Term) uint64 {
	if len(ops) < 2 {
		return 0
	}
	d, _ := ops[0].Value.(ast.String)
	var n, k uint64
	add := func(t *ast.Term) {
		if s, ok := t.Value.(ast.String); ok {
			n += uint64(len(s))
		}
		k++
	}
	switch c := ops[1].Value.(type) {
	case *ast.Array:
		c.Foreach(add)
	case ast.Set:
		c.Foreach(add)
	}
	if k > 0 {
		n += (k - 1) * uint64(len(d))
	}
	return n
}

// sprintfSize bounds the length of sprintf(format, values): the format;
// for each verb (a verb may name any value, %[2]v), every value written
// at most six times its JSON length (%q, %x) with its type (%!d(string=…),
// %!(EXTRA …)); and every width or precision the format names (with *,
// every integer value).
func sprintfSize(ops []*ast.Term) uint64 {
	if len(ops) < 2 {
		return 0
	}
	f, _ := ops[0].Value.(ast.String)
	n := uint64(len(f))
	sz := new(sizer)
	if a, ok := ops[1].Value.(*ast.Array); ok {
		var values uint64
		a.Foreach(func(t *ast.Term) { values = sat(values, sat(mul(6, sz.json(t)), 32)) })
		verbs := uint64(strings.Count(string(f), "%")) + 1
		n = sat(n, mul(verbs, values))
		if strings.Contains(string(f), "*") {
			a.Foreach(func(t *ast.Term) {
				if x, ok := t.Value.(ast.Number); ok {
					if i, ok := x.Int64(); ok {
						n = sat(n, uint64(max(i, -i)))
					}
				}
			})
		}
	}
	// Digits in a verb: flags, width, precision.
	for i := 0; i < len(f); i++ {
		if f[i] != '%' {
			continue
		}
		var num uint64
	verb:
		for i++; i < len(f); i++ {
			switch c := f[i]; {
			case c >= '0' && c <= '9':
				num = min(num*10+uint64(c-'0'), 1<<62)
			case strings.IndexByte("+-# .*[]", c) >= 0:
				n, num = sat(n, num), 0
			default:
				break verb
			}
		}
		n = sat(n, num)
	}
	return n
}

// numberSize bounds a number written out: OPA writes 1.5e300 with all
// its 301 digits.
func numberSize(x string) uint64 {
	n := uint64(len(x)) + 2
	if i := strings.IndexAny(x, "eE"); i >= 0 {
		if e, err := strconv.ParseInt(strings.TrimPrefix(x[i+1:], "+"), 10, 64); err == nil && e > 0 {
			n = sat(n, uint64(e))
		} else if err != nil {
			n = math.MaxUint64 // an exponent past int64: refused
		}
	}
	return n
}

// mul multiplies without wrapping.
func mul(a, b uint64) uint64 {
	if a != 0 && b > math.MaxUint64/a {
		return math.MaxUint64
	}
	return a * b
}

// sat adds without wrapping.
func sat(a, b uint64) uint64 {
	if a > math.MaxUint64-b {
		return math.MaxUint64
	}
	return a + b
}

// yamlSize bounds yaml.marshal(x): two spaces of indentation a level, a
// string at most four times its bytes (\x01, \U0001F600) and, in a block
// scalar, its level's indentation on each of its lines, and a final new
// line.
func yamlSize(ops []*ast.Term) uint64 {
	return sat((&sizer{yaml: true}).json(ops[0]), 1)
}

// marshalWithOptionsSize sizes json.marshal_with_options(x, opts): pretty
// output adds, per line, the prefix and the indent once per level.
func marshalWithOptionsSize(ops []*ast.Term) uint64 {
	indent, prefix, pretty := "\t", "", false
	if len(ops) > 1 {
		if o, ok := ops[1].Value.(ast.Object); ok {
			o.Foreach(func(k, v *ast.Term) {
				key, _ := k.Value.(ast.String)
				s, _ := v.Value.(ast.String)
				switch key {
				case "indent":
					indent, pretty = string(s), true
				case "prefix":
					prefix, pretty = string(s), true
				case "pretty":
					if b, ok := v.Value.(ast.Boolean); ok {
						pretty = bool(b)
					}
				}
			})
		}
	}
	sz := new(sizer)
	if pretty {
		sz.line, sz.indent = uint64(len(prefix))+1, uint64(len(indent))
	}
	return sz.json(ops[0])
}

// sizer bounds the bytes a term takes written as JSON, or as YAML (two
// spaces of indentation a level). A long string is scanned for what JSON
// escapes once however often the term holds it, and a collection is sized
// once per level however often it is held there: a term that nests
// references a billion strings deep is sized in the time it takes to walk
// what it holds. The memos are made on first use: most calls (a finding's
// message) size a few short strings.
type sizer struct {
	line, indent uint64 // per element: a new line and the indentation of each level
	yaml         bool   // strings as YAML writes them, two spaces a level
	escaped      map[stringKey]uint64
	sized        map[valueKey]uint64
}

type stringKey struct {
	p *byte
	n int
}

type valueKey struct {
	v     ast.Value
	depth uint64
}

// memoFrom is the length from which a string's size is remembered.
const memoFrom = 1 << 10

func (z *sizer) json(t *ast.Term) uint64 {
	return sat(z.line, z.size(t.Value, 0))
}

func (z *sizer) size(v ast.Value, depth uint64) uint64 {
	switch x := v.(type) {
	case ast.String:
		if z.yaml {
			lines := uint64(strings.Count(string(x), "\n"))
			return sat(mul(4, uint64(len(x))), sat(4, mul(lines, (depth+1)*2+1)))
		}
		return z.str(string(x))
	case ast.Number:
		return numberSize(string(x))
	case ast.Boolean, ast.Null:
		return 5
	case *ast.Array, ast.Set, ast.Object:
	default:
		return uint64(len(v.String()))
	}
	k := valueKey{v, depth}
	if n, ok := z.sized[k]; ok {
		return n
	}
	// An element: its separator, a new line and the indentation of its
	// level; the closing bracket: its own line.
	level := z.indent
	if z.yaml {
		level += 2
	}
	per := sat(1+z.line, (depth+1)*level)
	n := sat(2, per)
	elem := func(m uint64) { n = sat(n, sat(m, per)) }
	switch x := v.(type) {
	case *ast.Array:
		x.Foreach(func(t *ast.Term) { elem(z.size(t.Value, depth+1)) })
	case ast.Set:
		x.Foreach(func(t *ast.Term) { elem(z.size(t.Value, depth+1)) })
	case ast.Object:
		x.Foreach(func(key, t *ast.Term) {
			elem(sat(z.size(key.Value, depth+1)+2, z.size(t.Value, depth+1)))
		})
	}
	if z.sized == nil {
		z.sized = map[valueKey]uint64{}
	}
	z.sized[k] = n
	return n
}

// str is the length of s as a JSON string: quotes, and six bytes for each
// byte JSON escapes as \uXXXX (two for the short escapes; counted as six).
func (z *sizer) str(s string) uint64 {
	k := stringKey{unsafe.StringData(s), len(s)}
	if n, ok := z.escaped[k]; ok {
		return n
	}
	n := uint64(len(s)) + 2
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			n += 5
		}
	}
	if len(s) >= memoFrom {
		if z.escaped == nil {
			z.escaped = map[stringKey]uint64{}
		}
		z.escaped[k] = n
	}
	return n
}
