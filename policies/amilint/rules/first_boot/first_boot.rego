# METADATA
# title: Presets that enable units at first boot
# description: |
#   When /etc/machine-id is missing or "uninitialized", systemd treats the
#   first boot as a first boot and applies presets to every unit. A unit
#   the image has disabled but whose preset says "enable" will then be
#   enabled on every instance, though an audit of the image shows it off.
# scope: package
# custom:
#   rule_id: first-boot-presets
package amilint.rules.first_boot

import data.amilint.lib

rule_id := "first-boot-presets"

findings contains f if {
	rule := data.rules[rule_id]
	lib.applies(rule)
	input.image.first_boot_presets
	some name, u in input.units
	u.preset == "enable"
	u.state == "disabled"
	presettable(name, u)
	f := lib.finding(
		object.union({"id": rule_id}, rule), name, sprintf(
			"%s is disabled in the image, but /etc/machine-id is %s, so systemd applies presets at first boot and its preset enables it",
			[name, input.image.machine_id],
		),
		u.chain,
	)
}

# A template can only be enabled by a preset through its DefaultInstance=.
presettable(name, _) if not contains(name, "@.")

presettable(name, u) if {
	contains(name, "@.")
	count(object.get(u, ["directives", "Install", "DefaultInstance"], [])) > 0
}
