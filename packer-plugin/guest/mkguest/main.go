// Command mkguest builds the guest binaries the plugin embeds: the guest
// build of amilint for linux/amd64 and linux/arm64, each zstd-compressed
// into the guest package's bin/ directory. Run it from the plugin module
// before building the plugin (`make guest-binaries`; the release runs it as
// a before hook):
//
//	go run ./guest/mkguest [-version v0.1.0] [-out guest/bin]
//
// With -raw it writes the binaries uncompressed (amilint_linux_ARCH), for
// measuring them (`make bench`). This is the one place the guest build's
// flags are written down; its tests build through it too.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/klauspost/compress/zstd"

	"github.com/amilint/amilint/packer-plugin/guest"
)

// buildFlags are the guest build's: the amilint_guest tag (see
// ARCHITECTURE.md: no AWS, disk image, container image or HTML code),
// stripped, and OPA with the libraries only it uses compiled without
// inlining. That is 1.4 MB of 25 (measured on linux/amd64 with
// OPA v1.22.3) for 3% more CPU in a policy evaluation
// (BenchmarkEvaluateDLAMI: 21.97 against 22.62 cpu-ms).
//
// The libraries a guest audit links but never runs are compiled without
// inlining too: the HTTP client and TLS that OPA's http.send brings (the
// guest's policies have no network) and the D-Bus client of live. That is
// 225 KB on linux/amd64 (24,752,290 bytes, from 24,977,570) and 197 KB on
// arm64, margin under guest.MaxBinarySize for the next OPA or Go release,
// at no cost to a scan (of the Debian root: 33.24 against 33.06 cpu-ms,
// 100 runs each, interleaved). The YAML libraries, as cold, are left out: the same
// flag on them cost 1.3 to 1.6 cpu-ms a scan, though YAML is only
// package initialisation in a scan's profile (0.3%).
//
// Since the policy engine evaluates with topdown, not through OPA's rego
// package, the guest links neither rego's Wasm and IR targets nor the
// protobuf encodings they brought (ARCHITECTURE.md): 21.08 MB on
// linux/amd64, from 24.88, and 19.73 MB on arm64, from 23.27. The flags
// above are kept, as margin for what the model and OPA add next.
var buildFlags = []string{
	"-tags", "amilint_guest", "-trimpath",
	"-gcflags", "github.com/open-policy-agent/opa/...=-l",
	"-gcflags", "github.com/lestrrat-go/...=-l",
	"-gcflags", "github.com/vektah/gqlparser/...=-l",
	"-gcflags", "net/http/...=-l",
	"-gcflags", "crypto/tls=-l",
	"-gcflags", "crypto/x509=-l",
	"-gcflags", "github.com/godbus/dbus/...=-l",
}

func main() {
	version := flag.String("version", "", "the version amilint reports (default: what the build records)")
	out := flag.String("out", filepath.Join("guest", "bin"), "the directory to write the binaries to")
	raw := flag.Bool("raw", false, "write the binaries uncompressed, as amilint_linux_ARCH")
	flag.Parse()
	if err := run(context.Background(), *version, *out, *raw); err != nil {
		fmt.Fprintln(os.Stderr, "mkguest:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, version, out string, raw bool) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "mkguest")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	for _, arch := range guest.Archs {
		bin := filepath.Join(tmp, "amilint_linux_"+arch)
		if err := build(ctx, arch, version, bin); err != nil {
			return err
		}
		b, err := os.ReadFile(bin)
		if err != nil {
			return err
		}
		if len(b) > guest.MaxBinarySize {
			return fmt.Errorf("linux/%s: the guest build is %d bytes, more than %d: keep what a guest audit cannot use out of it (the amilint_guest build tag)",
				arch, len(b), guest.MaxBinarySize)
		}
		dst, data := filepath.Join(out, "amilint_linux_"+arch), b
		if !raw {
			dst = filepath.Join(out, guest.FileName(arch))
			if data, err = compress(b); err != nil {
				return fmt.Errorf("compress linux/%s: %w", arch, err)
			}
		}
		if err := os.WriteFile(dst+".tmp", data, 0o755); err != nil {
			return err
		}
		if err := os.Rename(dst+".tmp", dst); err != nil {
			return err
		}
		packed := ""
		if !raw {
			packed = fmt.Sprintf(", %.2f MB compressed in the plugin", float64(len(data))/1e6)
		}
		fmt.Printf("mkguest: %s: amilint for linux/%s, %.2f MB stripped%s\n", dst, arch, float64(len(b))/1e6, packed)
	}
	return nil
}

// build builds the guest build of amilint for linux/arch into out, with
// version as what it reports when not empty.
func build(ctx context.Context, arch, version, out string) error {
	// The amilint module as this module resolves it (a replace to ../).
	src, err := output(ctx, "", nil, "go", "list", "-m", "-f", "{{.Dir}}", "github.com/amilint/amilint")
	if err != nil {
		return err
	}
	ldflags := "-s -w"
	if version != "" {
		ldflags += " -X github.com/amilint/amilint/internal/cli.Version=" + version
	}
	args := append([]string{"build"}, buildFlags...)
	args = append(args, "-ldflags", ldflags, "-o", out, "./cmd/amilint")
	_, err = output(ctx, strings.TrimSpace(src), []string{"GOOS=linux", "GOARCH=" + arch, "CGO_ENABLED=0"}, "go", args...)
	return err
}

// compress returns b as one zstd frame with its checksum.
func compress(b []byte) ([]byte, error) {
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedBestCompression), zstd.WithEncoderCRC(true))
	if err != nil {
		return nil, err
	}
	return enc.EncodeAll(b, nil), enc.Close()
}

// output runs name with args in dir (with env added) and returns its
// standard output; a failure carries its standard error.
func output(ctx context.Context, dir string, env []string, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}
