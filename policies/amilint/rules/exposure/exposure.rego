# METADATA
# title: Service exposure above the threshold
# description: |
#   A service that starts at boot (or is activated by one that does) whose
#   exposure, as systemd-analyze security --offline=true of the image's
#   systemd scores it (facts: units.NAME.security), is above the rule's
#   threshold for the unit: the selected profile's tuning, the rule's
#   unit_params, then its params (default 9.0). The finding names the score
#   and the three checks whose fix lowers it most.
# scope: package
# custom:
#   rule_id: service-exposure
package amilint.rules.exposure

import data.amilint.lib

rule_id := "service-exposure"

findings contains f if {
	rule := data.rules[rule_id]
	lib.applies(rule)
	some name in lib.active
	u := input.units[name]
	u.unit_type == "service"
	sec := u.security
	is_number(sec.exposure)
	limit := lib.param(rule_id, name, "threshold", 9.0)
	sec.exposure > limit
	f := object.union(
		lib.finding(object.union(rule, {"id": rule_id, "severity": lib.severity(rule_id)}), name, message(name, u, sec, limit), u.chain),
		{"evidence": {
			"exposure": sec.exposure,
			"level": sec.level,
			"threshold": limit,
			"top": sec.top,
			"systemd": input.systemd.version,
		}},
	)
}

message(name, u, sec, limit) := sprintf("%s %s with an exposure of %s (%s), above the threshold %s (systemd-analyze security of systemd %v)%s", [name, how(u), tenths(sec.exposure), sec.level, tenths(limit), input.systemd.version, fixes(sec)])

# tenths writes a number with one decimal, as systemd-analyze does ("9.0").
tenths(x) := sprintf("%d.%d", [floor(n / 10), n % 10]) if n := round(x * 10)

how(u) := "starts at boot" if u.starts_at_boot

how(u) := sprintf("is activated by %s at boot", [concat(", ", u.activated_by)]) if {
	not u.starts_at_boot
	count(object.get(u, "activated_by", [])) > 0
}

# On a live host a unit running now counts as active without a boot path.
how(u) := "is running" if {
	not u.starts_at_boot
	count(object.get(u, "activated_by", [])) == 0
}

fixes(sec) := "" if count(sec.top) == 0

fixes(sec) := sprintf("; the checks whose fix lowers it most: %s", [concat(", ", [sprintf("%s (%s)", [c.name, tenths(c.exposure)]) | some c in sec.top])]) if count(sec.top) > 0
