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
	prof := data.profiles[lib.profile]
	allow := object.get(prof, "allow", [])
	some name, u in lib.active_units
	u.unit_type in kinds
	not allowed(allow, name)
	f := lib.finding(
		object.union({"id": rule_id}, rule), name, sprintf(
			"%s starts at boot but profile %s does not allow it%s",
			[name, lib.profile, via(u)],
		),
		u.chain,
	)
}

allowed(allow, name) if {
	some pattern in allow
	lib.unit_matches(pattern, name)
}

via(u) := sprintf(" (%s)", [lib.chain_text(u.chain)]) if count(u.chain) > 0

via(u) := "" if count(u.chain) == 0
