package bus

import (
	"testing"

	"github.com/godbus/dbus/v5"
	"github.com/stretchr/testify/assert"
)

func TestUnitName(t *testing.T) {
	for p, want := range map[dbus.ObjectPath]string{
		"/org/freedesktop/systemd1/unit/ssh_2eservice":                   "ssh.service",
		"/org/freedesktop/systemd1/unit/getty_40tty1_2eservice":          "getty@tty1.service",
		"/org/freedesktop/systemd1/unit/systemd_2dfsck_2droot_2eservice": "systemd-fsck-root.service",
		"/org/freedesktop/systemd1/unit/_31_2dfirst_2eservice":           "1-first.service",
		"/org/freedesktop/systemd1/unit/trailing_":                       "trailing_",
		"/org/freedesktop/systemd1/unit/bad_zz":                          "bad_zz",
	} {
		assert.Equal(t, want, unitName(p), string(p))
	}
}
