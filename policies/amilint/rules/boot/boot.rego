# METADATA
# title: The boot transaction as a whole
# description: |
#   systemd cannot queue the boot transaction (input.boot.failed: then the
#   machine reaches no target), falls back to rescue.target because
#   default.target cannot be loaded (input.boot.fallback), ordering cycles
#   cost units their start job (input.boot.ordering_cycles), or the image
#   ships files under /run/systemd (input.image.runtime_files), which PID 1
#   never sees at boot. None of them is judged on a live host, which
#   booted, and whose /run is its own.
# scope: package
# custom:
#   rule_ids:
#     - boot-transaction-fails
#     - boot-rescue-fallback
#     - boot-ordering-cycle
#     - runtime-files-shipped
package amilint.rules.boot

import data.amilint.lib

# A finding about the image as a whole, for rule id: no unit unless one is
# named.
image_finding(id, unit, message, chain, evidence) := {
	"rule_id": id,
	"title": object.get(data.rules[id], "title", ""),
	"severity": lib.severity(id),
	"unit": unit,
	"message": message,
	"chain": chain,
	"remediation": {
		"action": object.get(data.rules[id], ["remediation", "action"], "configure"),
		"units": [u | some u in [unit]; u != ""],
		"text": object.get(data.rules[id], ["remediation", "text"], ""),
	},
	"references": object.get(data.rules[id], "references", []),
	"evidence": evidence,
}

not_live if not input.live

findings contains f if {
	rule := data.rules["boot-transaction-fails"]
	lib.applies(rule)
	not_live
	failed := object.get(input, ["boot", "failed"], "")
	failed != ""
	unit := object.get(input, ["boot", "failed_unit"], "")
	chain := object.get(input, ["boot", "failed_chain"], [])
	f := image_finding(
		"boot-transaction-fails", unit,
		sprintf("the machine never reaches %s: systemd says %q%s", [target, failed, through(chain)]),
		chain, {"failed": failed},
	)
}

# The target PID 1 tries to reach.
default target := "its default target"

target := t if {
	t := object.get(input, ["boot", "target"], "")
	t != ""
}

through(chain) := sprintf(" (required through %s)", [lib.chain_text(chain)]) if count(chain) > 1

through(chain) := "" if count(chain) <= 1

findings contains f if {
	rule := data.rules["boot-rescue-fallback"]
	lib.applies(rule)
	not_live
	fallback := object.get(input, ["boot", "fallback"], "")
	fallback != ""
	default_target := object.get(input, ["boot", "default_target"], "default.target")
	f := image_finding(
		"boot-rescue-fallback", default_target,
		sprintf("default.target cannot be loaded (%s), so systemd falls back to rescue.target: the machine boots to a rescue shell with none of its services%s", [fallback, rescue_fails]),
		[], {"fallback": fallback},
	)
}

default rescue_fails := ""

rescue_fails := "; and rescue.target cannot be loaded either" if object.get(input, ["boot", "failed"], "") != ""

# One finding per ordering cycle systemd breaks by deleting a job (a
# cycle it cannot break fails the transaction: boot-transaction-fails).
findings contains f if {
	rule := data.rules["boot-ordering-cycle"]
	lib.applies(rule)
	not_live
	object.get(input, ["boot", "failed"], "") == ""
	some cycle in object.get(input, ["boot", "ordering_cycles"], [])
	deleted := object.get(cycle, "deleted", [])
	f := image_finding(
		"boot-ordering-cycle", cycle_unit(cycle),
		sprintf("the start jobs of %s are ordered in a cycle (After=/Before=); %s", [concat(", ", cycle.units), cycle_outcome(cycle, deleted)]),
		[], {"units": cycle.units, "deletable": cycle.deletable, "deleted": deleted},
	)
}

# The unit a cycle's finding names: the one that loses its job, or the
# first candidate.
cycle_unit(cycle) := cycle.deletable[0] if count(cycle.deletable) > 0

cycle_unit(cycle) := cycle.units[0] if count(cycle.deletable) == 0

cycle_outcome(cycle, deleted) := sprintf("systemd deletes the job of %s to break it, so %s do(es) not start at boot", [cycle.deletable[0], concat(", ", deleted)]) if count(deleted) > 0

cycle_outcome(cycle, deleted) := sprintf("systemd deletes one of the jobs of %s to break it, picked in hash-table order, differently from boot to boot: any of them (and the units requiring it) may not start at boot", [concat(", ", cycle.deletable)]) if count(deleted) == 0

findings contains f if {
	rule := data.rules["runtime-files-shipped"]
	lib.applies(rule)
	not_live
	files := object.get(input, ["image", "runtime_files"], [])
	count(files) > 0
	f := image_finding(
		"runtime-files-shipped", "",
		sprintf("the image ships %d file(s) under /run/systemd (%s), which a tmpfs hides at every boot; units enabled or masked there have no effect", [count(files), examples(files)]),
		[], {"runtime_files": files},
	)
}

examples(files) := concat(", ", array.slice(files, 0, 3)) if count(files) <= 3

examples(files) := sprintf("%s, …", [concat(", ", array.slice(files, 0, 3))]) if count(files) > 3
