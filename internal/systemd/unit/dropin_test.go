package unit

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestDropInDirs(t *testing.T) {
	tests := []struct {
		name, suffix string
		want         []string
	}{
		{"ecs.service", ".d", []string{"ecs.service.d"}},
		{"foo-bar-baz.service", ".d", []string{"foo-bar-baz.service.d", "foo-bar-.service.d", "foo-.service.d"}},
		// A trailing dash is chopped once: foo-bar-.service looks at foo-.service.d.
		{"foo-bar-.service", ".wants", []string{"foo-bar-.service.wants", "foo-.service.wants"}},
		{"getty@tty1.service", ".d", []string{"getty@tty1.service.d", "getty@.service.d"}},
		// An instance keeps its instance in the prefix names.
		{"foo-bar@x.service", ".d", []string{
			"foo-bar@x.service.d", "foo-bar@.service.d", "foo-.service.d", "foo-@x.service.d", "foo-@.service.d",
		}},
		{"-.slice", ".d", []string{"-.slice.d"}},
		{"a--b.service", ".requires", []string{"a--b.service.requires", "a--.service.requires", "a-.service.requires"}},
		// An invalid name is looked for as such, and nothing more.
		{"bad name-x.service", ".d", []string{"bad name-x.service.d"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, DropInDirs(nil, tt.name, tt.suffix))
		})
	}
}

func TestHiddenOrBackup(t *testing.T) {
	for n, want := range map[string]bool{
		"ecs.service": false, ".hidden": true, "lost+found": true, "aquota.user": true, "aquota.group": true,
		"x.conf~": true, "x.conf.dpkg-old": true, "x.conf.ucf-dist": true, "x.swp": true, "x.bak": true,
		"x.service.new": true, "dpkg-old": false, "10-x.conf": false, "x.rpmnew": true,
	} {
		assert.Equal(t, want, HiddenOrBackup(n), n)
	}
}
