package amilint.rules.profile_allowlist_test

import data.amilint.rules.profile_allowlist

rules := {"profile-allowlist": {"severity": "medium"}}

profiles := {"k8s-gpu-node": {"allow": ["kubelet.service", "containerd.service", "systemd-*", "ssh.*"]}}

u(type, boot) := {"unit_type": type, "active_at_boot": boot, "chain": [{"from": "multi-user.target", "to": "x", "kind": ".wants"}]}

inp := {"units": {
	"kubelet.service": u("service", true),
	"systemd-journald.service": u("service", true),
	"ssh.socket": u("socket", true),
	"ecs.service": u("service", true),
	"motd-news.timer": u("timer", true),
	"cups.service": u("service", false),
	"multi-user.target": u("target", true),
}}

run(profile) := fs if {
	fs := profile_allowlist.findings with input as inp
		with data.rules as rules
		with data.profiles as profiles
		with data.params.profile as profile
}

test_default_deny if {
	{f.unit | some f in run("k8s-gpu-node")} == {"ecs.service", "motd-news.timer"}
	some f in run("k8s-gpu-node")
	contains(f.message, "profile k8s-gpu-node does not allow it")
}

test_no_profile if {
	count(run("")) == 0
}

test_unknown_profile if {
	count(run("nope")) == 0
}
