package amilint.rules.boot_test

import data.amilint.rules.boot

rules := {
	"boot-transaction-fails": {"id": "boot-transaction-fails", "severity": "critical", "title": "t", "remediation": {"action": "configure", "text": "x"}},
	"boot-rescue-fallback": {"id": "boot-rescue-fallback", "severity": "critical", "title": "r", "remediation": {"action": "configure", "text": "y"}},
	"runtime-files-shipped": {"id": "runtime-files-shipped", "severity": "low", "title": "f", "remediation": {"action": "configure", "text": "z"}},
	"boot-ordering-cycle": {"id": "boot-ordering-cycle", "severity": "high", "title": "c", "remediation": {"action": "configure", "text": "w"}},
	"boot-offline-update": {"id": "boot-offline-update", "severity": "medium", "title": "u", "remediation": {"action": "configure", "text": "o"}},
	"boot-mount-instance-device": {"id": "boot-mount-instance-device", "severity": "high", "title": "m", "remediation": {"action": "configure", "text": "v"}},
}

test_ordering_cycle_certain if {
	fs := boot.findings with input as {
		"boot": {"target": "multi-user.target", "ordering_cycles": [{"units": ["a.service", "b.service"], "deletable": ["b.service"], "deleted": ["b.service", "c.service"]}]},
		"units": {},
	}
		with data.rules as rules
	count(fs) == 1
	some f in fs
	f.rule_id == "boot-ordering-cycle"
	f.severity == "high"
	f.unit == "b.service"
	contains(f.message, "deletes the job of b.service")
	contains(f.message, "b.service, c.service do(es) not start")
}

test_ordering_cycle_random if {
	fs := boot.findings with input as {
		"boot": {"target": "multi-user.target", "ordering_cycles": [{"units": ["a.service", "basic.target", "sockets.target"], "deletable": ["a.service", "sockets.target"]}]},
		"units": {},
	}
		with data.rules as rules
	count(fs) == 1
	some f in fs
	f.unit == "a.service"
	contains(f.message, "differently from boot to boot")
	contains(f.message, "a.service, sockets.target")
}

test_ordering_cycle_failed_is_not_repeated if {
	fs := boot.findings with input as {
		"boot": {"target": "multi-user.target", "failed": "Failed to isolate default target: Transaction order is cyclic. See system logs for details.", "failed_chain": [], "ordering_cycles": [{"units": ["a.service", "b.service"], "deletable": []}]},
		"units": {},
	}
		with data.rules as rules
	{f.rule_id | some f in fs} == {"boot-transaction-fails"}
}

chain := [
	{"from": "default.target", "to": "graphical.target", "kind": "alias", "source": "/usr/lib/systemd/system/default.target"},
	{"from": "graphical.target", "to": "multi-user.target", "kind": "Requires", "source": "/usr/lib/systemd/system/graphical.target"},
	{"from": "multi-user.target", "to": "agent.service", "kind": ".requires", "source": "/etc/systemd/system/multi-user.target.requires/agent.service"},
]

failing := {
	"boot": {
		"default_target": "graphical.target", "target": "graphical.target",
		"failed": "Failed to isolate default target: Unit agent.service is masked.",
		"failed_unit": "agent.service", "failed_chain": chain,
	},
	"image": {"runtime_files": []},
	"units": {},
}

test_failed_transaction_is_critical_and_names_the_chain if {
	fs := boot.findings with input as failing with data.rules as rules
	count(fs) == 1
	some f in fs
	f.rule_id == "boot-transaction-fails"
	f.severity == "critical"
	f.unit == "agent.service"
	f.chain == chain
	contains(f.message, "never reaches graphical.target")
	contains(f.message, "Unit agent.service is masked.")
	contains(f.message, "default.target → graphical.target → multi-user.target → agent.service")
	f.remediation.units == ["agent.service"]
}

test_fallback_to_rescue if {
	fs := boot.findings with input as {
		"boot": {"default_target": "default.target", "target": "rescue.target", "fallback": "Unit default.target is masked."},
		"units": {},
	}
		with data.rules as rules
	count(fs) == 1
	some f in fs
	f.rule_id == "boot-rescue-fallback"
	f.severity == "critical"
	contains(f.message, "Unit default.target is masked.")
}

