package amilint.rules.exposure_test

import data.amilint.rules.exposure

rules := {"service-exposure": {
	"severity": "low",
	"params": {"threshold": 9.0},
	"remediation": {"action": "configure", "text": "harden it"},
}}

svc(exposure, boot) := {
	"unit_type": "service",
	"starts_at_boot": boot,
	"active_at_boot": boot,
	"activated_by": [],
	"chain": [],
	"security": {"exposure": exposure, "level": "UNSAFE", "top": [
		{"id": "PrivateNetwork", "name": "PrivateNetwork=", "exposure": 0.5},
		{"id": "UserOrDynamicUser", "name": "User=/DynamicUser=", "exposure": 0.4},
	]},
}

inp(units) := {"systemd": {"version": 252}, "units": units}

test_above_the_threshold if {
	fs := exposure.findings with input as inp({"ssh.service": svc(9.6, true)}) with data.rules as rules
	count(fs) == 1
	some f in fs
	f.rule_id == "service-exposure"
	f.severity == "low"
	f.unit == "ssh.service"
	f.message == "ssh.service starts at boot with an exposure of 9.6 (UNSAFE), above the threshold 9.0 (systemd-analyze security of systemd 252); the checks whose fix lowers it most: PrivateNetwork= (0.5), User=/DynamicUser= (0.4)"
	f.evidence.threshold == 9.0
	f.remediation.action == "configure"
}

test_tenths if {
	exposure.tenths(9) == "9.0"
	exposure.tenths(9.6) == "9.6"
	exposure.tenths(0.05) == "0.1"
	exposure.tenths(10) == "10.0"
}

test_at_or_below_the_threshold if {
	count(exposure.findings) == 0 with input as inp({"a.service": svc(9.0, true), "b.service": svc(3.2, true)}) with data.rules as rules
}

test_only_units_active_at_boot if {
	count(exposure.findings) == 0 with input as inp({"ssh.service": svc(9.6, false)}) with data.rules as rules
}

test_activated_at_boot if {
	u := object.union(svc(9.6, false), {"active_at_boot": true, "activated_by": ["ssh.socket"]})
	some f in exposure.findings with input as inp({"ssh@.service": u}) with data.rules as rules
	startswith(f.message, "ssh@.service is activated by ssh.socket at boot")
}

test_running_on_a_live_host if {
	u := object.union(svc(9.6, false), {"active_at_boot": true, "active_now": true})
	some f in exposure.findings with input as inp({"manual.service": u}) with data.rules as rules
	startswith(f.message, "manual.service is running with an exposure of 9.6")
}

test_unscored_services_are_not_findings if {
	u := object.union(svc(0, true), {"security": {"error": "unit not loaded: bad-setting"}})
	count(exposure.findings) == 0 with input as inp({"x.service": u}) with data.rules as rules
}

test_per_unit_threshold if {
	r := {"service-exposure": object.union(rules["service-exposure"], {"unit_params": {
		"ssh.service": {"threshold": 9.7},
		"cron*.service": {"threshold": 9.8},
		"c*.service": {"threshold": 1.0},
	}})}
	units := {"ssh.service": svc(9.6, true), "cron.service": svc(9.6, true), "chrony.service": svc(3.7, true), "dbus.service": svc(9.6, true)}
	fs := exposure.findings with input as inp(units) with data.rules as r
	{f.unit | some f in fs} == {"chrony.service", "dbus.service"}
}

test_profile_tunes_threshold_and_severity if {
	profiles := {"web": {"rules": {"service-exposure": {
		"severity": "medium",
		"params": {"threshold": 5.0},
		"unit_params": {"ssh.service": {"threshold": 9.9}},
	}}}}
	units := {"ssh.service": svc(9.6, true), "nginx.service": svc(6.0, true)}
	fs := exposure.findings with input as inp(units) with data.rules as rules with data.profiles as profiles with data.params.profile as "web"
	{[f.unit, f.severity] | some f in fs} == {["nginx.service", "medium"]}
}

test_profile_unit_params_beat_rule_unit_params if {
	r := {"service-exposure": object.union(rules["service-exposure"], {"unit_params": {"ssh.service": {"threshold": 9.9}}})}
	profiles := {"strict": {"rules": {"service-exposure": {"unit_params": {"ssh.service": {"threshold": 2.0}}}}}}
	count(exposure.findings) == 1 with input as inp({"ssh.service": svc(9.6, true)}) with data.rules as r with data.profiles as profiles with data.params.profile as "strict"
}
