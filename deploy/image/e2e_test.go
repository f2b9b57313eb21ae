//go:build e2e

package main

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"

	"github.com/amilint/amilint/fixtures/nspawn"
	"github.com/amilint/amilint/fixtures/testenv"
)

// podRoot is where, on the node, the pulled image's root filesystem is
// unpacked (the container runtime's snapshot).
const podRoot = "/var/lib/amilint-pod/rootfs"

// TestE2EImage is the image's end to end test: the image make image built
// is pushed to an in-process registry on loopback, pulled back by the digest
// the pinned DaemonSet names, unpacked, and run as that DaemonSet runs it —
// its entrypoint with the DaemonSet's args, as its user, with its hostPath
// volumes mounted read-only under /host, in the node's PID namespace
// (hostPID) and its own mount, network, IPC and UTS namespaces, on a
// read-only root — on a node that is a real systemd booted in
// systemd-nspawn with the vendor's ecs.service enabled. The exporter must
// be ready (every collector works through the mounts) and export the
// static finding on ecs.service and the live facts of the node.
func TestE2EImage(t *testing.T) {
	testenv.Root(t, "the image end-to-end test (overlayfs, systemd-nspawn, nsenter)")
	testenv.Tool(t, "systemd-nspawn", "systemd-container")
	began := time.Now()
	phase := func(s string) { t.Logf("%6.1fs %s", time.Since(began).Seconds(), s) }
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	dir, version := os.Getenv("AMILINT_IMAGE_DIR"), os.Getenv("AMILINT_VERSION")
	root := os.Getenv("AMILINT_E2E_ROOT")
	if dir == "" || version == "" || root == "" {
		t.Fatal("run by make e2e-image: AMILINT_IMAGE_DIR, AMILINT_VERSION and AMILINT_E2E_ROOT must be set")
	}

	// What the release records: the reference with its digest, and the
	// DaemonSet pinned to it. They agree, and with the layout.
	b, err := os.ReadFile(filepath.Join(dir, "reference"))
	require.NoError(t, err)
	reference := strings.TrimSpace(string(b))
	pinned, err := name.NewDigest(reference)
	require.NoError(t, err, "the recorded reference names a digest")
	ds := pinnedDaemonSet(t, filepath.Join(dir, "daemonset.yaml"))
	spec := ds.Spec.Template.Spec
	require.Len(t, spec.Containers, 1)
	c := spec.Containers[0]
	assert.Equal(t, reference, c.Image, "the pinned DaemonSet runs the recorded image")
	idx, err := ReadLayout(filepath.Join(dir, "oci"), version)
	require.NoError(t, err)
	digest, err := idx.Digest()
	require.NoError(t, err)
	require.Equal(t, pinned.DigestStr(), digest.String(), "the layout holds the recorded digest")

	// Push to a registry in this process, on loopback, and pull back by
	// digest, as a node pulls the pinned reference.
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	require.True(t, strings.HasPrefix(host, "127.0.0.1:"))
	repo := pinned.Context().RepositoryStr()
	_, err = Push(ctx, idx, host+"/"+repo+":"+version)
	require.NoError(t, err)
	pull, err := name.NewDigest(host + "/" + repo + "@" + digest.String())
	require.NoError(t, err)
	got, err := remote.Index(pull, remote.WithContext(ctx))
	require.NoError(t, err)
	gd, err := got.Digest()
	require.NoError(t, err)
	require.Equal(t, digest, gd)
	img, err := platformImage(got, runtime.GOARCH)
	require.NoError(t, err)
	cf, err := img.ConfigFile()
	require.NoError(t, err)
	phase("pushed to and pulled from " + host + " by digest " + digest.String())

	// The pod's user is the image's.
	require.NotNil(t, spec.SecurityContext)
	uid, gid := *spec.SecurityContext.RunAsUser, *spec.SecurityContext.RunAsGroup
	assert.Equal(t, fmt.Sprintf("%d:%d", uid, gid), cf.Config.User, "the image's user is the DaemonSet's")

	// The node: a booted Debian with the vendor's ecs.service enabled, as
	// on the incident's AMI, and the pulled image unpacked on it.
	testenv.Tool(t, "nsenter", "util-linux")
	upper, merged := nspawn.Overlay(t, root)
	repoRoot := testenv.RepoRoot(t)
	ecs, err := os.ReadFile(filepath.Join(repoRoot, "fixtures/trees/dlami/root/lib/systemd/system/ecs.service"))
	require.NoError(t, err)
	write(t, filepath.Join(upper, "usr/lib/systemd/system/ecs.service"), string(ecs), 0o644)
	write(t, filepath.Join(upper, "etc/systemd/system/docker.service"), "[Service]\nType=oneshot\nRemainAfterExit=yes\nExecStart=/bin/true\n", 0o644)
	write(t, filepath.Join(upper, "usr/libexec/amazon-ecs-init"), "#!/bin/sh\n[ \"$1\" = start ] && exit 1\nexit 0\n", 0o755)
	require.NoError(t, os.MkdirAll(filepath.Join(upper, "etc/systemd/system/multi-user.target.wants"), 0o755))
	require.NoError(t, os.Symlink("/lib/systemd/system/ecs.service", filepath.Join(upper, "etc/systemd/system/multi-user.target.wants/ecs.service")))
	rootfs := filepath.Join(upper, podRoot)
	unpack(t, img, rootfs)
	// The runtime's mount points: /proc and /dev of the container, and each
	// volume's mountPath (a file for a socket).
	volumes := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		volumes[v.Name] = v
	}
	for _, d := range []string{"proc", "dev"} {
		require.NoError(t, os.MkdirAll(filepath.Join(rootfs, d), 0o755))
	}
	for _, m := range c.VolumeMounts {
		v, ok := volumes[m.Name]
		require.True(t, ok && v.HostPath != nil, "volume %s is a hostPath", m.Name)
		p := filepath.Join(rootfs, m.MountPath)
		if v.HostPath.Type != nil && *v.HostPath.Type == corev1.HostPathSocket {
			write(t, p, "", 0o644)
		} else {
			require.NoError(t, os.MkdirAll(p, 0o755))
		}
	}

	// The release's version is in the binary the image runs.
	out, err := exec.CommandContext(ctx, filepath.Join(rootfs, cf.Config.Entrypoint[0]), "version").CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Equal(t, "amilint "+version, strings.TrimSpace(string(out)))

	m := nspawn.Boot(t, ctx, merged)
	phase("node booted")

	// The pod, as kubelet and the runtime set it up.
	var script strings.Builder
	fmt.Fprintf(&script, "set -eu\nR=%s\nmount --bind \"$R\" \"$R\"\n", podRoot)
	script.WriteString("mount -t proc -o nosuid,nodev,noexec proc \"$R/proc\"\n")
	script.WriteString("mount -t tmpfs -o nosuid,mode=755 tmpfs \"$R/dev\"\ntouch \"$R/dev/null\"\nmount --bind /dev/null \"$R/dev/null\"\n")
	for _, vm := range c.VolumeMounts {
		src := volumes[vm.Name].HostPath.Path
		fmt.Fprintf(&script, "mount --rbind %s \"$R\"%s\n", quote(src), quote(vm.MountPath))
		if vm.ReadOnly {
			fmt.Fprintf(&script, "mount -o remount,bind,ro \"$R\"%s\n", quote(vm.MountPath))
		}
		if vm.MountPropagation != nil && *vm.MountPropagation == corev1.MountPropagationHostToContainer {
			fmt.Fprintf(&script, "mount --make-rslave \"$R\"%s\n", quote(vm.MountPath))
		}
	}
	sc := c.SecurityContext
	require.NotNil(t, sc)
	if sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem {
		script.WriteString("mount -o remount,bind,ro \"$R\"\n")
	}
	nnp := ""
	if sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation {
		nnp = "setpriv --no-new-privs -- "
	}
	// The kubelet expands $(VAR) in args from the container's env. The
	// emulated pod's network namespace has only a loopback, brought up
	// below: its address is "", every address there, as $(POD_IP) is the
	// pod's one address in a real pod.
	args := slices.Clone(c.Args)
	for i, a := range args {
		for _, ev := range c.Env {
			if ev.ValueFrom != nil && ev.ValueFrom.FieldRef != nil && ev.ValueFrom.FieldRef.FieldPath == "status.podIP" {
				a = strings.ReplaceAll(a, "$("+ev.Name+")", "")
			}
		}
		args[i] = a
	}
	argv := append(slices.Clone(cf.Config.Entrypoint), args...)
	fmt.Fprintf(&script, "exec %sunshare --root=\"$R\" --wd=%s --setgid=%d --setuid=%d --", nnp, quote(cf.Config.WorkingDir), gid, uid)
	for _, a := range argv {
		script.WriteString(" " + quote(a))
	}
	script.WriteString("\n")
	require.True(t, spec.HostPID, "the DaemonSet shares the node's PID namespace")
	pod := exec.CommandContext(ctx, "nsenter", "-t", strconv.Itoa(m.Init), "-m", "-p", "--",
		"unshare", "--mount", "--propagation", "private", "--net", "--ipc", "--uts", "--fork", "--", "sh", "-c", script.String())
	var podOut bytes.Buffer
	pod.Stdout, pod.Stderr = &podOut, &podOut
	require.NoError(t, pod.Start())
	podDone := make(chan error, 1)
	go func() { podDone <- pod.Wait() }()

	var pid int
	require.Eventually(t, func() bool {
		select {
		case err := <-podDone:
			podDone <- err
			return true
		default:
		}
		pid = findProcess(argv)
		return pid > 0
	}, 30*time.Second, 100*time.Millisecond)
	select {
	case err := <-podDone:
		t.Fatalf("the pod exited: %v\n%s", err, podOut.String())
	default:
	}
	defer func() {
		_ = unix.Kill(pid, unix.SIGTERM)
		select {
		case err := <-podDone:
			t.Logf("pod stopped (%v); its output:\n%s", err, podOut.String())
		case <-time.After(20 * time.Second):
			_ = pod.Process.Kill()
			t.Errorf("the pod did not stop on SIGTERM")
		}
	}()
	phase(fmt.Sprintf("pod started: PID %d on the host", pid))

	// What the pod is: nobody, no capability, no new privileges, in the
	// node's PID namespace, on a read-only root with read-only host mounts.
	status := procStatus(t, pid)
	assert.Equal(t, fmt.Sprintf("%d\t%d\t%d\t%d", uid, uid, uid, uid), status["Uid"])
	assert.Equal(t, fmt.Sprintf("%d\t%d\t%d\t%d", gid, gid, gid, gid), status["Gid"])
	assert.Equal(t, "", status["Groups"])
	for _, k := range []string{"CapInh", "CapPrm", "CapEff", "CapAmb"} {
		assert.Equal(t, "0000000000000000", status[k], k)
	}
	assert.Equal(t, "1", status["NoNewPrivs"])
	assert.Equal(t, nsOf(t, m.Init, "pid"), nsOf(t, pid, "pid"), "hostPID: the node's PID namespace")
	for _, ns := range []string{"mnt", "net", "ipc", "uts"} {
		assert.NotEqual(t, nsOf(t, m.Init, ns), nsOf(t, pid, ns), "the pod's own %s namespace", ns)
	}
	mounts := readOnlyMounts(t, pid)
	assert.True(t, mounts["/"], "read-only root filesystem")
	for _, vm := range c.VolumeMounts {
		assert.Equal(t, vm.ReadOnly, mounts[vm.MountPath], "%s read-only", vm.MountPath)
	}

	// Scrape it inside its network namespace, on the port the DaemonSet
	// declares, as the kubelet's probes and Prometheus do.
	netns := fmt.Sprintf("/proc/%d/ns/net", pid)
	require.NoError(t, loopbackUp(netns))
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: dialIn(netns)}}
	port := c.Ports[0].ContainerPort
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	var ready string
	if !assert.Eventually(t, func() bool {
		code, body := get(ctx, client, base+c.ReadinessProbe.HTTPGet.Path)
		ready = fmt.Sprintf("%d %s", code, body)
		return code == http.StatusOK
	}, 90*time.Second, time.Second, "the pod becomes ready") {
		t.Fatalf("readiness: %s\npod output:\n%s", ready, podOut.String())
	}
	code, body := get(ctx, client, base+c.LivenessProbe.HTTPGet.Path)
	assert.Equal(t, http.StatusOK, code, body)
	phase("ready: " + ready)

	code, body = get(ctx, client, base+"/metrics")
	require.Equal(t, http.StatusOK, code, body)
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	require.NoError(t, err)
	var collectors []string
	for _, mt := range fams["amilint_collector_up"].GetMetric() {
		assert.Equal(t, 1.0, mt.GetGauge().GetValue(), "collector %s works", label(mt, "collector"))
		collectors = append(collectors, label(mt, "collector"))
	}
	assert.ElementsMatch(t, []string{"cgroup", "cpu", "systemd"}, collectors)
	findings := map[string]bool{}
	for _, mt := range fams["amilint_findings"].GetMetric() {
		if mt.GetGauge().GetValue() > 0 {
			findings[label(mt, "rule_id")] = true
		}
	}
	assert.True(t, findings["ecs-agent-unconfigured"], "the static rule over /host finds the enabled ecs.service: %v", findings)
	units := map[string]bool{}
	for _, mt := range fams["amilint_unit_restarts_total"].GetMetric() {
		units[label(mt, "unit")] = true
	}
	assert.True(t, units["ecs.service"], "systemd over the node's bus reports ecs.service")
	require.NotEmpty(t, fams["amilint_memcg_tracked"].GetMetric())
	assert.Positive(t, fams["amilint_memcg_tracked"].GetMetric()[0].GetGauge().GetValue(), "the cgroup collector counts memory cgroups")
	t.Logf("findings exported: %v; %d units", slices.Sorted(mapsKeys(findings)), len(units))
	phase("scraped")
}

