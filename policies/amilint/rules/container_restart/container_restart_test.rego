package amilint.rules.container_restart_test

import data.amilint.rules.container_restart

rules := {"container-per-restart": {"severity": "medium"}}

svc(spawns, restart, boot) := {
	"active_at_boot": boot,
	"chain": [],
	"spawns_container": spawns,
	"restart": restart,
	"exec_start": {"raw": "/usr/libexec/amazon-ecs-init start"},
}

run(u) := fs if {
	fs := container_restart.findings with input as {"units": {"ecs.service": u}} with data.rules as rules
}

test_ecs_init_restarting if {
	some f in run(svc(true, "on-failure", true))
	f.rule_id == "container-per-restart"
	contains(f.message, "amazon-ecs-init start")
}

test_no_container if {
	count(run(svc(false, "on-failure", true))) == 0
}

test_no_restart if {
	count(run(svc(true, "no", true))) == 0
}

test_not_at_boot if {
	count(run(svc(true, "always", false))) == 0
}
