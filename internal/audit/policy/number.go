package policy

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"slices"
	"strconv"
	"strings"
)

// ErrNumberRange reports a number policies cannot hold: OPA compares
// numbers through big.Rat and panics on what it cannot parse (1e2000000,
// 1e-2000000), so such numbers are refused where they are decoded.
var ErrNumberRange = errors.New("number out of the range policies can hold (a float64: ±1.8e308, non-zero magnitudes from 4.9e-324)")

// checkNumber refuses a JSON number literal a float64 cannot hold:
// overflowing to ±Inf or a non-zero literal underflowing to zero. A zero
// is refused too when big.Float cannot read it: its exponent overflows
// (0E10000000000000000000), which strconv takes for 0 but OPA's
// comparison of numbers cannot parse, and panics on.
func checkNumber(s string) error {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) || (f == 0 && !zeroLiteral(s)) {
		return fmt.Errorf("%s: %w", truncate(s), ErrNumberRange)
	}
	if f == 0 && strings.ContainsAny(s, "eE") {
		if _, ok := new(big.Float).SetString(s); !ok {
			return fmt.Errorf("%s: %w", truncate(s), ErrNumberRange)
		}
	}
	return nil
}

// zeroLiteral reports whether the mantissa of a number literal is zero.
func zeroLiteral(s string) bool {
	m, _, _ := strings.Cut(strings.ToLower(s), "e")
	return strings.Trim(m, "+-0.") == ""
}

// CheckNumbers walks a decoded JSON or YAML value and refuses the first
// number policies cannot hold, naming where it is (a.b[2].c).
func CheckNumbers(v any) error {
	return checkNumbers(v, "")
}

func checkNumbers(v any, at string) error {
	where := func() string {
		if at == "" {
			return "the top level"
		}
		return at
	}
	switch x := v.(type) {
	case json.Number:
		if err := checkNumber(string(x)); err != nil {
			return fmt.Errorf("at %s: %w", where(), err)
		}
	case float64:
		if math.IsInf(x, 0) || math.IsNaN(x) {
			return fmt.Errorf("at %s: %v: %w", where(), x, ErrNumberRange)
		}
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			p := k
			if at != "" {
				p = at + "." + k
			}
			if err := checkNumbers(x[k], p); err != nil {
				return err
			}
		}
	case []any:
		for i, e := range x {
			if err := checkNumbers(e, fmt.Sprintf("%s[%d]", at, i)); err != nil {
				return err
			}
		}
	}
	return nil
}
