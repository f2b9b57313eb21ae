# METADATA
# title: Images with structures that fail their checksums
# description: |
#   With --allow-corrupt the readers read a structure that fails its
#   checksum as stored and say so (input.image.corrupt: a superblock,
#   an inode, a directory block, a GPT header). Each line is a finding,
#   high: the audit answered about blocks the kernel would refuse.
# scope: package
# custom:
#   rule_id: image-corrupt
package amilint.rules.image_corrupt

import data.amilint.lib

rule_id := "image-corrupt"

findings contains f if {
	rule := data.rules[rule_id]
	lib.applies(rule)
	some line in object.get(input, ["image", "corrupt"], [])
	f := {
		"rule_id": rule_id,
		"title": object.get(rule, "title", ""),
		"severity": object.get(rule, "severity", "high"),
		"message": line,
		"chain": [],
		"remediation": {
			"action": object.get(rule, ["remediation", "action"], "configure"),
			"units": [],
			"text": object.get(rule, ["remediation", "text"], ""),
		},
		"references": object.get(rule, "references", []),
	}
}
