package amilint.rules.crash_loop_test

import data.amilint.rules.crash_loop

rules := {"crash-loop-restart": {"severity": "medium", "title": "Crash-loop-prone restart policy"}}

# ecs.service as the pre-2024 deb ships it, with systemd's default start limit.
ecs := {
	"unit_type": "service",
	"active_at_boot": true,
	"chain": [],
	"restart": "on-failure",
	"restart_sec": 10,
	"start_limit_interval_sec": 10,
	"start_limit_burst": 5,
	"restart_prevent_exit_status": [],
}

run(u) := fs if {
	fs := crash_loop.findings with input as {"units": {"ecs.service": u}} with data.rules as rules
}

test_ecs_deb_unit_loops if {
	some f in run(ecs)
	f.rule_id == "crash-loop-restart"
	f.unit == "ecs.service"
	contains(f.message, "5 restarts take 50s, longer than StartLimitIntervalSec=10s")
	f.evidence.restart_sec == 10
}

test_rpm_unit_with_prevent_exit_status_is_fine if {
	count(run(object.union(ecs, {"restart_prevent_exit_status": ["5"]}))) == 0
}

test_default_restart_sec_trips_the_limit if {
	# 100ms × 5 = 0.5s ≤ 10s: the start limit stops the loop.
	count(run(object.union(ecs, {"restart_sec": 0.1}))) == 0
}

test_equal_product_trips_the_limit if {
	count(run(object.union(ecs, {"restart_sec": 2}))) == 0
}

test_interval_zero_disables_the_limit if {
	some f in run(object.union(ecs, {"restart_sec": 0.1, "start_limit_interval_sec": 0}))
	contains(f.message, "StartLimitIntervalSec=0")
}

test_burst_zero_disables_the_limit if {
	count(run(object.union(ecs, {"restart_sec": 0.1, "start_limit_burst": 0}))) == 1
}

test_infinite_interval_trips if {
	count(run(object.union(ecs, {"start_limit_interval_sec": "infinity"}))) == 0
}

test_infinite_restart_sec_is_not_a_loop if {
	count(run(object.union(ecs, {"restart_sec": "infinity"}))) == 0
}

test_restart_always_and_abnormal_loop if {
	count(run(object.union(ecs, {"restart": "always"}))) == 1
	count(run(object.union(ecs, {"restart": "on-abnormal"}))) == 1
}

test_restart_no_is_fine if {
	count(run(object.union(ecs, {"restart": "no"}))) == 0
	count(run(object.union(ecs, {"restart": "on-success"}))) == 0
}

test_not_at_boot_is_fine if {
	count(run(object.union(ecs, {"active_at_boot": false}))) == 0
}

test_needs_the_catalog_rule if {
	count(crash_loop.findings) == 0 with input as {"units": {"ecs.service": ecs}} with data.rules as {}
}
