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

skipped_unit := object.union(svc(false, true, "enabled", ""), {
	"conditions_met": "false",
	"conditions_reason": "ConditionKernelCommandLine=snapd_recovery_mode: snapd_recovery_mode is not on the kernel command line the image boots with (/boot/grub/grub.cfg)",
})

test_unit_whose_conditions_fail_is_softened if {
	some f in run(skipped_unit)
	f.severity == "info"
	contains(f.message, "/opt/gone/bin/agent does not exist")
	contains(f.message, "never runs: its conditions fail in the image (ConditionKernelCommandLine=snapd_recovery_mode")
}

test_unknown_conditions_keep_the_severity if {
	some f in run(object.union(svc(false, true, "enabled", ""), {"conditions_met": "unknown"}))
	f.severity == "medium"
	not contains(f.message, "never runs")
}

test_softening_not_on_a_live_host if {
	fs := missing_exec.findings with input as {"units": {"a.service": skipped_unit}, "live": {"hostname": "h"}} with data.rules as rules
	some f in fs
	f.severity == "medium"
}