// pinnedDaemonSet decodes the DaemonSet build wrote, strictly.
func pinnedDaemonSet(t *testing.T, path string) *appsv1.DaemonSet {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	s := k8sruntime.NewScheme()
	require.NoError(t, corev1.AddToScheme(s))
	require.NoError(t, appsv1.AddToScheme(s))
	dec := serializer.NewCodecFactory(s, serializer.EnableStrict).UniversalDeserializer()
	for _, doc := range strings.Split(string(b), "\n---\n") {
		obj, _, err := dec.Decode([]byte(doc), nil, nil)
		require.NoError(t, err)
		if ds, ok := obj.(*appsv1.DaemonSet); ok {
			return ds
		}
	}
	t.Fatalf("%s holds no DaemonSet", path)
	return nil
}

func platformImage(idx v1.ImageIndex, arch string) (v1.Image, error) {
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	for _, d := range m.Manifests {
		if d.Platform != nil && d.Platform.OS == "linux" && d.Platform.Architecture == arch {
			return idx.Image(d.Digest)
		}
	}
	return nil, fmt.Errorf("no linux/%s image", arch)
}

// unpack writes the image's flattened filesystem under dir; it holds only
// directories and regular files, and no name leaves dir.
func unpack(t *testing.T, img v1.Image, dir string) {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		require.NoError(t, err)
		p := filepath.Join(dir, h.Name)
		require.True(t, strings.HasPrefix(p, dir+string(filepath.Separator)), "%s stays in the rootfs", h.Name)
		switch h.Typeflag {
		case tar.TypeDir:
			require.NoError(t, os.MkdirAll(p, os.FileMode(h.Mode).Perm()))
		case tar.TypeReg:
			require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode).Perm())
			require.NoError(t, err)
			_, err = io.Copy(f, tr)
			require.NoError(t, err)
			require.NoError(t, f.Close())
		default:
			t.Fatalf("%s: unexpected entry type %c", h.Name, h.Typeflag)
		}
	}
}

