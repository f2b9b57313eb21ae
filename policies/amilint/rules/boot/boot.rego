# METADATA
# title: The boot transaction as a whole
# description: |
#   systemd cannot queue the boot transaction (input.boot.failed: then the
#   machine reaches no target), falls back to rescue.target because
#   default.target cannot be loaded (input.boot.fallback), or the image
#   ships files under /run/systemd (input.image.runtime_files), which PID 1
#   never sees at boot. None of them is judged on a live host, which
#   booted, and whose /run is its own.
# scope: package
# custom:
#   rule_ids:
#     - boot-transaction-fails
#     - boot-rescue-fallback
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
