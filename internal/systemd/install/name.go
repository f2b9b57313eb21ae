package install

import (
	"errors"
	"strings"

	"github.com/amilint/amilint/internal/systemd/unit"
)

// errInvalid is systemd's EINVAL for names: the name is not a valid unit
// name of the kind asked for.
var errInvalid = errors.New("invalid unit name")

// nameKind is systemd's UnitNameFlags.
type nameKind int

const (
	namePlain nameKind = 1 << iota
	nameInstance
	nameTemplate
	nameAny = namePlain | nameInstance | nameTemplate
)

// unitNameMax is systemd's UNIT_NAME_MAX: a name must be shorter.
const unitNameMax = 256

// isUnitType reports whether t is one of systemd 252's unit types.
func isUnitType(t string) bool {
	switch t {
	case "service", "mount", "swap", "socket", "target", "device", "automount", "timer", "path", "slice", "scope":
		return true
	}
	return false
}

// nameIsValid ports unit_name_is_valid: several '@' are allowed, only the
// first one counts.
func nameIsValid(n string, flags nameKind) bool {
	if n == "" || len(n) >= unitNameMax {
		return false
	}
	e := strings.LastIndexByte(n, '.')
	if e <= 0 {
		return false
	}
	if !isUnitType(n[e+1:]) {
		return false
	}
	at := -1
	for i := 0; i < e; i++ {
		c := n[i]
		if c == '@' && at < 0 {
			at = i
		}
		if !unit.ValidChar(c) {
			return false
		}
	}
	if at == 0 {
		return false
	}
	if flags&namePlain != 0 && at < 0 {
		return true
	}
	if flags&nameInstance != 0 && at >= 0 && e > at+1 {
		return true
	}
	if flags&nameTemplate != 0 && at >= 0 && e == at+1 {
		return true
	}
	return false
}

// nameType returns the type suffix of a valid name.
func nameType(n string) string {
	return n[strings.LastIndexByte(n, '.')+1:]
}

// nameInstanceOf ports unit_name_to_instance: the kind and the text between
// the first '@' and the last '.'.
func nameInstanceOf(n string) (nameKind, string, error) {
	if !nameIsValid(n, nameAny) {
		return 0, "", errInvalid
	}
	p := strings.IndexByte(n, '@')
	if p < 0 {
		return namePlain, "", nil
	}
	rest := n[p+1:]
	d := strings.LastIndexByte(rest, '.')
	if d < 0 {
		return 0, "", errInvalid
	}
	if d > 0 {
		return nameInstance, rest[:d], nil
	}
	return nameTemplate, "", nil
}

// nameTemplateOf ports unit_name_template.
func nameTemplateOf(n string) (string, error) {
	if !nameIsValid(n, nameInstance|nameTemplate) {
		return "", errInvalid
	}
	a := strings.IndexByte(n, '@')
	e := strings.LastIndexByte(n, '.')
	return n[:a+1] + n[e:], nil
}

// instanceIsValid ports unit_instance_is_valid.
func instanceIsValid(i string) bool {
	if i == "" {
		return false
	}
	for k := 0; k < len(i); k++ {
		if !unit.ValidChar(i[k]) {
			return false
		}
	}
	return true
}

// nameReplaceInstance ports unit_name_replace_instance.
func nameReplaceInstance(f, inst string) (string, error) {
	if !nameIsValid(f, nameInstance|nameTemplate) || !instanceIsValid(inst) {
		return "", errInvalid
	}
	a := strings.IndexByte(f, '@')
	e := strings.LastIndexByte(f, '.')
	s := f[:a+1] + inst + f[e:]
	if !nameIsValid(s, nameInstance) {
		return "", errInvalid
	}
	return s, nil
}

// namePrefix ports unit_name_to_prefix.
func namePrefix(n string) (string, error) {
	if !nameIsValid(n, nameAny) {
		return "", errInvalid
	}
	p := strings.IndexByte(n, '@')
	if p < 0 {
		p = strings.LastIndexByte(n, '.')
	}
	return n[:p], nil
}

// namePrefixAndInstance ports unit_name_to_prefix_and_instance.
func namePrefixAndInstance(n string) (string, error) {
	if !nameIsValid(n, nameAny) {
		return "", errInvalid
	}
	return n[:strings.LastIndexByte(n, '.')], nil
}

// typeMayTemplate ports unit_type_may_template.
func typeMayTemplate(t string) bool {
	switch t {
	case "service", "socket", "target", "timer", "path":
		return true
	}
	return false
}

// typeMayAlias ports unit_type_may_alias.
func typeMayAlias(t string) bool {
	switch t {
	case "service", "socket", "target", "device", "timer", "path":
		return true
	}
	return false
}

// validateAliasSymlink ports unit_validate_alias_symlink_and_warn: whether a
// symlink named src may point at the unit file named dst inside the search
// path.
func validateAliasSymlink(src, dst string) error {
	srcKind, srcInst, err := nameInstanceOf(src)
	if err != nil {
		return errInvalid
	}
	st := nameType(src)
	if !typeMayAlias(st) {
		return errors.New("symlinks are not allowed for units of this type")
	}
	if srcKind != namePlain && !typeMayTemplate(st) {
		return errors.New("templates not allowed for this unit type")
	}
	if src == dst {
		return errors.New("unit self-alias")
	}
	dstKind, dstInst, err := nameInstanceOf(dst)
	if err != nil {
		return errors.New("alias target is not a valid unit name")
	}
	if !(dstKind == srcKind || (srcKind == nameInstance && dstKind == nameTemplate)) {
		return errors.New("alias target name type does not match")
	}
	if dstKind == nameInstance && srcInst != dstInst {
		return errors.New("alias target instance does not match")
	}
	if nameType(dst) != st {
		return errors.New("alias target has an incompatible suffix")
	}
	return nil
}
