# METADATA
# title: Role profile allowlist
# description: |
#   With a profile selected (--profile NAME) that has an allowlist
#   (data.profiles[NAME].allow, unit name globs), every service, socket,
#   timer or path unit that starts at boot, or is activated by one that
#   does, and matches no allowlist entry is reported with its chain:
#   default deny.
# scope: package
# custom:
#   rule_id: profile-allowlist
package amilint.rules.profile_allowlist

import data.amilint.lib

rule_id := "profile-allowlist"

kinds := {"service", "socket", "timer", "path"}

findings contains f if {
	rule := data.rules[rule_id]
	data.profiles[lib.profile]
	some name in lib.active
	u := input.units[name]
	u.unit_type in kinds
	not allowed(name)
	f := lib.finding(
		object.union({"id": rule_id}, rule), name, sprintf(
			"%s starts at boot but profile %s does not allow it%s",
			[name, lib.profile, via(u)],
		),
		u.chain,
	)
}

allow := object.get(data.profiles[lib.profile], "allow", [])

exact := {p | some p in allow; not lib.is_glob(p)}

# All glob entries as one alternation, compiled once: {a*,b?.service}.
globs := sprintf("{%s}", [concat(",", [p | some p in allow; lib.is_glob(p)])])

allowed(name) if exact[name]

allowed(name) if glob.match(globs, ["/"], name)

via(u) := sprintf(" (%s)", [lib.chain_text(u.chain)]) if count(u.chain) > 0

via(u) := "" if count(u.chain) == 0
