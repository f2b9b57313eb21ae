# METADATA
# title: Units nobody needs, from the rule catalog
# description: |
#   Every catalog rule of kind "unit" names the units of one agent or
#   feature (the Amazon ECS agent, snapd, motd-news, cups, …) and, where
#   there is one, the condition under which the unit IS needed
#   (needed_when, e.g. /etc/ecs/ecs.config sets ECS_CLUSTER). A listed unit
#   that starts at boot, or is activated by a unit that does, is a finding
#   unless the rule's condition holds. Rules with profiles apply only under
#   one of them.
# scope: package
# custom:
#   kind: unit
package amilint.rules.unneeded

import data.amilint.lib

findings contains f if {
	some id, r in data.rules
	rule := object.union({"id": id}, r)
	object.get(rule, "kind", "unit") == "unit"
	lib.applies(rule)
	not needed(rule)
	some pattern in object.get(rule, "units", [])
	some name in lib.active_matching(pattern)
	u := input.units[name]
	f := lib.finding(rule, name, message(rule, name, u), u.chain)
}

needed(rule) if lib.needed(rule.needed_when)

message(rule, name, u) := sprintf("%s starts at boot%s, but it is only needed when %s: %s", [name, via(u), lib.describe(rule.needed_when), lib.why_not(rule.needed_when)]) if {
	rule.needed_when
} else := sprintf("%s starts at boot%s: %s", [name, via(u), object.get(rule, "title", rule.id)])

via(u) := sprintf(" (%s)", [lib.chain_text(u.chain)]) if count(u.chain) > 0

via(u) := "" if count(u.chain) == 0
