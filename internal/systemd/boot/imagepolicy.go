package boot

import (
	"errors"
	"strings"
)

// imagePolicySince is the first systemd version with RootImagePolicy=,
// MountImagePolicy= and ExtensionImagePolicy=; older ones ignore them as
// unknown settings.
const imagePolicySince = 254

// partitionDesignators are the partition names an image policy may give
// rules for (partition_designator_from_string).
var partitionDesignators = map[string]bool{
	"root": true, "usr": true, "home": true, "srv": true, "esp": true,
	"xbootldr": true, "swap": true, "root-verity": true, "usr-verity": true,
	"root-verity-sig": true, "usr-verity-sig": true, "tmp": true, "var": true,
}

// partitionPolicyFlags are the flag words of a partition rule
// (policy_flag_from_string_one).
var partitionPolicyFlags = map[string]bool{
	"verity": true, "signed": true, "encrypted": true, "unprotected": true,
	"unused": true, "absent": true, "open": true, "ignore": true,
	"read-only-on": true, "read-only-off": true, "growfs-on": true, "growfs-off": true,
}

// The image policy parser's errors that systemd tells apart (by error
// number) from a plain syntax error.
var (
	errImagePolicyDup       = errors.New("rule given more than once")
	errImagePolicyPartition = errors.New("unknown partition designator")
	errImagePolicyFlag      = errors.New("unknown partition policy flag")
)

// imagePolicyError is the error behind why, a reason badImagePolicy
// gives, or nil for a plain syntax error.
func imagePolicyError(why string) error {
	switch {
	case strings.Contains(why, "more than once"):
		return errImagePolicyDup
	case strings.HasPrefix(why, "unknown partition designator"):
		return errImagePolicyPartition
	case strings.HasPrefix(why, "unknown partition policy flag"):
		return errImagePolicyFlag
	}
	return nil
}

// badImagePolicy is why config_parse_image_policy refuses the non-empty
// value v (image_policy_from_string), or "". Only whether the policy
// parses is checked; what it allows is not modelled. A policy is "-",
// "*", "~", or ":"-separated rules "designator=flags", where an empty
// designator sets the default and flags are "+"-separated words (none,
// or "-", for no flags). Each designator, and the default, may have one
// rule only. Blanks around designators and flag words do not count; a
// backslash takes the next character as it is.
func badImagePolicy(v string) string {
	if v == "" || v == "-" || v == "*" || v == "~" {
		return ""
	}
	seen := map[string]bool{}
	defaultSeen := false
	for rest, more := v, true; more; {
		var rule string
		var err bool
		rule, rest, more, err = splitOne(rest, ':')
		if err {
			return "invalid escape in image policy"
		}
		d, f, hasEq, err := splitOne(rule, '=')
		if err {
			return "invalid escape in image policy"
		}
		if !hasEq {
			return "missing '=' in image policy rule"
		}
		switch d = strings.Trim(d, whitespace); {
		case d == "":
			if defaultSeen {
				return "default partition policy given more than once"
			}
			defaultSeen = true
		case !partitionDesignators[d]:
			return "unknown partition designator " + d
		case seen[d]:
			return "partition designator given more than once: " + d
		default:
			seen[d] = true
		}
		if why := badPartitionFlags(strings.Trim(f, whitespace)); why != "" {
			return why
		}
	}
	return ""
}

// badPartitionFlags is why partition_policy_flags_from_string refuses f,
// or "".
func badPartitionFlags(f string) string {
	if f == "" || f == "-" {
		return ""
	}
	for rest, more := f, true; more; {
		var w string
		var err bool
		w, rest, more, err = splitOne(rest, '+')
		if err {
			return "invalid escape in partition policy flags"
		}
		if w = strings.Trim(w, whitespace); !partitionPolicyFlags[w] {
			return "unknown partition policy flag " + w
		}
	}
	return ""
}

// splitOne is extract_first_word with the one separator sep and
// EXTRACT_DONT_COALESCE_SEPARATORS on a string that is not exhausted:
// the text before the first unescaped sep, with each backslash dropped
// and the character after it kept, and the text after that sep; more
// says whether there was a separator (an empty string, or one ending in
// sep, still yields a last, empty word). A backslash ending s is an
// error.
func splitOne(s string, sep byte) (word, rest string, more, err bool) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\\':
			if i+1 >= len(s) {
				return "", "", false, true
			}
			i++
			b.WriteByte(s[i])
		case sep:
			return b.String(), s[i+1:], true, false
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), "", false, false
}