test_fallback_from_command_line_unit if {
	fs := boot.findings with input as {
		"boot": {"default_target": "graphical.target", "command_line_unit": "nothere.target", "target": "rescue.target", "fallback": "Unit nothere.target not found."},
		"units": {},
	}
		with data.rules as rules
	count(fs) == 1
	some f in fs
	f.rule_id == "boot-rescue-fallback"
	f.unit == "nothere.target"
	startswith(f.message, "nothere.target, which the kernel command line names in default.target's place, cannot be loaded (Unit nothere.target not found.)")
}

test_rescue_fails_too if {
	fs := boot.findings with input as {
		"boot": {"default_target": "default.target", "target": "rescue.target", "fallback": "Unit default.target not found.", "failed": "rescue.target masked", "failed_unit": "rescue.target", "failed_chain": []},
		"units": {},
	}
		with data.rules as rules
	{f.rule_id | some f in fs} == {"boot-transaction-fails", "boot-rescue-fallback"}
	some f in fs
	f.rule_id == "boot-rescue-fallback"
	contains(f.message, "rescue.target cannot be loaded either")
}

test_runtime_files if {
	files := ["/run/systemd/system/a.service", "/run/systemd/system/multi-user.target.wants/a.service", "/run/systemd/transient/t.service", "/run/systemd/generator/g.service"]
	fs := boot.findings with input as {"boot": {"target": "graphical.target"}, "image": {"runtime_files": files}, "units": {}} with data.rules as rules
	count(fs) == 1
	some f in fs
	f.rule_id == "runtime-files-shipped"
	f.severity == "low"
	contains(f.message, "4 file(s)")
	contains(f.message, "/run/systemd/system/a.service, ")
	f.evidence.runtime_files == files
}

test_healthy_boot_has_none if {
	count(boot.findings) == 0 with input as {"boot": {"default_target": "graphical.target", "target": "graphical.target"}, "image": {"runtime_files": []}, "units": {}} with data.rules as rules
}

test_not_on_a_live_host if {
	live := object.union(failing, {"live": {"hostname": "h"}, "image": {"runtime_files": ["/run/systemd/x"]}})
	count(boot.findings) == 0 with input as live with data.rules as rules
}

test_rules_missing_from_catalog_no_finding if {
	count(boot.findings) == 0 with input as failing with data.rules as {}
}

# mount is the facts of a mount unit of What= what that local-fs.target
# pulls in by kind, from an fstab entry (the generator's output) or not.
mount(name, what, kind, fstab) := {
	"unit_type": "mount",
	"starts_at_boot": true,
	"directives": {"Mount": {"What": ["/dev/old", what], "Where": ["/data"]}},
	"chain": [
		{"from": "default.target", "to": "multi-user.target", "kind": "alias", "source": "/lib/systemd/system/default.target"},
		{"from": "multi-user.target", "to": "basic.target", "kind": "Requires", "source": "/lib/systemd/system/multi-user.target"},
		{"from": "basic.target", "to": "sysinit.target", "kind": "Requires", "source": "/lib/systemd/system/basic.target"},
		{"from": "sysinit.target", "to": "local-fs.target", "kind": "Wants", "source": "/lib/systemd/system/sysinit.target"},
		{"from": "local-fs.target", "to": name, "kind": kind, "source": sprintf("%s/local-fs.target.%s/%s", [dir(fstab), trim_prefix(kind, "."), name])},
	],
}

dir(true) := "/run/systemd/generator"

dir(false) := "/etc/systemd/system"

instance_devices := [
	"/dev/xvdf", "/dev/xvdf1", "/dev/sdb", "/dev/sdb1", "/dev/vdb", "/dev/nvme1n1", "/dev/nvme1n1p2", "/dev/nvme12n1",
	"/dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_vol0123456789abcdef0",
	"/dev/disk/by-id/nvme-Amazon_EC2_NVMe_Instance_Storage_AWS1234",
]

image_devices := [
	"/dev/xvda1", "/dev/sda1", "/dev/nvme0n1p1", "/dev/vda2", "/dev/disk/by-label/UEFI",
	"/dev/disk/by-uuid/0a1b2c3d-0000-4000-8000-000000000000", "fs-0123.efs.us-east-1.amazonaws.com:/",
	"tmpfs", "/dev/xvdf/x", "/dev/sdb-x", "/dev/mapper/vg-data",
]

