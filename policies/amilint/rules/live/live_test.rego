package amilint.rules.live_test

import data.amilint.rules.live

rules := {
	"live-memcg-zombies": {
		"severity": "high", "title": "Zombie memory cgroups",
		"params": {"zombie_threshold": 1000},
		"remediation": {"action": "disable", "text": "Disable it."},
	},
	"live-unit-crashloop": {"severity": "high", "params": {"restart_threshold": 3}, "remediation": {"action": "disable"}},
	"live-container-per-restart": {"severity": "medium", "remediation": {"action": "disable"}},
	"live-irq-core-saturated": {"severity": "high", "params": {"saturation": 0.95}},
	"live-core-saturated": {"severity": "medium", "params": {"saturation": 0.95}},
}

# ecs.service as the incident's hosts ran it: enabled, restarting every 10 s.
ecs := {
	"unit_type": "service",
	"chain": [{"from": "multi-user.target", "to": "ecs.service", "kind": "wants"}],
	"file_state": "enabled",
	"load_state": "loaded",
	"active_state": "activating",
	"sub_state": "auto-restart",
	"result": "exit-code",
	"n_restarts": 4242,
	"container_per_restart": true,
	"exec_argv": [["/usr/libexec/amazon-ecs-init", "start"]],
}

ssh := {
	"unit_type": "service", "chain": [], "file_state": "enabled", "load_state": "loaded",
	"active_state": "active", "sub_state": "running", "result": "success", "n_restarts": 0,
	"container_per_restart": false,
}

memory(zombies) := {"version": 1, "hierarchy": "/sys/fs/cgroup/memory", "tracked": zombies + 240, "present": 240, "zombies": zombies}

host(units, cgroups, cpu) := {"units": units, "live": {"cgroups": cgroups, "cpu": cpu}}

idle_cpu := {"busy": 0.02, "cores": [{"cpu": 0, "system": 0.01}, {"cpu": 1, "system": 0.02, "nics": ["eth0"]}]}

run(doc) := fs if {
	fs := live.findings with input as doc with data.rules as rules
}

run_params(doc, p) := fs if {
	fs := live.findings with input as doc with data.rules as rules with data.params as {"live": p}
}

ids(fs) := {sprintf("%s %s", [f.rule_id, object.get(f, "unit", "")]) | some f in fs}

incident := host(
	{"ecs.service": ecs, "ssh.service": ssh},
	{"memory": memory(68440), "growth": {"zombies": 12}, "suspect": "ecs.service", "why": "it crash-loops"},
	{"busy": 0.02, "cores": [{"cpu": 39, "system": 1, "nics": ["eth0"]}, {"cpu": 7, "system": 0.96}, {"cpu": 8, "system": 0.5}]},
)

test_incident_host if {
	ids(run(incident)) == {
		"live-memcg-zombies ecs.service",
		"live-unit-crashloop ecs.service",
		"live-container-per-restart ecs.service",
		"live-irq-core-saturated ",
		"live-core-saturated ",
	}
}

test_zombies_name_the_suspect_and_say_reboot if {
	some f in run(incident)
	f.rule_id == "live-memcg-zombies"
	startswith(f.message, "68440 zombie memory cgroups: the kernel tracks 68680 memory cgroups but only 240 exist")
	contains(f.message, "suspect ecs.service: it crash-loops")
	f.remediation.action == "disable"
	f.remediation.units == ["ecs.service"]
	f.remediation.commands == ["systemctl disable --now ecs.service", "systemctl reboot"]
	contains(f.remediation.text, "A reboot is what purges the memory cgroups already leaked")
	contains(f.remediation.text, "disabling the leaking unit is what stops the leak")
	f.evidence.growth == 12
	f.chain == ecs.chain
}

test_zombies_without_suspect_only_reboot if {
	fs := run(host({}, {"memory": memory(5000)}, idle_cpu))
	count(fs) == 1
	some f in fs
	f.unit == ""
	f.remediation.action == "none"
	f.remediation.commands == ["systemctl reboot"]
	contains(f.remediation.text, "A reboot is what purges")
}

test_zombies_below_threshold if {
	count(run(host({}, {"memory": memory(999)}, idle_cpu))) == 0
}

