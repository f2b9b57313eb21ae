// Package bus owns what a running systemd says about its units over
// D-Bus: every unit file and its state, every loaded unit's active and sub
// state, and for services their result, restart count, main start time
// and command lines. From two snapshots it tells which units crash-loop
// and which services create a new container on every restart.
//
// It only reads: it calls List* methods, property getters and Subscribe
// (to be told of unit changes), never a method that changes the
// manager's state. It uses the pure-Go D-Bus
// client (github.com/coreos/go-systemd/v22/dbus over godbus), so the
// binary stays static with CGO off.
package bus

import (
	"context"
	"fmt"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	sd "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
)

// propertyWorkers bounds the concurrent Properties.GetAll calls.
const propertyWorkers = 8

// DefaultRestartThreshold is the restart count at or above which a service
// is crash-looping.
const DefaultRestartThreshold = 3

// Unit is one unit as the running manager reports it.
type Unit struct {
	Name string `json:"name"`
	// FileState is the unit file's state ("enabled", "disabled", "static",
	// "masked", …), empty for units without a unit file (transient, generated
	// scopes and slices).
	FileState   string `json:"file_state,omitempty"`
	LoadState   string `json:"load_state,omitempty"`
	ActiveState string `json:"active_state,omitempty"`
	SubState    string `json:"sub_state,omitempty"`
	// Loaded is false for unit files the manager has not loaded.
	Loaded bool `json:"loaded"`

	// The fields below are set for loaded services only.

	// Result is the service's result ("success", "exit-code", "start-limit-hit", …).
	Result string `json:"result,omitempty"`
	// Restart is the Restart= policy ("no", "on-failure", "always", …).
	Restart string `json:"restart,omitempty"`
	// NRestarts counts automatic restarts since the unit was last started by hand.
	NRestarts uint32 `json:"n_restarts"`
	// ExecMainStart is when the main process last started; zero if never.
	ExecMainStart time.Time `json:"exec_main_start,omitzero"`
	// ExecStart are the argv of each ExecStart= command.
	ExecStart [][]string `json:"exec_start,omitempty"`
	// ContainerPerRestart says that each start of the service creates a new
	// container (docker/podman/nerdctl/ctr run, or the ECS init that
	// starts a fresh agent container on every try), hence a new memory
	// cgroup per restart.
	ContainerPerRestart bool `json:"container_per_restart"`

	// CrashLoop is set by Detect.
	CrashLoop *CrashLoop `json:"crash_loop,omitempty"`
}

// CrashLoop says why a unit is taken to be crash-looping.
type CrashLoop struct {
	// Reasons, each one sentence.
	Reasons []string `json:"reasons"`
	// Growth is NRestarts' growth since the previous snapshot, if one was given.
	Growth uint32 `json:"growth,omitempty"`
}

// Snapshot is the manager's state at one time.
type Snapshot struct {
	Time time.Time `json:"time"`
	// Units are sorted by name.
	Units []Unit `json:"units"`
}

// Unit returns the named unit, if present.
func (s *Snapshot) Unit(name string) (Unit, bool) {
	i, ok := slices.BinarySearchFunc(s.Units, name, func(u Unit, n string) int { return strings.Compare(u.Name, n) })
	if !ok {
		return Unit{}, false
	}
	return s.Units[i], true
}

// Client is a read-only connection to a systemd manager. It caches the
// services' static properties (command lines, restart policy) for
// staticTTL, so keeping one Client across snapshots makes them cheaper.
//
// It also subscribes to the manager's PropertiesChanged signals and
// caches each service's dynamic properties (NRestarts, Result,
// ExecMainStartTimestamp) until a signal says the unit changed: a restart
// changes the unit's active state, which systemd signals, so a steady
// snapshot asks only the services that changed since the last one (or
// were never asked), and every NRestarts growth is still seen. A change
// whose signal is still in flight when a snapshot starts shows in the
// next one. Without a subscription (the manager refused it), or when a
// signal may have been lost, every service is asked again.
type Client struct {
	conn *sd.Conn

	mu         sync.Mutex
	statics    map[string]statics
	files      []sd.UnitFile
	filesAt    time.Time
	subscribed bool
	dirty      map[string]bool           // units a signal named since the last snapshot
	allDirty   bool                      // a signal may have been lost
	dynamics   map[string]map[string]any // the services' dynamic properties as last fetched
	sigConn    *dbus.Conn                // the connection the signals arrive on
}