test_required_instance_disk if {
	every d in instance_devices {
		fs := boot.findings with input as {"units": {"data.mount": mount("data.mount", d, ".requires", true)}} with data.rules as rules
		count(fs) == 1
		some f in fs
		f.rule_id == "boot-mount-instance-device"
		f.severity == "high"
		f.unit == "data.mount"
		f.evidence == {"what": d, "where": "/data", "required_by": "/run/systemd/generator/local-fs.target.requires/data.mount"}
		contains(f.message, sprintf("data.mount mounts %s, ", [d]))
		contains(f.message, "(an /etc/fstab entry without nofail)")
		contains(f.message, "emergency.target")
	}
}

test_required_instance_disk_unit_file if {
	fs := boot.findings with input as {"units": {"data.mount": mount("data.mount", "/dev/xvdf", ".requires", false)}} with data.rules as rules
	some f in fs
	contains(f.message, "(through /etc/systemd/system/local-fs.target.requires/data.mount)")
	contains(f.message, "a second disk by its kernel name")
}

test_image_disks_are_not_instance_disks if {
	every d in image_devices {
		count(boot.findings) == 0 with input as {"units": {"data.mount": mount("data.mount", d, ".requires", true)}} with data.rules as rules
	}
}

test_wanted_mount_is_no_hazard if {
	# nofail: local-fs.target only wants the mount.
	count(boot.findings) == 0 with input as {"units": {"data.mount": mount("data.mount", "/dev/xvdf", ".wants", true)}} with data.rules as rules
}

test_mount_not_at_boot_is_no_hazard if {
	m := object.union(mount("data.mount", "/dev/xvdf", ".requires", true), {"starts_at_boot": false})
	count(boot.findings) == 0 with input as {"units": {"data.mount": m}} with data.rules as rules
}

test_mount_required_by_another_unit_is_no_hazard if {
	# A service's RequiresMountsFor= fails that service, not local-fs.target.
	m := mount("data.mount", "/dev/xvdf", ".requires", true)
	chain := array.concat(array.slice(m.chain, 0, 4), [{"from": "app.service", "to": "data.mount", "kind": "Requires", "source": "/etc/systemd/system/app.service"}])
	count(boot.findings) == 0 with input as {"units": {"data.mount": object.union(m, {"chain": chain})}} with data.rules as rules
}

test_instance_disk_not_on_a_live_host if {
	count(boot.findings) == 0 with input as {"live": {"hostname": "h"}, "units": {"data.mount": mount("data.mount", "/dev/xvdf", ".requires", true)}} with data.rules as rules
}

# disk is a disk image's facts: an EFI partition and the root filesystem.
disk := {"other_volumes": [], "volumes": [
	{"where": "partition 1", "type": "vfat", "uuid": "1A2B-3C4D", "label": "UEFI", "partuuid": "5b3f4b8e-1c2d-4e5f-8a9b-0c1d2e3f4a5b", "partlabel": "EFI\\x20System"},
	{"where": "partition 2", "type": "ext4", "uuid": "0a1b2c3d-0000-4000-8000-000000000000", "label": "cloudimg-rootfs", "partuuid": "6c4f5c9f-2d3e-4f60-9bac-1d2e3f4a5b6c", "partlabel": ""},
]}

missing_devices := [
	"/dev/disk/by-uuid/0a1b2c3d-0000-4000-8000-ffffffffffff",
	"/dev/disk/by-uuid/0A1B2C3D-0000-4000-8000-000000000000", # udev's link is lower case
	"/dev/disk/by-label/data",
	"/dev/disk/by-partuuid/00000000-02",
	"/dev/disk/by-partlabel/data",
]

present_devices := [
	"/dev/disk/by-uuid/0a1b2c3d-0000-4000-8000-000000000000",
	"/dev/disk/by-uuid/1A2B-3C4D",
	"/dev/disk/by-label/cloudimg-rootfs",
	"/dev/disk/by-partuuid/6c4f5c9f-2d3e-4f60-9bac-1d2e3f4a5b6c",
	"/dev/disk/by-partlabel/EFI\\x20System",
]

test_mount_of_a_filesystem_not_on_the_disk if {
	every d in missing_devices {
		fs := boot.findings with input as {"image": {"disk": disk}, "units": {"data.mount": mount("data.mount", d, ".requires", true)}} with data.rules as rules
		count(fs) == 1
		some f in fs
		f.rule_id == "boot-mount-instance-device"
		f.severity == "high"
		f.evidence.what == d
		f.evidence.disk_volumes == disk.volumes
		contains(f.message, sprintf("data.mount mounts %s, a filesystem on no volume of the image's disk", [d]))
		contains(f.message, "(an /etc/fstab entry without nofail)")
	}
}

