package unit

import "strings"

// SimplifyPath is path_simplify_and_warn of systemd version: valid UTF-8,
// absolute when required, simplified (PathSimplify), of valid length,
// normalized. It returns the simplified path, or why it is refused.
func SimplifyPath(version int, p string, absolute bool) (string, string) {
	if !ValidUTF8(p) {
		return "", "path is not valid UTF-8"
	}
	if absolute && !strings.HasPrefix(p, "/") {
		return "", "path is not absolute"
	}
	p = PathSimplify(version, p)
	if len(p) == 0 || len(p) > PathPrintfMax {
		return "", "path has an invalid length"
	}
	for c := range strings.SplitSeq(p, "/") {
		if len(c) > 255 {
			return "", "path has an invalid length"
		}
	}
	if !PathNormalized(p) {
		return "", "path is not normalized"
	}
	return p, ""
}

// PathSimplify is path_simplify of systemd version: duplicate slashes and
// "." components go, a trailing slash goes; ".." stays, except, from 257,
// right after the root of an absolute path, which is its own parent.
func PathSimplify(version int, p string) string {
	abs := strings.HasPrefix(p, "/")
	var parts []string
	for c := range strings.SplitSeq(p, "/") {
		switch {
		case c == "" || c == ".":
			continue
		case c == ".." && abs && len(parts) == 0 && version >= 257:
			continue
		}
		parts = append(parts, c)
	}
	out := strings.Join(parts, "/")
	if abs {
		return "/" + out
	}
	if out == "" {
		return "."
	}
	return out
}

// PathNormalized is path_is_normalized: a valid path without "." or ".."
// components and without "//".
func PathNormalized(p string) bool {
	if p == "" || strings.Contains(p, "//") {
		return false
	}
	for c := range strings.SplitSeq(p, "/") {
		if c == "." || c == ".." {
			return false
		}
	}
	return true
}

// ValidDeviceNodePath is valid_device_node_path for a simplified path: a
// normalized path that path_startswith /dev/ or /run/systemd/inaccessible/
// (which /dev itself does, component by component) and does not end in a
// slash, as DeviceAllow= takes it; the node itself is not looked at.
func ValidDeviceNodePath(p string) bool {
	below := false
	for _, d := range []string{"/dev", "/run/systemd/inaccessible"} {
		if p == d || strings.HasPrefix(p, d+"/") {
			below = true
		}
	}
	return below && !strings.HasSuffix(p, "/") && PathNormalized(p)
}
