# METADATA
# title: amilint policy helpers
# description: |
#   Shared helpers for rule families: which units matter, whether a catalog
#   rule applies to the selected profile, whether a rule's needed_when
#   condition holds, and how a finding object is built from a rule.
# scope: package
package amilint.lib

# METADATA
# title: Units that matter
# description: |
#   A unit matters when it starts at boot or is activated by a socket,
#   timer or path unit that starts at boot (facts: active_at_boot).
active contains name if {
	some name, u in input.units
	u.active_at_boot
}

# METADATA
# title: Active units as an object
# description: name → unit facts of the units in active (slower to build than active).
active_units[name] := input.units[name] if some name in active

# METADATA
# title: Profile
# description: The selected profile name, "" when none.
default profile := ""

profile := data.params.profile

# METADATA
# title: Traits
# description: The audited image's traits (the profile's and --trait's), a set.
traits := {t | some t in data.params.traits}

# METADATA
# title: Rule applies
# description: |
#   A rule applies when it lists no profiles or lists the selected one, and
#   the image has every trait the rule lists (none listed: every image).
applies(rule) if {
	profile_applies(rule)
	every t in object.get(rule, "traits", []) {
		t in traits
	}
}

profile_applies(rule) if count(object.get(rule, "profiles", [])) == 0

profile_applies(rule) if profile in object.get(rule, "profiles", [])

# METADATA
# title: Unit name matches
# description: A rule's unit pattern matches a unit name; * ? and [] glob.
unit_matches(pattern, name) if pattern == name

unit_matches(pattern, name) if {
	is_glob(pattern)
	glob.match(pattern, ["/"], name)
}

# METADATA
# title: Is a glob
# description: The pattern has a glob metacharacter (* ? or [).
is_glob(pattern) if regex.match(`[*?\[]`, pattern)

# METADATA
# title: Active units matching a pattern
# description: |
#   The set of names of active units a pattern matches: a plain name is
#   looked up directly, a glob is matched against every active unit.
active_matching(pattern) := {pattern} if {
	not is_glob(pattern)
	active[pattern]
} else := {name |
	some name in active
	glob.match(pattern, ["/"], name)
} if {
	is_glob(pattern)
} else := set()

# METADATA
# title: Config file
# description: The facts of a config file, {} when absent from the facts.
config(p) := cf if {
	cf := input.config_files[p]
} else := {}

# Condition forms of a rule's needed_when: an object with one key, either a
# leaf condition or "any"/"all" of leaf conditions (one level: Rego has no
# recursion).
needed(cond) if leaf(cond)

needed(cond) if {
	some c in object.get(cond, "any", [])
	leaf(c)
}

needed(cond) if {
	all := object.get(cond, "all", [])
	count(all) > 0
	every c in all {
		leaf(c)
	}
}

# config_key: {file, key} holds when the env file sets key non-empty.
leaf(cond) if {
	c := object.get(cond, "config_key", null)
	c != null
	v := object.get(config(file_of(c)), ["keys", c.key], "")
	trim_space(v) != ""
}

# file_exists: PATH holds when the file exists in the image.
leaf(cond) if {
	p := object.get(cond, "file_exists", null)
	p != null
	config(p).exists == true
}

# config_valid: PATH holds when it exists and parses in its format (a
# JSON file that is valid JSON, a directory with entries).
leaf(cond) if {
	p := object.get(cond, "config_valid", null)
	p != null
	cf := config(p)
	cf.exists == true
	cf.parse_ok == true
	not empty_dir(cf)
}

empty_dir(cf) if {
	cf.format == "dir"
	count(object.get(cf, "entries", [])) == 0
}

file_of(c) := object.get(c, "file", object.get(c, "path", ""))

# METADATA
# title: Describe a condition
# description: A condition in words, for messages.
describe(cond) := concat(" or ", [describe_leaf(c) | some c in cond.any]) if {
	cond.any
} else := concat(" and ", [describe_leaf(c) | some c in cond.all]) if {
	cond.all
} else := describe_leaf(cond)

describe_leaf(cond) := sprintf("%s sets a non-empty %s", [file_of(cond.config_key), cond.config_key.key]) if {
	cond.config_key
} else := sprintf("%s exists", [cond.file_exists]) if {
	cond.file_exists
} else := sprintf("%s exists and is valid", [cond.config_valid]) if {
	cond.config_valid
} else := "its condition holds"

# METADATA
# title: Why a condition does not hold
# description: The state of the image that fails a condition, in words.
why_not(cond) := "none of them holds" if {
	cond.any
} else := "not all of them hold" if {
	cond.all
} else := why_not_leaf(cond)