test_mount_of_a_filesystem_not_on_the_disk_lists_the_disk if {
	fs := boot.findings with input as {"image": {"disk": disk}, "units": {"data.mount": mount("data.mount", "/dev/disk/by-uuid/x", ".requires", true)}} with data.rules as rules
	some f in fs
	contains(f.message, "(its volumes' filesystem UUIDs: 1A2B-3C4D (partition 1), 0a1b2c3d-0000-4000-8000-000000000000 (partition 2))")
	fs2 := boot.findings with input as {"image": {"disk": disk}, "units": {"data.mount": mount("data.mount", "/dev/disk/by-partlabel/x", ".requires", true)}} with data.rules as rules
	some f2 in fs2
	contains(f2.message, "(its volumes' PARTLABELs: EFI\\x20System (partition 1))")
	nolabels := object.union(disk, {"volumes": [{"where": "whole disk", "type": "ext4", "uuid": "u", "label": "", "partuuid": "", "partlabel": ""}]})
	fs3 := boot.findings with input as {"image": {"disk": nolabels}, "units": {"data.mount": mount("data.mount", "/dev/disk/by-label/x", ".requires", true)}} with data.rules as rules
	some f3 in fs3
	contains(f3.message, "(none of its volumes has one)")
}

test_mount_of_a_filesystem_on_the_disk if {
	every d in present_devices {
		count(boot.findings) == 0 with input as {"image": {"disk": disk}, "units": {"data.mount": mount("data.mount", d, ".requires", true)}} with data.rules as rules
	}
}

test_unknown_disk_is_not_judged if {
	every d in missing_devices {
		# A directory, a tarball, a container image: no disk.
		count(boot.findings) == 0 with input as {"units": {"data.mount": mount("data.mount", d, ".requires", true)}} with data.rules as rules
		count(boot.findings) == 0 with input as {"image": {"os_release": {}}, "units": {"data.mount": mount("data.mount", d, ".requires", true)}} with data.rules as rules

		# An AMI with another EBS snapshot: its filesystems are unknown.
		other := object.union(disk, {"other_volumes": ["/dev/sdb snap-0123"]})
		count(boot.findings) == 0 with input as {"image": {"disk": other}, "units": {"data.mount": mount("data.mount", d, ".requires", true)}} with data.rules as rules
	}
}

test_missing_filesystem_wanted_is_no_hazard if {
	count(boot.findings) == 0 with input as {"image": {"disk": disk}, "units": {"data.mount": mount("data.mount", "/dev/disk/by-label/data", ".wants", true)}} with data.rules as rules
}

update_chain(source) := [
	{"from": "default.target", "to": "system-update.target", "kind": "alias", "source": source},
]

test_offline_update_flag if {
	src := "/run/systemd/generator.early/default.target"
	fs := boot.findings with input as {
		"boot": {"default_target": "system-update.target", "target": "system-update.target"},
		"units": {"system-update.target": {"chain": update_chain(src)}},
	}
		with data.rules as rules
	count(fs) == 1
	some f in fs
	f.rule_id == "boot-offline-update"
	f.severity == "medium"
	f.unit == "system-update.target"
	contains(f.message, "the image ships the offline-update flag")
	f.evidence == {"default_target": "system-update.target", "source": src}
}

test_offline_update_set_default if {
	fs := boot.findings with input as {
		"boot": {"default_target": "system-update.target", "target": "system-update.target"},
		"units": {"system-update.target": {"chain": update_chain("/etc/systemd/system/default.target")}},
	}
		with data.rules as rules
	some f in fs
	contains(f.message, "(through /etc/systemd/system/default.target)")
}

test_command_line_unit_skips_offline_update if {
	count(boot.findings) == 0 with input as {
		"boot": {"default_target": "system-update.target", "command_line_unit": "multi-user.target", "target": "multi-user.target"},
		"units": {"system-update.target": {"chain": update_chain("/run/systemd/generator.early/default.target")}},
	}
		with data.rules as rules
}

test_normal_default_is_no_offline_update if {
	count(boot.findings) == 0 with input as {"boot": {"default_target": "graphical.target", "target": "graphical.target"}, "units": {}} with data.rules as rules
}
