package boot

import (
	"strings"

	"github.com/amilint/amilint/internal/systemd/unit"
)

// imageModprobes are the units unit_patch_contexts makes a unit with a
// disk image and a device policy Want: the loop, device-mapper and
// dm-verity modules, so that the block devices its policy allows exist
// ("block-loop" resolves only once "loop" is in /proc/devices).
var imageModprobes = []string{"modprobe@loop.service", "modprobe@dm_mod.service", "modprobe@dm_verity.service"}

// devicePolicies are the values config_parse_device_policy takes; any
// other, the empty one included, is ignored.
var devicePolicies = []string{"auto", "closed", "strict"}

// imageModprobeSource is the dependency part of unit_patch_contexts (252
// and 257 alike), which every unit with an execution and a cgroup context
// runs, a socket whether it runs commands or not: when the device policy
// is not "auto" (PrivateDevices=yes makes "auto" "closed") or DeviceAllow=
// keeps an entry, a unit that has RootImage= or MountImages= Wants (and
// is ordered after) imageModprobes. It returns the file that set the
// image, or "" when the unit gets none of them.
func (g *Graph) imageModprobeSource(u *Unit, sec, requested string) string {
	image := g.diskImageSource(u, sec, requested)
	if image == "" {
		return ""
	}
	policy := lastWord(u, sec, "DevicePolicy", devicePolicies, "auto")
	if policy == "auto" && lastBool(u, sec, "PrivateDevices", false) {
		policy = "closed"
	}
	if policy == "auto" && !g.deviceAllowKept(u, sec, requested) {
		return ""
	}
	return image
}

// diskImageSource is the file of the RootImage= the unit ends with, or of
// the first MountImages= entry it keeps, "" if neither. RootImage= is
// config_parse_unit_path_printf: the empty assignment unsets it, and a
// value it refuses fails the whole load (fatalSetting), so a loaded unit
// has none. MountImages= is config_parse_mount_images.
func (g *Graph) diskImageSource(u *Unit, sec, requested string) string {
	root, mounts := "", ""
	for i, o := range u.Options {
		if o.Section != sec {
			continue
		}
		switch o.Name {
		case "RootImage":
			root = ""
			if o.Value != "" {
				if _, why := absPath(g.version, requested, o.Value); why == "" {
					root = u.srcs[i]
				}
			}
		case "MountImages":
			switch {
			case o.Value == "":
				mounts = ""
			case mounts == "" && mountImagesKept(o.Value, requested, g.version):
				mounts = u.srcs[i]
			}
		}
	}
	if root != "" {
		return root
	}
	return mounts
}

// mountImagesKept reports whether one MountImages= assignment adds an
// image, as config_parse_mount_images reads it: words (unquoted, their
// backslashes kept) of "[-]SOURCE:DESTINATION[:OPTIONS...]", split at
// colons with C escapes and "\\:" decoded, whose source and destination
// resolve their specifiers to absolute paths (from 257, not below /proc
// or /sys). A word that does not parse ends the assignment.
func mountImagesKept(v, id string, version int) bool {
	for w := range unit.Words(v, true, true) {
		fields, err := colonWords(w)
		if err != nil {
			return false
		}
		if len(fields) < 2 {
			continue
		}
		src, dst := strings.TrimPrefix(fields[0], "-"), fields[1]
		if imagePath(src, id, version) && imagePath(dst, id, version) {
			return true
		}
	}
	return false
}

// imagePath reports whether a MountImages= path resolves its specifiers
// and passes path_simplify_and_warn with PATH_CHECK_ABSOLUTE (and, from
// 257, PATH_CHECK_NON_API_VFS_DEV_OK).
func imagePath(p, id string, version int) bool {
	k, why := absPath(version, id, p)
	if why != "" {
		return false
	}
	if version >= 257 && belowAPIVFS(k) && k != "/dev" && !strings.HasPrefix(k, "/dev/") {
		return false
	}
	return true
}

// colonWords is extract_many_words with ":" separators, EXTRACT_CUNESCAPE
// and EXTRACT_UNESCAPE_SEPARATORS, to the last word: runs of colons
// separate words (leading ones are skipped), a backslash starts a C escape
// or takes a colon or backslash as it is, and any other escape, or one
// that ends s, is an error.
func colonWords(s string) ([]string, error) { return colonFields(s, -1, false) }

// colonFields is colonWords reading at most max words (all when max is
// negative; an error after them goes unseen) and, with dontCoalesce,
// EXTRACT_DONT_COALESCE_SEPARATORS: every colon ends a word, so "" is one
// empty word and "a:" two words.
func colonFields(s string, max int, dontCoalesce bool) ([]string, error) {
	var out []string
	var b strings.Builder
	in := dontCoalesce
	room := func() bool { return max < 0 || len(out) < max }
	for i := 0; i < len(s) && room(); i++ {
		c := s[i]
		switch {
		case c == ':':
			if in {
				out = append(out, b.String())
				b.Reset()
				in = dontCoalesce
			}
			continue
		case c == '\\':
			if i+1 >= len(s) {
				return out, errSyntax
			}
			if n := cunescape(s[i+1:], &b); n > 0 {
				i += n
			} else if s[i+1] == ':' {
				b.WriteByte(s[i+1])
				i++
			} else {
				return out, errSyntax
			}
		default:
			b.WriteByte(c)
		}
		in = true
	}
	if in && room() {
		out = append(out, b.String())
	}
	return out, nil
}

// deviceAllowKept reports whether DeviceAllow= ends with an entry, as
// config_parse_device_allow reads each assignment: the empty one empties
// the list; otherwise the first word (unquoted) is the device, which
// must resolve its specifiers and be a "block-" or "char-" class or a
// valid device node path once simplified, and what follows it, if
// anything, must be made of the rights "r", "w" and "m".
func (g *Graph) deviceAllowKept(u *Unit, sec, requested string) bool {
	n := 0
	for _, o := range u.Options {
		if o.Section != sec || o.Name != "DeviceAllow" {
			continue
		}
		if o.Value == "" {
			n = 0
			continue
		}
		dev, rights, ok, err := unit.ExtractWord(o.Value, true, false)
		if err != nil || !ok {
			continue
		}
		k, err := expand(g.version, requested, dev, unit.PathPrintfMax)
		if err != nil {
			continue
		}
		if !strings.HasPrefix(k, "block-") && !strings.HasPrefix(k, "char-") {
			p, why := unit.SimplifyPath(g.version, k, false)
			if why != "" || !unit.ValidDeviceNodePath(p) {
				continue
			}
		}
		if strings.Trim(rights, "rwm") != "" {
			continue
		}
		n++
	}
	return n > 0
}
