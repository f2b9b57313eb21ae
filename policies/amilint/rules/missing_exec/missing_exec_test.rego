package amilint.rules.missing_exec_test

import data.amilint.rules.missing_exec

rules := {"exec-missing": {"severity": "medium"}}

svc(exists, boot, state, prefixes) := {
	"unit_type": "service",
	"state": state,
	"active_at_boot": boot,
	"chain": [],
	"exec_start": {"path": "/opt/gone/bin/agent", "raw": "/opt/gone/bin/agent", "exists": exists, "prefixes": prefixes},
}

run(u) := fs if {
	fs := missing_exec.findings with input as {"units": {"a.service": u}} with data.rules as rules
}

test_missing_binary_at_boot if {
	some f in run(svc(false, true, "enabled", ""))
	f.rule_id == "exec-missing"
	contains(f.message, "/opt/gone/bin/agent does not exist")
}

test_missing_binary_enabled_but_not_at_boot if {
	count(run(svc(false, false, "enabled", ""))) == 1
}

test_present_binary_is_fine if {
	count(run(svc(true, true, "enabled", ""))) == 0
}

test_unknown_is_not_missing if {
	count(run(svc(null, true, "enabled", ""))) == 0
}

test_dash_prefix_is_ignored if {
	count(run(svc(false, true, "enabled", "-"))) == 0
}

test_disabled_unit_is_fine if {
	count(run(svc(false, false, "disabled", ""))) == 0
}

test_missing_prefixes_field if {
	u := json.remove(svc(false, true, "enabled", ""), ["exec_start/prefixes"])
	count(run(u)) == 1
}
