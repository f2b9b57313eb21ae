package amilint.rules.boot_test

import data.amilint.rules.boot

rules := {
	"boot-transaction-fails": {"id": "boot-transaction-fails", "severity": "critical", "title": "t", "remediation": {"action": "configure", "text": "x"}},
	"boot-rescue-fallback": {"id": "boot-rescue-fallback", "severity": "critical", "title": "r", "remediation": {"action": "configure", "text": "y"}},
	"runtime-files-shipped": {"id": "runtime-files-shipped", "severity": "low", "title": "f", "remediation": {"action": "configure", "text": "z"}},
	"boot-ordering-cycle": {"id": "boot-ordering-cycle", "severity": "high", "title": "c", "remediation": {"action": "configure", "text": "w"}},
}

test_ordering_cycle_certain if {
	fs := boot.findings with input as {
		"boot": {"target": "multi-user.target", "ordering_cycles": [{"units": ["a.service", "b.service"], "deletable": ["b.service"], "deleted": ["b.service", "c.service"]}]},
		"units": {},
	}
		with data.rules as rules
	count(fs) == 1
	some f in fs
	f.rule_id == "boot-ordering-cycle"
	f.severity == "high"
	f.unit == "b.service"
	contains(f.message, "deletes the job of b.service")
	contains(f.message, "b.service, c.service do(es) not start")
}

test_ordering_cycle_random if {
	fs := boot.findings with input as {
		"boot": {"target": "multi-user.target", "ordering_cycles": [{"units": ["a.service", "basic.target", "sockets.target"], "deletable": ["a.service", "sockets.target"]}]},
		"units": {},
	}
		with data.rules as rules
	count(fs) == 1
	some f in fs
	f.unit == "a.service"
	contains(f.message, "differently from boot to boot")
	contains(f.message, "a.service, sockets.target")
}

test_ordering_cycle_failed_is_not_repeated if {
	fs := boot.findings with input as {
		"boot": {"target": "multi-user.target", "failed": "Failed to isolate default target: Transaction order is cyclic. See system logs for details.", "failed_chain": [], "ordering_cycles": [{"units": ["a.service", "b.service"], "deletable": []}]},
		"units": {},
	}
		with data.rules as rules
	{f.rule_id | some f in fs} == {"boot-transaction-fails"}
}

chain := [
	{"from": "default.target", "to": "graphical.target", "kind": "alias", "source": "/usr/lib/systemd/system/default.target"},
	{"from": "graphical.target", "to": "multi-user.target", "kind": "Requires", "source": "/usr/lib/systemd/system/graphical.target"},
	{"from": "multi-user.target", "to": "agent.service", "kind": ".requires", "source": "/etc/systemd/system/multi-user.target.requires/agent.service"},
]

failing := {
	"boot": {
		"default_target": "graphical.target", "target": "graphical.target",
		"failed": "Failed to isolate default target: Unit agent.service is masked.",
		"failed_unit": "agent.service", "failed_chain": chain,
	},
	"image": {"runtime_files": []},
	"units": {},
}

test_failed_transaction_is_critical_and_names_the_chain if {
	fs := boot.findings with input as failing with data.rules as rules
	count(fs) == 1
	some f in fs
	f.rule_id == "boot-transaction-fails"
	f.severity == "critical"
	f.unit == "agent.service"
	f.chain == chain
	contains(f.message, "never reaches graphical.target")
	contains(f.message, "Unit agent.service is masked.")
	contains(f.message, "default.target → graphical.target → multi-user.target → agent.service")
	f.remediation.units == ["agent.service"]
}

test_fallback_to_rescue if {
	fs := boot.findings with input as {
		"boot": {"default_target": "default.target", "target": "rescue.target", "fallback": "Unit default.target is masked."},
		"units": {},
	}
		with data.rules as rules
	count(fs) == 1
	some f in fs
	f.rule_id == "boot-rescue-fallback"
	f.severity == "critical"
	contains(f.message, "Unit default.target is masked.")
}

test_rescue_fails_too if {
	fs := boot.findings with input as {
		"boot": {"default_target": "default.target", "target": "rescue.target", "fallback": "Unit default.target not found.", "failed": "rescue.target masked", "failed_unit": "rescue.target", "failed_chain": []},
		"units": {},
	}
		with data.rules as rules
	{f.rule_id | some f in fs} == {"boot-transaction-fails", "boot-rescue-fallback"}
	some f in fs
	f.rule_id == "boot-rescue-fallback"
	contains(f.message, "rescue.target cannot be loaded either")
}

test_runtime_files if {
	files := ["/run/systemd/system/a.service", "/run/systemd/system/multi-user.target.wants/a.service", "/run/systemd/transient/t.service", "/run/systemd/generator/g.service"]
	fs := boot.findings with input as {"boot": {"target": "graphical.target"}, "image": {"runtime_files": files}, "units": {}} with data.rules as rules
	count(fs) == 1
	some f in fs
	f.rule_id == "runtime-files-shipped"
	f.severity == "low"
	contains(f.message, "4 file(s)")
	contains(f.message, "/run/systemd/system/a.service, ")
	f.evidence.runtime_files == files
}

test_healthy_boot_has_none if {
	count(boot.findings) == 0 with input as {"boot": {"default_target": "graphical.target", "target": "graphical.target"}, "image": {"runtime_files": []}, "units": {}} with data.rules as rules
}

test_not_on_a_live_host if {
	live := object.union(failing, {"live": {"hostname": "h"}, "image": {"runtime_files": ["/run/systemd/x"]}})
	count(boot.findings) == 0 with input as live with data.rules as rules
}

test_rules_missing_from_catalog_no_finding if {
	count(boot.findings) == 0 with input as failing with data.rules as {}
}