why_not_leaf(cond) := sprintf("%s does not exist", [p]) if {
	p := leaf_path(cond)
	not config(p).exists
} else := sprintf("%s does not set %s", [file_of(cond.config_key), cond.config_key.key]) if {
	not config(file_of(cond.config_key)).keys[cond.config_key.key]
} else := sprintf("%s sets %s empty", [file_of(cond.config_key), cond.config_key.key]) if {
	cond.config_key
} else := sprintf("%s is empty", [cond.config_valid]) if {
	empty_dir(config(cond.config_valid))
} else := sprintf("%s is not valid: %s", [cond.config_valid, object.get(config(cond.config_valid), "error", "")]) if {
	cond.config_valid
} else := "it does not hold"

leaf_path(cond) := file_of(cond.config_key) if {
	cond.config_key
} else := cond.file_exists if {
	cond.file_exists
} else := cond.config_valid

# METADATA
# title: Chain in words
# description: The chain as "default.target → multi-user.target → ecs.service", empty without one.
chain_text(chain) := concat(" → ", array.concat([chain[0].from], [e.to | some e in chain])) if count(chain) > 0

chain_text(chain) := "" if count(chain) == 0

# METADATA
# title: Remediation
# description: |
#   The remediation of a rule for a unit: the rule's action and units
#   (the unit itself when the rule names none) with the systemctl
#   commands that apply it.
remediation(rule, unit) := r if {
	rem := object.get(rule, "remediation", {})
	action := object.get(rem, "action", "disable")
	units := remediation_units(rem, unit)
	r := {
		"action": action,
		"units": units,
		"text": object.get(rem, "text", ""),
		"commands": commands(action, units),
	}
}

remediation_units(rem, unit) := rem.units if count(object.get(rem, "units", [])) > 0

remediation_units(rem, unit) := [unit] if count(object.get(rem, "units", [])) == 0

commands(action, units) := [sprintf("systemctl %s %s", [action, concat(" ", units)])] if action in {"disable", "mask"}

else := []

# METADATA
# title: Finding
# description: |
#   A finding object for a rule about a unit. A unit that is active at
#   boot but whose Condition*= or Assert*= settings fail in the image never
#   runs: its finding is softened to info and says why (every rule about
#   what runs gets this through finding).
finding(rule, unit, message, chain) := {
	"rule_id": rule.id,
	"title": object.get(rule, "title", ""),
	"severity": finding_severity(rule, unit),
	"unit": unit,
	"message": concat("", [message, skipped_note(unit)]),
	"chain": chain,
	"remediation": remediation(rule, unit),
	"references": object.get(rule, "references", []),
}

# METADATA
# title: Skipped at boot
# description: |
#   The unit starts at boot (or is activated) but its conditions or
#   assertions fail in the image (facts: conditions_met), so systemd never
#   runs it. Not on a live host, whose units are seen running or not.
skipped(unit) if {
	not input.live
	u := input.units[unit]
	u.active_at_boot
	u.conditions_met == "false"
}

finding_severity(rule, unit) := "info" if skipped(unit)

else := object.get(rule, "severity", "medium")

skipped_note(unit) := sprintf("; but it never runs: its conditions fail in the image (%s), so the finding is informational", [input.units[unit].conditions_reason]) if skipped(unit)

else := sprintf("; whether it runs depends on the machine, not the image: %s", [concat(", ", undecided)]) if {
	not input.live
	undecided := object.get(input.units[unit], "conditions_undecided", [])
	count(undecided) > 0
}

else := ""

# METADATA
# title: Rule tuning
# description: The selected profile's tuning of a rule (rules.ID in the profile), {} without one.
tuning(id) := object.get(data.profiles, [profile, "rules", id], {})

# METADATA
# title: Rule parameter for a unit
# description: |
#   A rule's numeric param for a unit: the selected profile's per-unit
#   tuning, then the rule's unit_params, then the profile's params, then
#   the rule's params, else def. Among per-unit entries a unit's own name
#   wins over globs, and among globs the longest (then the first in
#   sorted order).
param(id, unit, name, def) := v if {
	v := unit_param(tuning(id), unit, name)
} else := v if {
	v := unit_param(object.get(data.rules, id, {}), unit, name)
} else := v if {
	v := tuning(id).params[name]
} else := v if {
	v := data.rules[id].params[name]
} else := def

unit_param(src, unit, name) := v if {
	v := src.unit_params[unit][name]
} else := v if {
	globs := sort([[0 - count(p), p] |
		some p, ps in object.get(src, "unit_params", {})
		is_glob(p)
		glob.match(p, ["/"], unit)
		is_number(ps[name])
	])
	count(globs) > 0
	v := src.unit_params[globs[0][1]][name]
}

# METADATA
# title: Rule severity
# description: A rule's severity, or the selected profile's tuning of it.
severity(id) := object.get(tuning(id), "severity", object.get(data.rules, [id, "severity"], "medium"))
