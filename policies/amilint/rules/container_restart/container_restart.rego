# METADATA
# title: A new container per restart
# description: |
#   A service that starts at boot, restarts, and whose ExecStart starts a
#   new container (docker/podman/nerdctl/ctr run, amazon-ecs-init start)
#   creates a new container, and a new memory cgroup, at every restart.
#   Memory cgroups of removed containers that still hold page cache
#   linger as zombies the kernel keeps walking.
# scope: package
# custom:
#   rule_id: container-per-restart
package amilint.rules.container_restart

import data.amilint.lib

rule_id := "container-per-restart"

findings contains f if {
	rule := data.rules[rule_id]
	lib.applies(rule)
	some name in lib.active
	u := input.units[name]
	u.spawns_container
	u.restart != "no"
	f := lib.finding(
		object.union({"id": rule_id}, rule), name, sprintf(
			"%s starts a new container each time it starts (%s) and has Restart=%s: every restart leaves a memory cgroup behind",
			[name, u.exec_start.raw, u.restart],
		),
		u.chain,
	)
}
