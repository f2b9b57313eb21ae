package unit

import "strings"

// HiddenOrBackup reports whether systemd's FOREACH_DIRENT skips a directory
// entry of this name (hidden_or_backup_file): hidden files, lost+found,
// quota files, editor and package manager leftovers.
func HiddenOrBackup(n string) bool {
	if strings.HasPrefix(n, ".") || n == "lost+found" || n == "aquota.user" || n == "aquota.group" ||
		strings.HasSuffix(n, "~") {
		return true
	}
	d := strings.LastIndexByte(n, '.')
	if d < 0 {
		return false
	}
	switch n[d+1:] {
	case "rpmnew", "rpmsave", "rpmorig", "dpkg-old", "dpkg-new", "dpkg-tmp", "dpkg-dist", "dpkg-bak",
		"dpkg-backup", "dpkg-remove", "ucf-new", "ucf-old", "ucf-dist", "swp", "bak", "old", "new":
		return true
	}
	return false
}

// DropInDirs appends to out the subdirectory names systemd 252's
// unit_file_find_dirs looks for in each search directory for name, in its
// order: name+suffix, then those of the template (for an instance), then
// those of the dash prefix, recursively: "foo-bar@x.service" with ".d" gives
// foo-bar@x.service.d, foo-bar@.service.d, foo-.service.d,
// foo-@x.service.d, foo-@.service.d. The names are the same in every search
// directory; suffix is ".d", ".wants" or ".requires".
func DropInDirs(out []string, name, suffix string) []string {
	return dropInDirs(out, name, suffix, 0)
}

func dropInDirs(out []string, name, suffix string, depth int) []string {
	// Every step shortens the name; the bound only guards the recursion.
	if depth > 2*MaxNameLen {
		return out
	}
	out = append(out, name+suffix)
	if !Valid(name) {
		return out
	}
	inst, isInst := Instance(name)
	if isInst {
		out = dropInDirs(out, Template(name), suffix, depth+1)
	}
	prefix := Prefix(name)
	chopped := false
	for {
		dash := strings.LastIndexByte(prefix, '-')
		if dash <= 0 {
			return out
		}
		if dash+1 < len(prefix) || chopped {
			prefix = prefix[:dash+1]
			break
		}
		// A trailing dash is chopped off once, and the search goes on.
		prefix = prefix[:dash]
		chopped = true
	}
	t := Type(name)
	built := prefix + "." + t
	if isInst {
		built = prefix + "@" + inst + "." + t
	}
	if !Valid(built) {
		return out
	}
	return dropInDirs(out, built, suffix, depth+1)
}
