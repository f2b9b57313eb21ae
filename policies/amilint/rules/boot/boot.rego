# METADATA
# title: The boot transaction as a whole
# description: |
#   systemd cannot queue the boot transaction (input.boot.failed: then the
#   machine reaches no target), falls back to rescue.target because
#   default.target cannot be loaded (input.boot.fallback), ordering cycles
#   cost units their start job (input.boot.ordering_cycles), or the image
#   ships files under /run/systemd (input.image.runtime_files), which PID 1
#   never sees at boot, or local-fs.target requires a mount of a disk only
#   some instances have (units.*.directives.Mount.What and the chain).
#   None of them is judged on a live host, which booted, and whose /run is
#   its own; or the image boots into the offline-update mode
#   (input.boot.default_target is system-update.target).
# scope: package
# custom:
#   rule_ids:
#     - boot-transaction-fails
#     - boot-rescue-fallback
#     - boot-ordering-cycle
#     - runtime-files-shipped
#     - boot-mount-instance-device
#     - boot-offline-update
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
	f := image_finding(
		"boot-rescue-fallback", start_unit,
		sprintf("%s cannot be loaded (%s), so systemd falls back to rescue.target: the machine boots to a rescue shell with none of its services%s", [start_what, fallback, rescue_fails]),
		[], {"fallback": fallback},
	)
}

# The unit PID 1 was to start: the one the kernel command line names, else
# default.target (as what it resolves to).
start_unit := u if {
	u := object.get(input, ["boot", "command_line_unit"], "")
	u != ""
} else := object.get(input, ["boot", "default_target"], "default.target")

start_what := sprintf("%s, which the kernel command line names in default.target's place,", [start_unit]) if {
	object.get(input, ["boot", "command_line_unit"], "") != ""
} else := "default.target"

default rescue_fails := ""

rescue_fails := "; and rescue.target cannot be loaded either" if object.get(input, ["boot", "failed"], "") != ""

# One finding per ordering cycle systemd breaks by deleting a job (a
# cycle it cannot break fails the transaction: boot-transaction-fails).
findings contains f if {
	rule := data.rules["boot-ordering-cycle"]
	lib.applies(rule)
	not_live
	object.get(input, ["boot", "failed"], "") == ""
	some cycle in object.get(input, ["boot", "ordering_cycles"], [])
	deleted := object.get(cycle, "deleted", [])
	f := image_finding(
		"boot-ordering-cycle", cycle_unit(cycle),
		sprintf("the start jobs of %s are ordered in a cycle (After=/Before=); %s", [concat(", ", cycle.units), cycle_outcome(cycle, deleted)]),
		[], {"units": cycle.units, "deletable": cycle.deletable, "deleted": deleted},
	)
}

# The unit a cycle's finding names: the one that loses its job, or the
# first candidate.
cycle_unit(cycle) := cycle.deletable[0] if count(cycle.deletable) > 0

cycle_unit(cycle) := cycle.units[0] if count(cycle.deletable) == 0

cycle_outcome(cycle, deleted) := sprintf("systemd deletes the job of %s to break it, so %s do(es) not start at boot", [cycle.deletable[0], concat(", ", deleted)]) if count(deleted) > 0

cycle_outcome(cycle, deleted) := sprintf("systemd deletes one of the jobs of %s to break it, picked in hash-table order, differently from boot to boot: any of them (and the units requiring it) may not start at boot", [concat(", ", cycle.deletable)]) if count(deleted) == 0

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

# A mount local-fs.target requires (an /etc/fstab entry without nofail, a
# mount unit RequiredBy=local-fs.target) whose device is a disk only some
# instances have: when it is missing, local-fs.target fails and systemd
# isolates emergency.target.
findings contains f if {
	rule := data.rules["boot-mount-instance-device"]
	lib.applies(rule)
	not_live
	some name, m in required_mounts
	kind := instance_disk(m.what)
	f := image_finding(
		"boot-mount-instance-device", name,
		sprintf("%s mounts %s, %s, and local-fs.target requires it (%s): an instance launched without that disk, or on a type that names it differently, waits for it (90 s by default), the mount fails and systemd boots to emergency.target, with no network and no SSH", [name, m.what, kind, required_how(m.last)]),
		m.unit.chain, {"what": m.what, "where": mount_where(m.unit, name), "required_by": m.last.source},
	)
}

# The same mount naming, by UUID, label, PARTUUID or PARTLABEL (the
# /dev/disk/by-* link systemd-fstab-generator turns UUID= and the others
# into), a filesystem that no volume of the image's disk has: a scratch
# volume formatted while the image was built. Judged only when the target
# is a disk image whose every volume was read (image.disk is present) and the
# image boots with no volume whose filesystem is unknown (an AMI's other
# EBS snapshots).
findings contains f if {
	rule := data.rules["boot-mount-instance-device"]
	lib.applies(rule)
	not_live
	disk := input.image.disk
	count(object.get(disk, "other_volumes", [])) == 0
	some name, m in required_mounts
	some field, value in disk_link(m.what)
	not disk_has(disk, field, value)
	f := image_finding(
		"boot-mount-instance-device", name,
		sprintf("%s mounts %s, a filesystem on no volume of the image's disk (%s), and local-fs.target requires it (%s): every instance launched from the image waits for it (90 s by default), the mount fails and systemd boots to emergency.target, with no network and no SSH", [name, m.what, disk_has_what(disk, field), required_how(m.last)]),
		m.unit.chain, {"what": m.what, "where": mount_where(m.unit, name), "required_by": m.last.source, "disk_volumes": disk.volumes},
	)
}

