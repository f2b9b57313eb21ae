package amilint.rules.image_test

import data.amilint.rules.image

rules := {"image-stale-view": {"id": "image-stale-view", "severity": "low", "title": "t", "remediation": {"action": "configure", "text": "x"}}}

dirty := "xfs: the log is dirty (not cleanly unmounted)"

test_each_warning_is_a_finding if {
	fs := image.findings with input as {"image": {"warnings": [dirty, "xfs: external log"]}, "units": {}} with data.rules as rules
	count(fs) == 2
	some f in fs
	f.message == dirty
	f.severity == "low"
	f.remediation.action == "configure"
}

test_clean_image_has_none if {
	count(image.findings) == 0 with input as {"image": {"os": "x"}, "units": {}} with data.rules as rules
	count(image.findings) == 0 with input as {"image": {"warnings": []}, "units": {}} with data.rules as rules
}

test_rule_missing_from_catalog_no_finding if {
	count(image.findings) == 0 with input as {"image": {"warnings": [dirty]}, "units": {}} with data.rules as {}
}