// serviceMatch is the bus match rule of the signals the client listens to:
// changes of the service interface's properties (NRestarts, Result and
// ExecMainStartTimestamp among them), nothing else the manager says.
const serviceMatch = "type='signal',interface='org.freedesktop.DBus.Properties',member='PropertiesChanged'," +
	"path_namespace='/org/freedesktop/systemd1/unit',arg0='org.freedesktop.systemd1.Service'"

// subscribe opens a connection of its own to address, asks the manager
// for its signals there (Manager.Subscribe) and starts the goroutine that
// marks the services they name dirty. On failure the client asks every
// service at every snapshot.
func (c *Client) subscribe(ctx context.Context, address string) {
	conn, direct, err := dialBus(ctx, Address(address))
	if err != nil {
		return
	}
	if !direct {
		if err := conn.BusObject().CallWithContext(ctx, "org.freedesktop.DBus.AddMatch", 0, serviceMatch).Err; err != nil {
			conn.Close()
			return
		}
	}
	ch := make(chan *dbus.Signal, 256)
	conn.Signal(ch)
	if err := conn.Object("org.freedesktop.systemd1", "/org/freedesktop/systemd1").
		CallWithContext(ctx, "org.freedesktop.systemd1.Manager.Subscribe", 0).Err; err != nil {
		conn.Close()
		return
	}
	c.sigConn, c.subscribed = conn, true
	go func() {
		for sig := range ch {
			if sig.Name != "org.freedesktop.DBus.Properties.PropertiesChanged" || len(sig.Body) == 0 {
				continue
			}
			if iface, _ := sig.Body[0].(string); iface != "org.freedesktop.systemd1.Service" {
				continue
			}
			c.mu.Lock()
			if c.dirty == nil {
				c.dirty = map[string]bool{}
			}
			c.dirty[unitName(sig.Path)] = true
			c.mu.Unlock()
		}
		// The connection is gone: ask every service from now on.
		c.mu.Lock()
		c.subscribed = false
		c.mu.Unlock()
	}()
}

