# METADATA
# title: Crash-loop-prone restart policy
# description: |
#   A service that restarts on failure (Restart=on-failure, always or
#   on-abnormal) with no RestartPreventExitStatus, where RestartSec ×
#   StartLimitBurst exceeds StartLimitIntervalSec (or the start limit is
#   off), never hits its start limit: when it cannot work it restarts
#   forever. This is ecs.service's pattern (RestartSec=10s, default burst 5
#   in 10s: 50s > 10s) that leaked ~70,000 memory cgroups.
# scope: package
# custom:
#   rule_id: crash-loop-restart
package amilint.rules.crash_loop

import data.amilint.lib

rule_id := "crash-loop-restart"

restarting := {"on-failure", "always", "on-abnormal"}

findings contains f if {
	rule := data.rules[rule_id]
	lib.applies(rule)
	some name in lib.active
	u := input.units[name]
	u.unit_type == "service"
	u.restart in restarting
	count(u.restart_prevent_exit_status) == 0
	is_number(u.restart_sec)
	not limit_trips(u)
	f := object.union(
		lib.finding(object.union({"id": rule_id}, rule), name, message(name, u), u.chain),
		{"evidence": {
			"restart": u.restart,
			"restart_sec": u.restart_sec,
			"start_limit_burst": u.start_limit_burst,
			"start_limit_interval_sec": u.start_limit_interval_sec,
		}},
	)
}

# The start limit trips when burst restarts fit in the interval. An
# interval or burst of 0 turns rate limiting off; an infinite interval
# always trips once burst starts happened.
limit_trips(u) if {
	u.start_limit_interval_sec == "infinity"
	u.start_limit_burst > 0
}

limit_trips(u) if {
	is_number(u.start_limit_interval_sec)
	u.start_limit_interval_sec > 0
	u.start_limit_burst > 0
	u.restart_sec * u.start_limit_burst <= u.start_limit_interval_sec
}

message(name, u) := sprintf(
	"%s has Restart=%s, RestartSec=%vs and no RestartPreventExitStatus; %s, so the start limit never trips and a failing service restarts forever",
	[name, u.restart, u.restart_sec, limit_text(u)],
)

limit_text(u) := "start rate limiting is off (StartLimitIntervalSec=0)" if {
	u.start_limit_interval_sec == 0
} else := "start rate limiting is off (StartLimitBurst=0)" if {
	u.start_limit_burst == 0
} else := sprintf("%d restarts take %vs, longer than StartLimitIntervalSec=%vs", [u.start_limit_burst, u.restart_sec * u.start_limit_burst, u.start_limit_interval_sec])
