package amilint.rules.unneeded_test

import data.amilint.rules.unneeded

ecs_rule := {
	"id": "ecs-agent-unconfigured",
	"title": "Amazon ECS agent enabled without a cluster",
	"severity": "high",
	"kind": "unit",
	"units": ["ecs.service"],
	"needed_when": {"config_key": {"file": "/etc/ecs/ecs.config", "key": "ECS_CLUSTER"}},
	"remediation": {"action": "disable", "units": ["ecs.service"]},
}

snapd_rule := {
	"id": "snapd",
	"title": "snapd on a server",
	"severity": "low",
	"kind": "unit",
	"units": ["snapd.service", "snapd.socket", "snapd.*.service"],
	"remediation": {"action": "mask"},
}

immutable_rule := {
	"id": "unattended-upgrades",
	"severity": "medium",
	"units": ["apt-daily.timer"],
	"profiles": ["immutable"],
}

auto_upgrades_rule := {
	"id": "auto-upgrades-immutable",
	"severity": "medium",
	"units": ["apt-daily-upgrade.timer"],
	"traits": ["immutable"],
}

rules := {
	"ecs-agent-unconfigured": ecs_rule, "snapd": snapd_rule, "unattended-upgrades": immutable_rule,
	"auto-upgrades-immutable": auto_upgrades_rule,
}

chain := [
	{"from": "default.target", "to": "multi-user.target", "kind": "alias"},
	{"from": "multi-user.target", "to": "ecs.service", "kind": ".wants"},
]

unit(name, boot) := {"name": name, "active_at_boot": boot, "starts_at_boot": boot, "chain": chain}

ecs_input(keys) := {
	"units": {"ecs.service": unit("ecs.service", true)},
	"config_files": {"/etc/ecs/ecs.config": {"exists": true, "parse_ok": true, "keys": keys}},
}

test_ecs_without_cluster_is_high if {
	some f in unneeded.findings with input as ecs_input({}) with data.rules as rules
	f.rule_id == "ecs-agent-unconfigured"
	f.severity == "high"
	f.unit == "ecs.service"
	f.chain == chain
	f.message == "ecs.service starts at boot (default.target → multi-user.target → ecs.service), but it is only needed when /etc/ecs/ecs.config sets a non-empty ECS_CLUSTER: /etc/ecs/ecs.config does not set ECS_CLUSTER"
	f.remediation.commands == ["systemctl disable ecs.service"]
}

test_ecs_with_empty_cluster_is_reported if {
	some f in unneeded.findings with input as ecs_input({"ECS_CLUSTER": "  "}) with data.rules as rules
	endswith(f.message, ": /etc/ecs/ecs.config sets ECS_CLUSTER empty")
}

test_ecs_with_cluster_is_not_reported if {
	count(unneeded.findings) == 0 with input as ecs_input({"ECS_CLUSTER": "prod"}) with data.rules as rules
}

test_ecs_without_config_file_is_reported if {
	some f in unneeded.findings with input as {"units": {"ecs.service": unit("ecs.service", true)}} with data.rules as rules
	endswith(f.message, ": /etc/ecs/ecs.config does not exist")
}

test_ecs_not_at_boot_is_not_reported if {
	count(unneeded.findings) == 0 with input as {"units": {"ecs.service": unit("ecs.service", false)}} with data.rules as rules
}

test_glob_units_and_mask_remediation if {
	inp := {"units": {
		"snapd.seeded.service": unit("snapd.seeded.service", true),
		"snapd.socket": unit("snapd.socket", true),
		"ssh.service": unit("ssh.service", true),
	}}
	fs := unneeded.findings with input as inp with data.rules as rules
	{f.unit | some f in fs} == {"snapd.seeded.service", "snapd.socket"}
	some f in fs
	f.remediation.action == "mask"
	f.remediation.commands == [sprintf("systemctl mask %s", [f.unit])]
}