func write(t *testing.T, path, data string, mode os.FileMode) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, []byte(data), mode))
}

// quote quotes s for sh.
func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// findProcess returns the PID of the process whose argv is argv, 0 if none.
func findProcess(argv []string) int {
	want := strings.Join(argv, "\x00") + "\x00"
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && string(b) == want {
			return pid
		}
	}
	return 0
}

func procStatus(t *testing.T, pid int) map[string]string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(t, err)
	out := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok {
			out[k] = strings.TrimSpace(v)
		}
	}
	return out
}

func nsOf(t *testing.T, pid int, ns string) string {
	t.Helper()
	l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", pid, ns))
	require.NoError(t, err)
	return l
}

// readOnlyMounts maps each mount point the process sees to whether it is
// mounted read-only.
func readOnlyMounts(t *testing.T, pid int) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
	require.NoError(t, err)
	out := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(l)
		if len(f) < 6 {
			continue
		}
		out[f[4]] = slices.Contains(strings.Split(f[5], ","), "ro")
	}
	return out
}

// inNetns runs fn on an OS thread moved into the network namespace netns;
// the thread is never returned to the scheduler (it stays locked and exits
// with the goroutine).
func inNetns(netns string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		f, err := os.Open(netns)
		if err != nil {
			errc <- err
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns %s: %w", netns, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// loopbackUp brings lo up in netns, as the pod network's setup does.
func loopbackUp(netns string) error {
	return inNetns(netns, func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		ifr, err := unix.NewIfreq("lo")
		if err != nil {
			return err
		}
		if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
			return err
		}
		ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
		return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
	})
}

// dialIn dials from inside netns: the socket is created there.
func dialIn(netns string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		err := inNetns(netns, func() error {
			var d net.Dialer
			var err error
			c, err = d.DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}
}

func get(ctx context.Context, c *http.Client, url string) (int, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err.Error()
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	return resp.StatusCode, string(b)
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func mapsKeys(m map[string]bool) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}
