# METADATA
# title: Enabled unit whose ExecStart binary is missing
# description: |
#   A service that is enabled or starts at boot but whose ExecStart
#   executable does not exist in the image fails at every start (and,
#   with a restart policy, loops). A "-" prefix makes systemd ignore the
#   failure, so those are not reported.
# scope: package
# custom:
#   rule_id: exec-missing
package amilint.rules.missing_exec

import data.amilint.lib

rule_id := "exec-missing"

findings contains f if {
	rule := data.rules[rule_id]
	lib.applies(rule)
	some name, u in input.units
	u.unit_type == "service"
	relevant(u)
	u.exec_start.exists == false
	not ignores_failure(u.exec_start)
	f := object.union(
		lib.finding(
			object.union({"id": rule_id}, rule), name, sprintf(
				"%s is %s but its ExecStart executable %s does not exist in the image",
				[name, why(u), u.exec_start.path],
			),
			u.chain,
		),
		{"evidence": {"exec_start": u.exec_start.raw}},
	)
}

# A "-" prefix makes systemd ignore the failure.
ignores_failure(e) if contains(object.get(e, "prefixes", ""), "-")

relevant(u) if u.active_at_boot

relevant(u) if u.state == "enabled"

why(u) := "started at boot" if u.active_at_boot

why(u) := "enabled" if not u.active_at_boot
