package amilint.rules.first_boot_test

import data.amilint.rules.first_boot

rules := {"first-boot-presets": {"severity": "medium"}}

inp(first, preset, state) := {
	"image": {"first_boot_presets": first, "machine_id": "uninitialized"},
	"units": {"ecs.service": {"preset": preset, "state": state, "chain": []}},
}

test_preset_enables_disabled_unit_at_first_boot if {
	some f in first_boot.findings with input as inp(true, "enable", "disabled") with data.rules as rules
	f.unit == "ecs.service"
	contains(f.message, "uninitialized")
}

test_not_first_boot if {
	count(first_boot.findings) == 0 with input as inp(false, "enable", "disabled") with data.rules as rules
}

test_preset_disable if {
	count(first_boot.findings) == 0 with input as inp(true, "disable", "disabled") with data.rules as rules
}

test_already_enabled if {
	count(first_boot.findings) == 0 with input as inp(true, "enable", "enabled") with data.rules as rules
}

test_template_without_default_instance if {
	inp := {
		"image": {"first_boot_presets": true, "machine_id": "uninitialized"},
		"units": {"serial-getty@.service": {"preset": "enable", "state": "disabled", "chain": [], "directives": {"Install": {"WantedBy": ["getty.target"]}}}},
	}
	count(first_boot.findings) == 0 with input as inp with data.rules as rules
}

test_template_with_default_instance if {
	inp := {
		"image": {"first_boot_presets": true, "machine_id": "uninitialized"},
		"units": {"x@.service": {"preset": "enable", "state": "disabled", "chain": [], "directives": {"Install": {"DefaultInstance": ["a"]}}}},
	}
	count(first_boot.findings) == 1 with input as inp with data.rules as rules
}