# required_mounts are the mount units starting at boot that
# local-fs.target requires, with their last What= and the requiring edge.
required_mounts[name] := {"unit": u, "what": what, "last": last} if {
	some name, u in input.units
	u.unit_type == "mount"
	u.starts_at_boot
	count(u.chain) > 0
	last := u.chain[count(u.chain) - 1]
	last.from == "local-fs.target"
	last.kind in required_kinds
	what := mount_what(u)
}

# disk_link maps a /dev/disk/by-uuid, by-label, by-partuuid or
# by-partlabel path to the volume field it names and the value.
disk_link(what) := {field: value} if {
	some field in ["uuid", "label", "partuuid", "partlabel"]
	prefix := sprintf("/dev/disk/by-%s/", [field])
	startswith(what, prefix)
	value := substring(what, count(prefix), -1)
	value != ""
	not contains(value, "/")
}

disk_has(disk, field, value) if {
	some v in disk.volumes
	v[field] == value
}

# disk_has_what says what the disk's volumes are named by field.
disk_has_what(disk, field) := sprintf("its volumes' %s: %s", [disk_field_names[field], concat(", ", names)]) if {
	names := [sprintf("%s (%s)", [v[field], v.where]) | some v in disk.volumes; v[field] != ""]
	count(names) > 0
} else := "none of its volumes has one"

disk_field_names := {"uuid": "filesystem UUIDs", "label": "filesystem labels", "partuuid": "PARTUUIDs", "partlabel": "PARTLABELs"}

# The edge kinds by which a unit requires the next.
required_kinds := {"Requires", ".requires", "BindsTo", "Requisite"}

# The last What= of the unit's [Mount] section.
mount_what(u) := whats[count(whats) - 1] if {
	whats := object.get(u, ["directives", "Mount", "What"], [])
	count(whats) > 0
}

mount_where(u, name) := wheres[count(wheres) - 1] if {
	wheres := object.get(u, ["directives", "Mount", "Where"], [])
	count(wheres) > 0
} else := name

# instance_disk says how a device path names a disk that depends on the
# instance: a second disk by its kernel name, or one EBS volume or
# instance-store disk by its id. Undefined for anything else (the root
# disk, UUID=, LABEL=, a network file system).
instance_disk(what) := "a second disk by its kernel name, which the instance's attachments and type decide" if {
	regex.match(`^/dev/(xvd[b-z][a-z]?|sd[b-z][a-z]?|vd[b-z][a-z]?|hd[b-z]|nvme[1-9][0-9]*n[0-9]+)(p?[0-9]+)?$`, what)
}

instance_disk(what) := "one EBS volume by its id, which no other instance has" if {
	startswith(what, "/dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_vol")
}

instance_disk(what) := "an instance-store disk, which only some instance types have" if {
	startswith(what, "/dev/disk/by-id/nvme-Amazon_EC2_NVMe_Instance_Storage_")
}

# systemd-fstab-generator links an fstab entry without nofail into
# local-fs.target.requires/ of the generator directory amilint runs it into.
required_how(last) := "an /etc/fstab entry without nofail" if {
	startswith(last.source, "/run/systemd/generator/")
} else := sprintf("through %s", [last.source])

# default.target is system-update.target: systemd-system-update-generator
# found /system-update (or /etc/system-update), or the image set it so.
findings contains f if {
	rule := data.rules["boot-offline-update"]
	lib.applies(rule)
	not_live
	object.get(input, ["boot", "default_target"], "") == "system-update.target"
	object.get(input, ["boot", "command_line_unit"], "") == ""
	chain := object.get(input, ["units", "system-update.target", "chain"], [])
	f := image_finding(
		"boot-offline-update", "system-update.target",
		sprintf("default.target is system-update.target (%s): every instance boots first into systemd's offline-update mode, with none of the image's services, no network and no SSH, runs the update services, if any, and reboots", [update_how(chain)]),
		chain, {"default_target": "system-update.target", "source": update_source(chain)},
	)
}

update_source(chain) := chain[0].source if count(chain) > 0

else := ""

update_how(chain) := "the image ships the offline-update flag /system-update or /etc/system-update, and systemd-system-update-generator links default.target to it" if {
	startswith(update_source(chain), "/run/systemd/generator.early/")
} else := sprintf("through %s", [update_source(chain)]) if {
	update_source(chain) != ""
} else := "the image sets it"
