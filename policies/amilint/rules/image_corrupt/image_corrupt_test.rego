package amilint.rules.image_corrupt_test

import data.amilint.rules.image_corrupt

rules := {"image-corrupt": {"id": "image-corrupt", "severity": "high", "title": "t", "remediation": {"action": "configure", "text": "x"}}}

line := "partition 2: ext4: directory block 4389 (/etc/systemd/system/multi-user.target.wants) fails its checksum"

test_each_line_is_a_high_finding if {
	fs := image_corrupt.findings with input as {"image": {"corrupt": [line, "gpt: primary header at LBA 1 fails its checksum"]}, "units": {}}
		with data.rules as rules
	count(fs) == 2
	some f in fs
	f.message == line
	f.severity == "high"
	f.rule_id == "image-corrupt"
}

test_intact_image_has_none if {
	count(image_corrupt.findings) == 0 with input as {"image": {"os_release": {}}, "units": {}} with data.rules as rules
	count(image_corrupt.findings) == 0 with input as {"image": {"corrupt": []}, "units": {}} with data.rules as rules
}

test_rule_missing_from_catalog_no_finding if {
	count(image_corrupt.findings) == 0 with input as {"image": {"corrupt": [line]}, "units": {}} with data.rules as {}
}
