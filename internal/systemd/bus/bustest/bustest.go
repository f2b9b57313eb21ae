// Package bustest is a test kit for the readers of a running systemd: a
// real dbus-daemon on a unix socket of the test's own, and on it a fake
// manager that owns org.freedesktop.systemd1 and answers the calls package
// bus makes (ListUnits, ListUnitFiles, Subscribe, the service properties)
// from units the test sets. The daemon can be stopped and started again on
// the same socket, as a host's bus restarts. Everything stops by itself
// when the test ends. It is imported only by tests.
package bustest

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/amilint/amilint/fixtures/testenv"
)

// Unit is one unit the fake manager reports.
type Unit struct {
	Name        string
	FileState   string // "enabled", "disabled", …
	ActiveState string // "active", "activating", "failed", …
	SubState    string
	// Service properties.
	NRestarts uint32
	Result    string
	Restart   string
}

// Bus is a dbus-daemon on a unix socket with a fake systemd manager.
type Bus struct {
	t      testing.TB
	dir    string
	socket string

	mu      sync.Mutex
	daemon  *exec.Cmd
	waited  chan struct{}
	manager *dbus.Conn
	units   []Unit
}

// New starts a dbus-daemon on a socket in a directory of the test's and
// the fake manager on it, reporting units.
func New(t testing.TB, units []Unit) *Bus {
	t.Helper()
	testenv.Tool(t, "dbus-daemon", "dbus")
	dir := t.TempDir()
	b := &Bus{t: t, dir: dir, socket: filepath.Join(dir, "bus"), units: units}
	cfg := fmt.Sprintf(`<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>custom</type>
  <listen>unix:path=%s</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*" eavesdrop="true"/>
    <allow receive_sender="*"/>
  </policy>
</busconfig>
`, b.socket)
	require(t, os.WriteFile(filepath.Join(dir, "bus.conf"), []byte(cfg), 0o644))
	b.Start()
	t.Cleanup(b.Stop)
	return b
}

// Socket is the bus socket's path, as amilint's --bus takes it.
func (b *Bus) Socket() string { return b.socket }

// SetUnits changes what the manager reports from now on.
func (b *Bus) SetUnits(units []Unit) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.units = units
}

// Start starts the daemon, when stopped, and the manager on it.
func (b *Bus) Start() {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.daemon != nil {
		return
	}
	_ = os.Remove(b.socket)
	cmd := exec.Command("dbus-daemon", "--config-file="+filepath.Join(b.dir, "bus.conf"), "--nofork", "--nopidfile", "--print-address=1")
	out, err := cmd.StdoutPipe()
	require(b.t, err)
	require(b.t, cmd.Start())
	b.daemon, b.waited = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); close(b.waited) }()
	// The daemon prints its address once it listens.
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(out).ReadString('\n')
		line <- s
	}()
	select {
	case s := <-line:
		if !strings.Contains(s, b.socket) {
			b.t.Fatalf("dbus-daemon: unexpected address %q", s)
		}
	case <-time.After(10 * time.Second):
		b.t.Fatalf("dbus-daemon did not listen on %s in 10s", b.socket)
	}
	b.manager = b.serve()
}

// Stop stops the manager and the daemon; the socket vanishes with it.
func (b *Bus) Stop() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.manager != nil {
		b.manager.Close()
		b.manager = nil
	}
	if b.daemon != nil {
		_ = b.daemon.Process.Kill()
		select {
		case <-b.waited:
		case <-time.After(10 * time.Second):
		}
		b.daemon = nil
	}
	_ = os.Remove(b.socket)
}

