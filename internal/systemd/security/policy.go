package security

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
)

// ErrPolicy reports a security policy file that is not valid JSON.
var ErrPolicy = errors.New("invalid security policy")

// Policy is a systemd-analyze security policy (--security-policy): per
// check, keyed by its json_field, an object that may override "weight",
// "range", "description_good", "description_bad" and "description_na".
// Values of the wrong type are ignored, as systemd ignores them; a weight
// of 0 excludes the check.
type Policy struct {
	checks map[string]policyItem
	// Ignored lists what systemd ignores in the file, for the user.
	Ignored []string
}

type policyItem struct {
	weight, rng               *uint64
	descGood, descBad, descNA *string
}

// ParsePolicy reads a policy as systemd's JSON parser and
// security_assessor_find_in_policy do: the first of duplicate keys wins, a
// policy or item that is not an object is ignored, a weight or range that
// is not an unsigned integer (or an integral real) is ignored.
func ParsePolicy(b []byte) (*Policy, error) {
	v, err := decodeOrdered(b)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrPolicy, err)
	}
	p := &Policy{checks: map[string]policyItem{}}
	obj, ok := v.(orderedObject)
	if !ok {
		p.Ignored = append(p.Ignored, "the policy is not a JSON object")
		return p, nil
	}
	for _, kv := range obj {
		if _, dup := p.checks[kv.key]; dup {
			continue
		}
		item, ok := kv.value.(orderedObject)
		if !ok {
			p.Ignored = append(p.Ignored, fmt.Sprintf("%s: not an object", kv.key))
			p.checks[kv.key] = policyItem{}
			continue
		}
		var it policyItem
		seen := map[string]bool{}
		for _, f := range item {
			if seen[f.key] {
				continue
			}
			seen[f.key] = true
			switch f.key {
			case "weight", "range":
				n, ok := unsignedOf(f.value)
				if !ok {
					p.Ignored = append(p.Ignored, fmt.Sprintf("%s.%s: not an unsigned integer", kv.key, f.key))
					continue
				}
				if f.key == "weight" {
					it.weight = &n
				} else {
					it.rng = &n
				}
			case "description_good", "description_bad", "description_na":
				s, ok := f.value.(string)
				if !ok {
					p.Ignored = append(p.Ignored, fmt.Sprintf("%s.%s: not a string", kv.key, f.key))
					continue
				}
				switch f.key {
				case "description_good":
					it.descGood = &s
				case "description_bad":
					it.descBad = &s
				default:
					it.descNA = &s
				}
			}
		}
		p.checks[kv.key] = it
	}
	return p, nil
}

// Weight returns the policy's weight for a check, or def.
func (p *Policy) weight(c *CheckSpec) uint64 {
	if p != nil {
		if it := p.checks[c.JSONField]; it.weight != nil {
			return *it.weight
		}
	}
	return c.Weight
}

func (p *Policy) rangeOf(c *CheckSpec) uint64 {
	if p != nil {
		if it := p.checks[c.JSONField]; it.rng != nil {
			return *it.rng
		}
	}
	return c.Range
}

func (p *Policy) description(c *CheckSpec, which string) string {
	var it policyItem
	if p != nil {
		it = p.checks[c.JSONField]
	}
	pick := func(o *string, def string) string {
		if o != nil {
			return *o
		}
		return def
	}
	switch which {
	case "good":
		return pick(it.descGood, c.DescriptionGood)
	case "bad":
		return pick(it.descBad, c.DescriptionBad)
	}
	return pick(it.descNA, c.DescriptionNA)
}

// unsignedOf is json_variant_is_unsigned + json_variant_unsigned.
func unsignedOf(v any) (uint64, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	if u, err := strconv.ParseUint(string(n), 10, 64); err == nil {
		return u, true
	}
	if _, err := strconv.ParseInt(string(n), 10, 64); err == nil {
		return 0, false // a negative integer
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil || f < 0 || f >= math.Exp2(64) || f != math.Trunc(f) {
		return 0, false
	}
	return uint64(f), true
}

// orderedObject keeps a JSON object's members in order, duplicates included.
type orderedObject []struct {
	key   string
	value any
}

// decodeOrdered decodes one JSON value with objects as orderedObject and
// numbers as json.Number, refusing trailing data.
func decodeOrdered(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	v, err := decodeValue(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("trailing data after the JSON value")
	}
	return v, nil
}

// maxDepth bounds nesting as systemd's parser does (DEPTH_MAX 2048).
const maxDepth = 2048

func decodeValue(dec *json.Decoder, depth int) (any, error) {
	if depth > maxDepth {
		return nil, errors.New("JSON nested too deeply")
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			var obj orderedObject
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k, _ := kt.(string)
				v, err := decodeValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				obj = append(obj, struct {
					key   string
					value any
				}{k, v})
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return obj, nil
		case '[':
			var arr []any
			for dec.More() {
				v, err := decodeValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				arr = append(arr, v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return arr, nil
		}
		return nil, fmt.Errorf("unexpected %v", t)
	}
	return tok, nil
}
