package unit

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestNames(t *testing.T) {
	tests := []struct {
		name, typ, prefix, template, inst string
		isTemplate, isInstance, valid     bool
	}{
		{"ecs.service", "service", "ecs", "ecs.service", "", false, false, true},
		{"getty@.service", "service", "getty", "getty@.service", "", true, false, true},
		{"getty@tty1.service", "service", "getty", "getty@.service", "tty1", false, true, true},
		{"a@b@c.service", "service", "a", "a@.service", "b@c", false, true, true},
		{"dbus-org.freedesktop.ModemManager1.service", "service", "dbus-org.freedesktop.ModemManager1", "dbus-org.freedesktop.ModemManager1.service", "", false, false, true},
		{"sys-fs-fuse-connections.mount", "mount", "sys-fs-fuse-connections", "sys-fs-fuse-connections.mount", "", false, false, true},
		{"@x.service", "service", "", "@.service", "x", false, true, false},
		{"foo.conf", "", "foo.conf", "foo.conf", "", false, false, false},
		{".service", "service", "", ".service", "", false, false, false},
		{"sp ace.service", "service", "sp ace", "sp ace.service", "", false, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.typ, Type(tt.name))
			assert.Equal(t, tt.prefix, Prefix(tt.name))
			assert.Equal(t, tt.isTemplate, IsTemplate(tt.name))
			inst, ok := Instance(tt.name)
			assert.Equal(t, tt.isInstance, ok)
			assert.Equal(t, tt.inst, inst)
			assert.Equal(t, tt.template, Template(tt.name))
			assert.Equal(t, tt.valid, Valid(tt.name))
		})
	}
	assert.Equal(t, "getty@tty1.service", WithInstance("getty@.service", "tty1"))
	assert.False(t, Valid(string(make([]byte, 300))+".service"), "longer than UNIT_NAME_MAX")
}

func TestASCIILower(t *testing.T) {
	assert.Equal(t, "cap_sys_admin", ASCIILower("CAP_SYS_Admin"))
	// Only ASCII letters: UTF-8 and other bytes stay as they are.
	assert.Equal(t, "ÄÖ\xffé[@]", ASCIILower("ÄÖ\xffé[@]"))
	assert.Equal(t, "", ASCIILower(""))
}