test_zombie_threshold_from_params if {
	count(run_params(host({}, {"memory": memory(999)}, idle_cpu), {"zombie_threshold": 10})) == 1
	count(run_params(host({}, {"memory": memory(5000)}, idle_cpu), {"zombie_threshold": 10000})) == 0
}

test_static_scan_has_no_live_findings if {
	count(run({"units": {"ecs.service": object.remove(ecs, ["active_state", "sub_state", "n_restarts", "load_state", "container_per_restart", "file_state"])}})) == 0
}

test_crashloop_reasons if {
	some f in run(host({"ecs.service": ecs}, {}, idle_cpu))
	f.rule_id == "live-unit-crashloop"
	f.message == "ecs.service is crash-looping: it is waiting to be restarted after a failure (auto-restart); systemd restarted it 4242 times (threshold 3); each restart creates a new container and memory cgroup"
	f.remediation.commands == ["systemctl disable --now ecs.service"]
}

test_restart_threshold if {
	u := object.union(ssh, {"n_restarts": 3})
	some f in run(host({"x.service": u}, {}, idle_cpu))
	f.rule_id == "live-unit-crashloop"
	count(run_params(host({"x.service": u}, {}, idle_cpu), {"restart_threshold": 4})) == 0
}

test_restarts_during_sample if {
	some f in run(host({"x.service": object.union(ssh, {"restarts_growth": 2, "n_restarts": 2})}, {}, idle_cpu))
	contains(f.message, "it restarted 2 times during the sample")
}

test_start_limit_hit if {
	u := object.union(ssh, {"active_state": "failed", "sub_state": "failed", "result": "start-limit-hit"})
	some f in run(host({"x.service": u}, {}, idle_cpu))
	contains(f.message, "hit its start limit")
}

test_stopped_unit_is_not_crashlooping if {
	# After amilint fix --live: disabled, stopped; NRestarts keeps its count.
	u := object.union(ecs, {"file_state": "disabled", "active_state": "inactive", "sub_state": "dead"})
	count(run(host({"ecs.service": u}, {}, idle_cpu))) == 0
}

test_healthy_units if {
	count(run(host({"ssh.service": ssh}, {"memory": memory(10)}, idle_cpu))) == 0
}

test_container_per_restart_enabled_not_looping if {
	u := object.union(ecs, {"active_state": "active", "sub_state": "running", "n_restarts": 0})
	some f in run(host({"agent.service": u}, {}, idle_cpu))
	f.rule_id == "live-container-per-restart"
	f.severity == "medium"
	f.message == "agent.service (enabled, active) starts a new container on every start (/usr/libexec/amazon-ecs-init start): each restart leaves a memory cgroup that page cache can keep alive"
}

test_container_per_restart_looping_is_high if {
	some f in run(host({"ecs.service": ecs}, {}, idle_cpu))
	f.rule_id == "live-container-per-restart"
	f.severity == "high"
}

test_container_per_restart_disabled_and_stopped if {
	u := object.union(ecs, {"file_state": "disabled", "active_state": "inactive", "sub_state": "dead", "n_restarts": 0})
	count(run(host({"agent.service": u}, {}, idle_cpu))) == 0
}

test_irq_core_statement if {
	fs := run(host({}, {}, {"busy": 0.02, "cores": [{"cpu": 39, "system": 1, "nics": ["eth0"]}]}))
	count(fs) == 1
	some f in fs
	f.rule_id == "live-irq-core-saturated"
	f.severity == "high"
	f.message == "core 39 (serving eth0 IRQs) at 100% system while the machine is 2% busy"
	f.evidence.cpu == 39
	f.chain == []
	f.remediation.units == []
	f.remediation.commands == ["perf record -a -g -C 39 -- sleep 10"]
}

test_saturation_threshold if {
	doc := host({}, {}, {"busy": 0.3, "cores": [{"cpu": 3, "system": 0.9}]})
	count(run(doc)) == 0
	some f in run_params(doc, {"saturation": 0.8})
	f.rule_id == "live-core-saturated"
	f.message == "core 3 at 90% system while the machine is 30% busy"
}
