package security

import (
	"github.com/amilint/amilint/internal/systemd/unit"
)

// userFromUnitName is user_from_unit_name: the unit's prefix when it is a
// strictly valid user name, else a hashed "_du…" name (which can never be
// root or nobody, all the assessment asks).
func userFromUnitName(id string) string {
	n := unit.Prefix(id)
	if unit.ValidUserGroupName(n, false, false) {
		return n
	}
	return "_du"
}
