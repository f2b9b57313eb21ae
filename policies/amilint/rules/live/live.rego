# METADATA
# title: Live host health
# description: |
#   The findings of a live audit (amilint live), decided over the live
#   facts document: the host's static facts with each unit's runtime state
#   from systemd (active_state, sub_state, result, n_restarts,
#   restarts_growth, container_per_restart) and the top-level live section
#   (cgroup health, per-core CPU). A static scan has no live section and no
#   runtime state, so none of these rules fires there.
#
#   Thresholds are rule params (data.rules[ID].params), overridden by
#   data.params.live (the live command's --zombie-threshold,
#   --restart-threshold and --saturation flags).
# scope: package
# custom:
#   rule_ids: [live-memcg-zombies, live-unit-crashloop, live-container-per-restart, live-irq-core-saturated, live-core-saturated]
package amilint.rules.live

zombies_id := "live-memcg-zombies"

crashloop_id := "live-unit-crashloop"

container_id := "live-container-per-restart"

irq_core_id := "live-irq-core-saturated"

core_id := "live-core-saturated"

# METADATA
# title: Parameter
# description: |
#   A threshold: data.params.live[name] when the user set it, else the
#   rule's params[name], else def.
param(id, name, def) := object.get(data.params, ["live", name], object.get(data.rules, [id, "params", name], def))

finding(id, rule, unit, message, remediation, evidence) := {
	"rule_id": id,
	"title": object.get(rule, "title", ""),
	"severity": object.get(rule, "severity", "medium"),
	"unit": unit,
	"message": message,
	"chain": object.get(input.units, [unit, "chain"], []),
	"remediation": remediation,
	"references": object.get(rule, "references", []),
	"evidence": evidence,
}

rule_text(rule) := object.get(rule, ["remediation", "text"], "")

# disable_now is the remediation of a unit the host should stop running.
disable_now(rule, unit) := {
	"action": object.get(rule, ["remediation", "action"], "disable"),
	"units": [unit],
	"text": rule_text(rule),
	"commands": [sprintf("systemctl %s --now %s", [object.get(rule, ["remediation", "action"], "disable"), unit])],
}

# ---- zombie memory cgroups ------------------------------------------------

findings contains f if {
	rule := data.rules[zombies_id]
	m := input.live.cgroups.memory
	m.zombies >= param(zombies_id, "zombie_threshold", 1000)
	suspect := object.get(input.live.cgroups, "suspect", "")
	f := finding(zombies_id, rule, suspect, zombies_message(m, suspect), zombies_remediation(rule, suspect), zombies_evidence(m))
}

zombies_message(m, "") := sprintf(
	"%d zombie memory cgroups: the kernel tracks %d memory cgroups but only %d exist in %s",
	[m.zombies, m.tracked, m.present, m.hierarchy],
)

zombies_message(m, suspect) := sprintf(
	"%d zombie memory cgroups: the kernel tracks %d memory cgroups but only %d exist in %s; suspect %s: %s",
	[m.zombies, m.tracked, m.present, m.hierarchy, suspect, object.get(input.live.cgroups, "why", "")],
) if {
	suspect != ""
}

reboot_text := "A reboot is what purges the memory cgroups already leaked; disabling the leaking unit is what stops the leak."

zombies_remediation(rule, "") := {
	"action": "none",
	"units": [],
	"text": sprintf("%s Find the unit that creates cgroups and exits (crash-looping services, container launchers). %s", [reboot_text, rule_text(rule)]),
	"commands": ["systemctl reboot"],
}

zombies_remediation(rule, suspect) := {
	"action": object.get(rule, ["remediation", "action"], "disable"),
	"units": [suspect],
	"text": sprintf("%s %s", [reboot_text, rule_text(rule)]),
	"commands": [sprintf("systemctl disable --now %s", [suspect]), "systemctl reboot"],
} if {
	suspect != ""
}

zombies_evidence(m) := object.union(
	{"zombies": m.zombies, "tracked": m.tracked, "present": m.present, "cgroup_version": m.version},
	growth,
) if {
	growth := {"growth": input.live.cgroups.growth.zombies}
} else := {"zombies": m.zombies, "tracked": m.tracked, "present": m.present, "cgroup_version": m.version}

# ---- crash-looping services -----------------------------------------------

# METADATA
# title: Crash-loop reasons
# description: |
#   Why systemd's state says a loaded service crash-loops, one sentence
#   each. A service stopped since (inactive) is not crash-looping now,
#   whatever its NRestarts.
reasons(u) := [r |
	some r in [
		auto_restart(u),
		start_limit(u),
		many_restarts(u),
		grew(u),
	]
	r != ""
] if {
	u.unit_type == "service"
	u.load_state == "loaded"
	u.active_state != "inactive"
} else := []

