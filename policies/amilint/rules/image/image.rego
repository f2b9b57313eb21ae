# METADATA
# title: Images whose tree may be stale
# description: |
#   The target reader says why the tree it read may not be the state the
#   image boots with (input.image.warnings: a dirty XFS log, an external log
#   it could not check). Each warning is a finding, so CI gates and reports
#   show it, not only stderr.
# scope: package
# custom:
#   rule_id: image-stale-view
package amilint.rules.image

import data.amilint.lib

rule_id := "image-stale-view"

findings contains f if {
	rule := data.rules[rule_id]
	lib.applies(rule)
	some w in object.get(input, ["image", "warnings"], [])
	f := {
		"rule_id": rule_id,
		"title": object.get(rule, "title", ""),
		"severity": object.get(rule, "severity", "low"),
		"message": w,
		"chain": [],
		"remediation": {
			"action": object.get(rule, ["remediation", "action"], "configure"),
			"units": [],
			"text": object.get(rule, ["remediation", "text"], ""),
		},
		"references": object.get(rule, "references", []),
	}
}