// serve connects the fake manager, owns systemd's name and exports its
// objects.
func (b *Bus) serve() *dbus.Conn {
	b.t.Helper()
	// No context: the connection lives until Stop closes it.
	conn, err := dbus.Dial("unix:path=" + b.socket)
	require(b.t, err)
	require(b.t, conn.Auth([]dbus.Auth{dbus.AuthExternal(strconv.Itoa(os.Getuid()))}))
	require(b.t, conn.Hello())
	reply, err := conn.RequestName("org.freedesktop.systemd1", dbus.NameFlagDoNotQueue)
	require(b.t, err)
	if reply != dbus.RequestNameReplyPrimaryOwner {
		b.t.Fatalf("fake manager: not the owner of org.freedesktop.systemd1 (%v)", reply)
	}
	require(b.t, conn.Export(manager{b}, "/org/freedesktop/systemd1", "org.freedesktop.systemd1.Manager"))
	// Unit objects answer Properties.Get for any path below /unit.
	require(b.t, conn.ExportSubtree(properties{b}, "/org/freedesktop/systemd1/unit", "org.freedesktop.DBus.Properties"))
	return conn
}

// snapshot is the units under the lock.
func (b *Bus) snapshot() []Unit {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]Unit(nil), b.units...)
}

// manager is org.freedesktop.systemd1.Manager.
type manager struct{ b *Bus }

// unitStatus is a ListUnits entry: (ssssssouso).
type unitStatus struct {
	Name, Description, LoadState, ActiveState, SubState, Followed string
	Path                                                          dbus.ObjectPath
	JobID                                                         uint32
	JobType                                                       string
	JobPath                                                       dbus.ObjectPath
}

// unitFile is a ListUnitFiles entry: (ss).
type unitFile struct{ Path, Type string }

// ListUnits reports every unit as loaded.
func (m manager) ListUnits() ([]unitStatus, *dbus.Error) {
	var out []unitStatus
	for _, u := range m.b.snapshot() {
		out = append(out, unitStatus{Name: u.Name, Description: u.Name, LoadState: "loaded", ActiveState: u.ActiveState,
			SubState: u.SubState, Path: unitPath(u.Name), JobPath: "/"})
	}
	return out, nil
}

// ListUnitFiles reports each unit's file under /usr/lib/systemd/system.
func (m manager) ListUnitFiles() ([]unitFile, *dbus.Error) {
	var out []unitFile
	for _, u := range m.b.snapshot() {
		out = append(out, unitFile{Path: "/usr/lib/systemd/system/" + u.Name, Type: u.FileState})
	}
	return out, nil
}

// Subscribe accepts the subscription; the fake sends no signals, so the
// client asks every service at every snapshot.
func (m manager) Subscribe() *dbus.Error { return nil }

// properties is org.freedesktop.DBus.Properties of the unit objects.
type properties struct{ b *Bus }

// execCommand is an ExecStart entry: (sasbttttuii).
type execCommand struct {
	Path             string
	Args             []string
	IgnoreFailure    bool
	Start, StartMono uint64
	Exit, ExitMono   uint64
	PID              uint32
	Code, Status     int32
}

// Get answers the service properties package bus reads.
func (p properties) Get(msg dbus.Message, iface, name string) (dbus.Variant, *dbus.Error) {
	path, _ := msg.Headers[dbus.FieldPath].Value().(dbus.ObjectPath)
	for _, u := range p.b.snapshot() {
		if unitPath(u.Name) != path {
			continue
		}
		switch name {
		case "NRestarts":
			return dbus.MakeVariant(u.NRestarts), nil
		case "Result":
			return dbus.MakeVariant(u.Result), nil
		case "Restart":
			return dbus.MakeVariant(u.Restart), nil
		case "ExecMainStartTimestamp":
			return dbus.MakeVariant(uint64(0)), nil
		case "ExecStart":
			bin := "/usr/bin/" + strings.TrimSuffix(u.Name, ".service")
			return dbus.MakeVariant([]execCommand{{Path: bin, Args: []string{bin}}}), nil
		}
		return dbus.Variant{}, dbus.NewError("org.freedesktop.DBus.Error.UnknownProperty", []any{name})
	}
	return dbus.Variant{}, dbus.NewError("org.freedesktop.systemd1.NoSuchUnit", []any{string(path)})
}

// unitPath is a unit's object path, escaped as systemd escapes it.
func unitPath(name string) dbus.ObjectPath {
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "_%02x", c)
	}
	return dbus.ObjectPath("/org/freedesktop/systemd1/unit/" + b.String())
}

func require(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