// unitName is the unit name of a unit object path
// (/org/freedesktop/systemd1/unit/ssh_2eservice is ssh.service).
func unitName(p dbus.ObjectPath) string {
	s := path.Base(string(p))
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '_' && i+2 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil {
				b.WriteByte(byte(v))
				i += 2
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// takeDirty returns which units changed since the last call (all when not
// subscribed or a signal may have been lost) and starts a new period.
func (c *Client) takeDirty() (map[string]bool, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d, all := c.dirty, c.allDirty || !c.subscribed
	c.dirty, c.allDirty = nil, false
	return d, all
}

// unitFiles lists unit files, at most once per staticTTL: the manager
// answers ListUnitFiles by scanning every unit directory (tens of
// thousands of openat calls on a rich host), a cost a periodic exporter
// must not impose on PID 1 at every interval. Enabling or disabling a
// unit shows after at most staticTTL; active states are always fresh.
func (c *Client) unitFiles(ctx context.Context) ([]sd.UnitFile, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.files != nil && time.Since(c.filesAt) < staticTTL {
		return c.files, nil
	}
	files, err := c.conn.ListUnitFilesContext(ctx)
	if err != nil {
		return nil, fmt.Errorf("list unit files: %w", err)
	}
	c.files, c.filesAt = files, time.Now()
	return files, nil
}

// statics are a service's properties that change only on daemon-reload.
type statics struct {
	props map[string]any
	at    time.Time
}

// staticTTL bounds how long static properties are trusted (a
// daemon-reload may change them).
const staticTTL = 10 * time.Minute

var (
	dynamicProps = []string{"NRestarts", "Result", "ExecMainStartTimestamp"}
	staticProps  = []string{"ExecStart", "Restart"}
)

// serviceProperties fills u's service fields, asking the manager for the
// dynamic properties only when fresh is set or none are cached; a service
// that vanished meanwhile keeps what ListUnits said.
func (c *Client) serviceProperties(ctx context.Context, u *Unit, fresh bool) {
	props := map[string]any{}
	if !fresh {
		c.mu.Lock()
		dyn, ok := c.dynamics[u.Name]
		c.mu.Unlock()
		if !ok {
			fresh = true
		}
		for k, v := range dyn {
			props[k] = v
		}
	}
	fetch := func(names []string) bool {
		for _, p := range names {
			prop, err := c.conn.GetServicePropertyContext(ctx, u.Name, p)
			if err != nil {
				return false
			}
			props[p] = prop.Value.Value()
		}
		return true
	}
	if fresh {
		if !fetch(dynamicProps) {
			return
		}
		dyn := make(map[string]any, len(dynamicProps))
		for _, p := range dynamicProps {
			dyn[p] = props[p]
		}
		c.mu.Lock()
		if c.dynamics == nil {
			c.dynamics = map[string]map[string]any{}
		}
		c.dynamics[u.Name] = dyn
		c.mu.Unlock()
	}
	c.mu.Lock()
	st, ok := c.statics[u.Name]
	c.mu.Unlock()
	if ok && time.Since(st.at) < staticTTL {
		for k, v := range st.props {
			props[k] = v
		}
	} else if fetch(staticProps) {
		st := statics{props: map[string]any{}, at: time.Now()}
		for _, p := range staticProps {
			st.props[p] = props[p]
		}
		c.mu.Lock()
		if c.statics == nil {
			c.statics = map[string]statics{}
		}
		c.statics[u.Name] = st
		c.mu.Unlock()
	}
	ApplyServiceProperties(u, props)
}

// Address turns what a user gives into a D-Bus address: "" is the system
// bus; "unix:path=…" (or any other "transport:" address) is taken as is;
// anything else is a path to a bus socket, such as a container's
// /proc/PID/root/run/dbus/system_bus_socket or systemd's private socket
// /run/systemd/private.
func Address(s string) string {
	switch {
	case s == "":
		return ""
	case strings.Contains(s, ":") && !strings.HasPrefix(s, "/") && !strings.HasPrefix(s, "."):
		return s
	default:
		return "unix:path=" + s
	}
}

// Dial connects to the manager at address (see Address). A socket that is
// systemd's own private socket (no bus daemon) is used without Hello.
func Dial(ctx context.Context, address string) (*Client, error) {
	c, err := Connect(ctx, address)
	if err != nil {
		return nil, err
	}
	cl := &Client{conn: c}
	cl.subscribe(ctx, address)
	return cl, nil
}

// Connect returns a raw connection to the manager at address, as Dial
// makes it. Package bus only reads through it; a caller that changes
// units (amilint fix --live) dials the same way.
func Connect(ctx context.Context, address string) (*sd.Conn, error) {
	addr := Address(address)
	if addr == "" {
		c, err := sd.NewSystemConnectionContext(ctx)
		if err != nil {
			return nil, fmt.Errorf("connect to the system bus: %w", err)
		}
		return c, nil
	}
	c, err := sd.NewConnection(func() (*dbus.Conn, error) {
		conn, _, err := dialBus(ctx, addr)
		return conn, err
	})
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", addr, err)
	}
	return c, nil
}

// dialBus opens one authenticated connection to addr ("" is the system
// bus) and says whether it is a direct connection to the manager's
// private socket (no bus daemon: no Hello, no match rules). ctx bounds the
// dialing only: the connection lives until closed, across the audits of a
// long-running exporter (one bound to ctx would close with the audit that
// opened it).
func dialBus(ctx context.Context, addr string) (*dbus.Conn, bool, error) {
	opt := dbus.WithContext(context.WithoutCancel(ctx))
	var conn *dbus.Conn
	var err error
	direct := strings.HasSuffix(addr, "/systemd/private")
	if addr == "" {
		conn, err = dbus.SystemBusPrivate(opt)
	} else {
		conn, err = dbus.Dial(addr, opt)
	}
	if err != nil {
		return nil, direct, err
	}
	// A peer that never answers the handshake would hold it forever:
	// ctx ending closes the connection, which ends the handshake.
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	fail := func(what string, err error) (*dbus.Conn, bool, error) {
		stop()
		conn.Close()
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return nil, direct, fmt.Errorf("%s: %w", what, err)
	}
	auths := []dbus.Auth{dbus.AuthExternal(strconv.Itoa(os.Getuid()))}
	if addr == "" {
		auths = nil // the system bus's defaults
	}
	if err := conn.Auth(auths); err != nil {
		return fail("auth", err)
	}
	if !direct {
		if err := conn.Hello(); err != nil {
			return fail("hello", err)
		}
	}
	if !stop() {
		conn.Close()
		return nil, direct, ctx.Err()
	}
	return conn, direct, nil
}

// Close closes the connection.
func (c *Client) Close() {
	if c.sigConn != nil {
		c.sigConn.Close()
	}
	c.conn.Close()
}

// Snapshot lists every unit file and every loaded unit, with service
// properties for loaded services.
func (c *Client) Snapshot(ctx context.Context) (*Snapshot, error) {
	// The dirty set is taken first: a change after this point is signalled
	// again and seen by this snapshot's fetch or the next one's.
	dirty, all := c.takeDirty()
	files, err := c.unitFiles(ctx)
	if err != nil {
		return nil, err
	}
	loaded, err := c.conn.ListUnitsContext(ctx)
	if err != nil {
		return nil, fmt.Errorf("list units: %w", err)
	}
	byName := map[string]*Unit{}
	get := func(name string) *Unit {
		u := byName[name]
		if u == nil {
			u = &Unit{Name: name}
			byName[name] = u
		}
		return u
	}
	for _, f := range files {
		get(path.Base(f.Path)).FileState = f.Type
	}
	var services []*Unit
	for _, l := range loaded {
		u := get(l.Name)
		u.Loaded, u.LoadState, u.ActiveState, u.SubState = true, l.LoadState, l.ActiveState, l.SubState
		if strings.HasSuffix(l.Name, ".service") && l.LoadState == "loaded" {
			services = append(services, u)
		}
	}
	// A few properties per service, a few services in flight at once: the
	// bus round trips and the decoding are the cost, so the properties
	// that change only on daemon-reload are fetched once per staticTTL.
	c.mu.Lock()
	for name := range c.dynamics {
		if u := byName[name]; u == nil || !u.Loaded {
			delete(c.dynamics, name)
		}
	}
	c.mu.Unlock()
	work := make(chan *Unit)
	var wg sync.WaitGroup
	for range min(propertyWorkers, len(services)) {
		wg.Go(func() {
			for u := range work {
				c.serviceProperties(ctx, u, all || dirty[u.Name])
			}
		})
	}
	for _, u := range services {
		work <- u
	}
	close(work)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("service properties: %w", err)
	}
	snap := &Snapshot{Time: time.Now(), Units: make([]Unit, 0, len(byName))}
	for _, u := range byName {
		snap.Units = append(snap.Units, *u)
	}
	slices.SortFunc(snap.Units, func(a, b Unit) int { return strings.Compare(a.Name, b.Name) })
	return snap, nil
}