test_profile_rule_only_under_its_profile if {
	inp := {"units": {"apt-daily.timer": unit("apt-daily.timer", true)}}
	count(unneeded.findings) == 0 with input as inp with data.rules as rules with data.params.profile as ""
	count(unneeded.findings) == 0 with input as inp with data.rules as rules with data.params.profile as "k8s-gpu-node"
	count(unneeded.findings) == 1 with input as inp with data.rules as rules with data.params.profile as "immutable"
}

test_trait_rule_only_on_images_with_the_trait if {
	inp := {"units": {"apt-daily-upgrade.timer": unit("apt-daily-upgrade.timer", true)}}
	count(unneeded.findings) == 0 with input as inp with data.rules as rules
	count(unneeded.findings) == 0 with input as inp with data.rules as rules with data.params.traits as []
	count(unneeded.findings) == 0 with input as inp with data.rules as rules with data.params.traits as ["server"]
	fs := unneeded.findings with input as inp with data.rules as rules with data.params.traits as ["immutable", "server"]
	{f.rule_id | some f in fs} == {"auto-upgrades-immutable"}
}

test_trait_rule_needs_every_trait if {
	r := {"x": object.union(auto_upgrades_rule, {"id": "x", "traits": ["immutable", "gpu"]})}
	inp := {"units": {"apt-daily-upgrade.timer": unit("apt-daily-upgrade.timer", true)}}
	count(unneeded.findings) == 0 with input as inp with data.rules as r with data.params.traits as ["immutable"]
	count(unneeded.findings) == 1 with input as inp with data.rules as r with data.params.traits as ["gpu", "immutable"]
}

test_generic_rules_are_ignored if {
	inp := {"units": {"ecs.service": unit("ecs.service", true)}}
	count(unneeded.findings) == 0 with input as inp with data.rules as {"x": {"kind": "generic", "units": ["ecs.service"]}}
}

test_any_condition if {
	r := {"ssm": {
		"severity": "medium",
		"units": ["amazon-ssm-agent.service"],
		"needed_when": {"any": [
			{"config_valid": "/etc/amazon/ssm/amazon-ssm-agent.json"},
			{"file_exists": "/var/lib/amazon/ssm/registration"},
		]},
	}}
	base := {"units": {"amazon-ssm-agent.service": unit("amazon-ssm-agent.service", true)}}
	some f in unneeded.findings with input as base with data.rules as r
	contains(f.message, "/etc/amazon/ssm/amazon-ssm-agent.json exists and is valid or /var/lib/amazon/ssm/registration exists: none of them holds")
	bad_json := object.union(base, {"config_files": {"/etc/amazon/ssm/amazon-ssm-agent.json": {"exists": true, "parse_ok": false}}})
	count(unneeded.findings) == 1 with input as bad_json with data.rules as r
	registered := object.union(base, {"config_files": {"/var/lib/amazon/ssm/registration": {"exists": true}}})
	count(unneeded.findings) == 0 with input as registered with data.rules as r
}

test_invalid_json_config_says_why if {
	r := {"cw": {"units": ["cw.service"], "needed_when": {"config_valid": "/etc/cw.json"}}}
	inp := {
		"units": {"cw.service": unit("cw.service", true)},
		"config_files": {"/etc/cw.json": {"exists": true, "parse_ok": false, "error": "not valid JSON"}},
	}
	some f in unneeded.findings with input as inp with data.rules as r
	endswith(f.message, ": /etc/cw.json is not valid: not valid JSON")
}

test_empty_config_dir_says_why if {
	r := {"cw": {"units": ["cw.service"], "needed_when": {"config_valid": "/etc/cw.d"}}}
	inp := {
		"units": {"cw.service": unit("cw.service", true)},
		"config_files": {"/etc/cw.d": {"exists": true, "parse_ok": true, "format": "dir", "entries": []}},
	}
	some f in unneeded.findings with input as inp with data.rules as r
	endswith(f.message, ": /etc/cw.d is empty")
}