auto_restart(u) := "it is waiting to be restarted after a failure (auto-restart)" if {
	u.sub_state == "auto-restart"
} else := ""

start_limit(u) := "it failed too often and hit its start limit" if {
	u.result == "start-limit-hit"
} else := ""

many_restarts(u) := sprintf("systemd restarted it %d times (threshold %d)", [u.n_restarts, t]) if {
	t := param(crashloop_id, "restart_threshold", 3)
	object.get(u, "n_restarts", 0) >= t
} else := ""

grew(u) := sprintf("it restarted %d times during the sample", [u.restarts_growth]) if {
	object.get(u, "restarts_growth", 0) > 0
} else := ""

crash_looping(u) if count(reasons(u)) > 0

findings contains f if {
	rule := data.rules[crashloop_id]
	some name, u in input.units
	why := reasons(u)
	count(why) > 0
	f := finding(crashloop_id, rule, name, crashloop_message(name, u, why), disable_now(rule, name), {
		"n_restarts": object.get(u, "n_restarts", 0),
		"active_state": u.active_state,
		"sub_state": object.get(u, "sub_state", ""),
		"result": object.get(u, "result", ""),
		"file_state": object.get(u, "file_state", ""),
	})
}

crashloop_message(name, u, why) := sprintf("%s is crash-looping: %s; each restart creates a new container and memory cgroup", [name, concat("; ", why)]) if {
	u.container_per_restart
} else := sprintf("%s is crash-looping: %s", [name, concat("; ", why)])

# ---- services that create a container per start ---------------------------

enabled_states := {"enabled", "enabled-runtime"}

running_states := {"active", "activating", "reloading"}

runs(u) if object.get(u, "file_state", "") in enabled_states

runs(u) if u.active_state in running_states

runs(u) if crash_looping(u)

findings contains f if {
	rule := data.rules[container_id]
	some name, u in input.units
	u.container_per_restart
	runs(u)
	base := finding(
		container_id, rule, name, sprintf(
			"%s (%s, %s) starts a new container on every start (%s): each restart leaves a memory cgroup that page cache can keep alive",
			[name, dash(object.get(u, "file_state", "")), dash(u.active_state), commands(u)],
		),
		disable_now(rule, name), {"exec_start": object.get(u, "exec_argv", []), "n_restarts": object.get(u, "n_restarts", 0)},
	)
	f := object.union(base, {"severity": container_severity(rule, u)})
}

container_severity(_, u) := "high" if crash_looping(u)

container_severity(rule, u) := object.get(rule, "severity", "medium") if not crash_looping(u)

dash("") := "-"

dash(s) := s if s != ""

commands(u) := concat("; ", [concat(" ", argv) | some argv in object.get(u, "exec_argv", [])])

# ---- saturated cores ------------------------------------------------------

saturated contains c if {
	some c in input.live.cpu.cores
	c.system > 0
}

findings contains f if {
	rule := data.rules[irq_core_id]
	some c in saturated
	count(object.get(c, "nics", [])) > 0
	c.system >= param(irq_core_id, "saturation", 0.95)
	f := core_finding(irq_core_id, rule, c)
}

findings contains f if {
	rule := data.rules[core_id]
	some c in saturated
	count(object.get(c, "nics", [])) == 0
	c.system >= param(core_id, "saturation", 0.95)
	f := core_finding(core_id, rule, c)
}

# core_finding is about no unit: "" gives an empty unit and chain.
core_finding(id, rule, c) := finding(
	id, rule, "", core_statement(c),
	{
		"action": object.get(rule, ["remediation", "action"], "configure"),
		"units": [],
		"text": rule_text(rule),
		"commands": [sprintf("perf record -a -g -C %d -- sleep 10", [c.cpu])],
	},
	{"cpu": c.cpu, "system": c.system, "nics": object.get(c, "nics", []), "machine_busy": input.live.cpu.busy},
)

# core_statement says "core 39 (serving eth0 IRQs) at 100% system while
# the machine is 2% busy", as the cpu collector does.
core_statement(c) := sprintf("core %d%s at %d%% system while the machine is %d%% busy", [c.cpu, serving(c), round(100 * c.system), round(100 * input.live.cpu.busy)])

serving(c) := sprintf(" (serving %s IRQs)", [concat(", ", c.nics)]) if {
	count(object.get(c, "nics", [])) > 0
} else := ""