// ApplyServiceProperties fills u's service fields from the
// org.freedesktop.systemd1.Service properties (as Properties.GetAll
// returns them, values unwrapped from their variants). Properties of an
// unexpected type are ignored.
func ApplyServiceProperties(u *Unit, props map[string]any) {
	if v, ok := props["Result"].(string); ok {
		u.Result = v
	}
	if v, ok := props["Restart"].(string); ok {
		u.Restart = v
	}
	if v, ok := props["NRestarts"].(uint32); ok {
		u.NRestarts = v
	}
	if v, ok := props["ExecMainStartTimestamp"].(uint64); ok && v > 0 {
		u.ExecMainStart = time.UnixMicro(int64(v)).UTC()
	}
	if v, ok := props["ExecStart"]; ok {
		u.ExecStart = execArgv(v)
		u.ContainerPerRestart = ContainerPerRestart(u.ExecStart)
	}
}

// execArgv extracts argv from an a(sasbttttuii) ExecStart value.
func execArgv(v any) [][]string {
	var items []any
	switch x := v.(type) {
	case [][]any:
		for _, it := range x {
			items = append(items, it)
		}
	case []any:
		items = x
	default:
		return nil
	}
	var out [][]string
	for _, it := range items {
		st, ok := it.([]any)
		if !ok || len(st) < 2 {
			continue
		}
		argv, ok := st[1].([]string)
		if !ok || len(argv) == 0 {
			if p, ok := st[0].(string); ok {
				argv = []string{p}
			}
		}
		if len(argv) > 0 {
			out = append(out, argv)
		}
	}
	return out
}

