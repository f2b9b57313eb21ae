package fix

import (
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/rules"
)

// debianRsyslogConf is the part of Debian 12's /etc/rsyslog.conf that
// says where rsyslogd listens and what it includes.
const debianRsyslogConf = `# /etc/rsyslog.conf configuration file for rsyslog
#
#################
#### MODULES ####
#################

module(load="imuxsock") # provides support for local system logging
module(load="imklog")   # provides kernel logging support
#module(load="immark")  # provides --MARK-- message capability

# provides UDP syslog reception
#module(load="imudp")
#input(type="imudp" port="514")

$FileOwner root
$FileGroup adm
$WorkDirectory /var/spool/rsyslog

#
# Include all config files in /etc/rsyslog.d/
#
$IncludeConfig /etc/rsyslog.d/*.conf

*.*;auth,authpriv.none		-/var/log/syslog
`

// rsyslogImage is an image's rsyslog configuration: Debian's, with
// Postfix's and HAProxy's files as their packages ship them, and the
// other ways a configuration asks for a socket or includes a file.
func rsyslogImage() fstest.MapFS {
	return fstest.MapFS{
		"etc/rsyslog.conf": {Data: []byte(debianRsyslogConf + "include(file=\"/etc/rsyslog.extra\" mode=\"optional\")\n")},
		"etc/rsyslog.d/postfix.conf": {Data: []byte("# Create an additional socket in postfix's chroot in order not to break\n" +
			"# mail logging when rsyslog is restarted.  If the directory is missing,\n" +
			"# rsyslog will silently skip creating the socket.\n$AddUnixListenSocket /var/spool/postfix/dev/log\n")},
		"etc/rsyslog.d/49-haproxy.conf": {Data: []byte("# Create an additional socket in haproxy's chroot in order to allow logging via\n" +
			"# /dev/log to chroot'ed HAProxy processes\n$AddUnixListenSocket /var/lib/haproxy/dev/log\n\n" +
			"# Send HAProxy messages to a dedicated logfile\n:programname, startswith, \"haproxy\" {\n  /var/log/haproxy.log\n  stop\n}\n")},
		// RainerScript over several lines, names in any case, a ")" in a
		// string, comments of both kinds around what does not count.
		"etc/rsyslog.d/60-app.conf": {Data: []byte("/* an app in its chroot:\n$AddUnixListenSocket /in/a/comment/log\n*/\n" +
			"Input(\n  Type=\"imuxsock\"   # the chroot's socket\n  Socket=\"/srv/app (chroot)/dev/log\"\n  CreatePath=\"on\")\n" +
			"input(type=\"imuxsock\" socket='/var/lib/app/dev/log')\n" +
			"input(type=\"imudp\" port=\"514\" socket=\"/not/imuxsock\")\n" +
			"#$AddUnixListenSocket /commented/out/log\n" +
			"$addunixlistensocket\t/var/lib/lower/dev/log\n" +
			"$AddUnixListenSocket relative/log\n" +
			"$AddUnixListenSocket /var/log/app/log\n" +
			"$IncludeConfig /etc/rsyslog.d/*.conf\n")}, // a loop: read once
		"etc/rsyslog.d/70-old.conf.dpkg-old": {Data: []byte("$AddUnixListenSocket /not/a/conf/file/log\n")},
		"etc/rsyslog.d/.hidden.conf":         {Data: []byte("$AddUnixListenSocket /hidden/log\n")},
		"etc/rsyslog.extra/x.conf":           {Data: []byte("$AddUnixListenSocket /var/lib/extra/dev/log\n$IncludeConfig /etc/*/y.conf\n")},
		"etc/rsyslog.extra/z/y.conf":         {Data: []byte("$AddUnixListenSocket /wildcard/dir/log\n")},
	}
}

func TestRsyslogSockets(t *testing.T) {
	got := rsyslogSockets(rsyslogImage())
	assert.Equal(t, []listenSocket{
		{"/var/lib/haproxy/dev/log", "/etc/rsyslog.d/49-haproxy.conf:3"},
		{"/srv/app (chroot)/dev/log", "/etc/rsyslog.d/60-app.conf:4"},
		{"/var/lib/app/dev/log", "/etc/rsyslog.d/60-app.conf:8"},
		{"/var/lib/lower/dev/log", "/etc/rsyslog.d/60-app.conf:11"},
		{"/var/log/app/log", "/etc/rsyslog.d/60-app.conf:13"},
		{"/var/spool/postfix/dev/log", "/etc/rsyslog.d/postfix.conf:4"},
		{"/var/lib/extra/dev/log", "/etc/rsyslog.extra/x.conf:1"},
	}, got, "in the order rsyslogd reads them: includes where they stand, a directory's files sorted, *.conf only, no hidden file, no comment, a wildcard directory not followed")

	// No configuration, or one that is not a file, asks for nothing.
	assert.Empty(t, rsyslogSockets(fstest.MapFS{}))
	assert.Empty(t, rsyslogSockets(fstest.MapFS{"etc/rsyslog.conf/x": {Data: []byte("$AddUnixListenSocket /a/log\n")}}))
	// A file too large to be a configuration is passed over.
	assert.Empty(t, rsyslogSockets(fstest.MapFS{"etc/rsyslog.conf": {Data: []byte("$AddUnixListenSocket /a/log\n" + strings.Repeat("#", rsyslogMaxFile))}}))
}

