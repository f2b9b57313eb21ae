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
	base := object.union(rule, {"id": rule_id, "severity": lib.severity(rule_id)})
	some name in lib.active
	u := input.units[name]
	u.unit_type == "service"
	sec := u.security
	is_number(sec.exposure)
	limit := threshold(name)
	sec.exposure > limit
	f := object.union(
		lib.finding(base, name, message(name, u, sec, limit), u.chain),
		{"evidence": {
			"exposure": sec.exposure,
			"level": sec.level,
			"threshold": limit,
			"top": sec.top,
			"systemd": input.systemd.version,
		}},
	)
}

# threshold is lib.param's threshold for a unit, worked out once for all
# units when neither the rule nor the profile's tuning has unit_params.
threshold(name) := lib.param(rule_id, name, "threshold", 9.0) if per_unit

threshold(_) := common_threshold if not per_unit

per_unit if count(object.get(lib.tuning(rule_id), "unit_params", {})) > 0

per_unit if count(object.get(data.rules[rule_id], "unit_params", {})) > 0

common_threshold := lib.param(rule_id, "", "threshold", 9.0)

message(name, u, sec, limit) := sprintf("%s %s with an exposure of %s (%s), above the threshold %s (systemd-analyze security of systemd %v)%s", [name, how(u), tenths(sec.exposure), sec.level, tenths(limit), input.systemd.version, fixes(sec)])

# tenths writes a number with one decimal, as systemd-analyze does ("9.0").
tenths(x) := sprintf("%d.%d", [floor(n / 10), n % 10]) if n := round(x * 10)

# On a live host a unit running now counts as active without a boot path
# ("is running").
how(u) := "starts at boot" if u.starts_at_boot

else := sprintf("is activated by %s at boot", [concat(", ", u.activated_by)]) if count(object.get(u, "activated_by", [])) > 0

else := "is running" if count(object.get(u, "activated_by", [])) == 0

fixes(sec) := "" if count(sec.top) == 0

else := sprintf("; the checks whose fix lowers it most: %s", [concat(", ", [sprintf("%s (%s)", [c.name, tenths(c.exposure)]) | some c in sec.top])]) if count(sec.top) > 0