// ContainerPerRestart tells whether the command lines start a new
// container each time they run.
func ContainerPerRestart(cmds [][]string) bool {
	for _, argv := range cmds {
		if len(argv) == 0 {
			continue
		}
		prog := path.Base(argv[0])
		args := argv[1:]
		// "sh -c 'docker run …'" and "/usr/bin/env docker run …".
		if prog == "env" && len(args) > 0 {
			prog, args = path.Base(args[0]), args[1:]
		}
		if (prog == "sh" || prog == "bash") && len(args) >= 2 && args[0] == "-c" {
			f := strings.Fields(args[1])
			if len(f) > 0 && f[0] == "exec" {
				f = f[1:]
			}
			if len(f) > 0 && ContainerPerRestart([][]string{f}) {
				return true
			}
			continue
		}
		switch prog {
		case "amazon-ecs-init", "ecs-init":
			if slices.Contains(args, "start") {
				return true
			}
		case "docker", "podman", "nerdctl":
			if slices.Contains(args, "run") || (slices.Contains(args, "compose") && slices.Contains(args, "up")) {
				return true
			}
		case "docker-compose":
			if slices.Contains(args, "up") {
				return true
			}
		case "ctr":
			if slices.Contains(args, "run") {
				return true
			}
		}
	}
	return false
}

// Detect marks crash-looping units in cur: a service waiting to restart
// (sub state auto-restart), a service that hit its start limit, one not
// stopped (not inactive) with NRestarts at or above threshold, or one whose
// NRestarts grew since prev
// (nil prev: no growth check). threshold 0 means DefaultRestartThreshold.
// It returns the names of the crash-looping units.
func Detect(prev, cur *Snapshot, threshold uint32) []string {
	if threshold == 0 {
		threshold = DefaultRestartThreshold
	}
	var names []string
	for i := range cur.Units {
		u := &cur.Units[i]
		u.CrashLoop = nil
		if !u.Loaded || !strings.HasSuffix(u.Name, ".service") {
			continue
		}
		var cl CrashLoop
		if u.SubState == "auto-restart" {
			cl.Reasons = append(cl.Reasons, "it is waiting to be restarted after a failure (auto-restart)")
		}
		if u.Result == "start-limit-hit" {
			cl.Reasons = append(cl.Reasons, "it failed too often and hit its start limit")
		}
		// A restart count is kept after a stop until the next start or a
		// reset-failed: a unit stopped (inactive) after its loop is no
		// longer looping by its count alone. A failed one is: systemd
		// restarted it until its start limit and gave up (systemd 252
		// keeps the first failure's Result, e.g. exit-code, not
		// start-limit-hit).
		if u.NRestarts >= threshold && u.ActiveState != "inactive" {
			why := fmt.Sprintf("systemd restarted it %d times (threshold %d)", u.NRestarts, threshold)
			if u.ActiveState == "failed" {
				why += " and then gave up"
			}
			cl.Reasons = append(cl.Reasons, why)
		}
		if prev != nil {
			if p, ok := prev.Unit(u.Name); ok && u.NRestarts > p.NRestarts {
				cl.Growth = u.NRestarts - p.NRestarts
				cl.Reasons = append(cl.Reasons, fmt.Sprintf("it restarted %d times in %s", cl.Growth, cur.Time.Sub(prev.Time).Round(time.Millisecond)))
			}
		}
		if len(cl.Reasons) > 0 {
			u.CrashLoop = &cl
			names = append(names, u.Name)
		}
	}
	return names
}