func TestRsyslogSocketsBounded(t *testing.T) {
	// A chain of includes deeper than rsyslogMaxDepth stops there.
	image := fstest.MapFS{}
	name := "etc/rsyslog.conf"
	for i := 0; i < 3*rsyslogMaxDepth; i++ {
		next := "etc/r/" + strings.Repeat("x", i+1) + ".conf"
		image[name] = &fstest.MapFile{Data: []byte("$AddUnixListenSocket /d/" + strings.Repeat("x", i) + "/log\n$IncludeConfig /" + next + "\n")}
		name = next
	}
	assert.Len(t, rsyslogSockets(image), rsyslogMaxDepth+1)
}

func TestAdaptToImage(t *testing.T) {
	catalog, err := rules.LoadHardening()
	require.NoError(t, err)
	var entry rules.Hardening
	for _, h := range catalog {
		if h.ID == "rsyslog" {
			entry = h
		}
	}
	require.NotEmpty(t, entry.DropIn, "the shipped catalog has the rsyslog entry")
	rsyslog := DropIn{Unit: "rsyslog.service", Entry: "rsyslog", Content: dropInText(entry)}
	other := DropIn{Unit: "cron.service", Entry: "cron", Content: "[Service]\nProtectSystem=strict\n"}
	loose := DropIn{Unit: "syslog.service", Entry: "mine", Content: "[Service]\nProtectSystem=full\n"}

	got := AdaptToImage(rsyslogImage(), []DropIn{other, rsyslog, loose})
	require.Len(t, got, 3)
	assert.Equal(t, other, got[0], "only rsyslog's drop-in is adapted")
	assert.Equal(t, loose, got[2], "ProtectSystem=full leaves /var writable: nothing to add")
	assert.Equal(t, dropInText(entry)+"\n# Added by amilint fix --harden: directories this image's rsyslog configuration makes\n"+
		"# listen sockets in (\"-\": none is needed to exist).\n[Service]\n"+
		"# /etc/rsyslog.d/49-haproxy.conf:3 asks rsyslogd for the socket /var/lib/haproxy/dev/log\nReadWritePaths=-/var/lib/haproxy/dev\n"+
		"# /etc/rsyslog.d/60-app.conf:8 asks rsyslogd for the socket /var/lib/app/dev/log\nReadWritePaths=-/var/lib/app/dev\n"+
		"# /etc/rsyslog.d/60-app.conf:11 asks rsyslogd for the socket /var/lib/lower/dev/log\nReadWritePaths=-/var/lib/lower/dev\n"+
		"# /etc/rsyslog.extra/x.conf:1 asks rsyslogd for the socket /var/lib/extra/dev/log\nReadWritePaths=-/var/lib/extra/dev\n",
		got[1].Content, "each directory not yet writable, once; /var/log and Postfix's chroot are; a path with blanks is not named")
	assert.Equal(t, dropInText(entry), rsyslog.Content, "the drop-ins passed in are not changed")

	// An image whose configuration asks only for what the entry allows
	// gets the entry as it is.
	stock := fstest.MapFS{"etc/rsyslog.conf": {Data: []byte(debianRsyslogConf)},
		"etc/rsyslog.d/postfix.conf": {Data: []byte("$AddUnixListenSocket /var/spool/postfix/dev/log\n$AddUnixListenSocket /dev/log\n")}}
	assert.Equal(t, []DropIn{rsyslog}, AdaptToImage(stock, []DropIn{rsyslog}))
	// A drop-in that resets ReadWritePaths= covers nothing before it.
	reset := DropIn{Unit: "rsyslog.service", Content: "[Service]\nProtectSystem=strict\nReadWritePaths=/var/lib\nReadWritePaths=\n"}
	assert.Contains(t, AdaptToImage(stock, []DropIn{reset})[0].Content, "ReadWritePaths=-/var/spool/postfix/dev\n")
	reset.Content = "[Service]\nProtectSystem=strict\nReadWritePaths=/var/spool\n"
	assert.Equal(t, reset, AdaptToImage(stock, []DropIn{reset})[0], "a directory under a writable one is writable")
}

func FuzzRsyslogDirectives(f *testing.F) {
	for _, d := range rsyslogImage() {
		f.Add(string(d.Data))
	}
	f.Add("input(type=\"imuxsock\" socket=\"/a\\\"b\")")
	f.Add("/* open")
	f.Add("input(\"")
	f.Add("$")
	f.Add("input(type=\"imuxsock\" socket=\"/var/lib/x/log\nExecStart=/bin/sh\")")
	f.Fuzz(func(t *testing.T, text string) {
		lines := strings.Count(text, "\n") + 1
		for _, d := range rsyslogDirectives(text) {
			if d.line < 1 || d.line > lines {
				t.Fatalf("line %d of a text of %d lines", d.line, lines)
			}
		}
		img := fstest.MapFS{"etc/rsyslog.conf": {Data: []byte(text)}}
		for _, s := range rsyslogSockets(img) {
			if !strings.HasPrefix(s.Path, "/") {
				t.Fatalf("relative socket %q", s.Path)
			}
		}
		// What is added to a drop-in is comments, a section header and
		// paths a unit file names as they are: the configuration cannot
		// add a setting of its own.
		const base = "[Service]\nProtectSystem=strict\n"
		for _, d := range AdaptToImage(img, []DropIn{{Unit: "rsyslog.service", Content: base}}) {
			for _, l := range strings.Split(strings.TrimPrefix(d.Content, base), "\n") {
				p, ok := strings.CutPrefix(l, "ReadWritePaths=-")
				if !(l == "" || l == "[Service]" || strings.HasPrefix(l, "#") || ok && safeUnitPath.MatchString(p)) {
					t.Fatalf("line %q added to the drop-in", l)
				}
			}
		}
	})
}
