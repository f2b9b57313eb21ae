// Command image builds amilint's container image without a Docker engine,
// with go-containerregistry: a multi-platform OCI image index (linux/amd64
// and linux/arm64) holding the release's static binary, the CA
// certificates the AWS APIs need and an unprivileged user, nothing else.
//
//	go run . build -version v0.1.0 -image ghcr.io/amilint/amilint \
//	    -binary linux/amd64=amilint-linux-amd64 -binary linux/arm64=amilint-linux-arm64 \
//	    -ca-certs /etc/ssl/certs/ca-certificates.crt -daemonset ../daemonset.yaml -out DIR
//
// writes DIR/oci (an OCI image layout, tagged with the version), DIR/reference
// (IMAGE:VERSION@sha256:DIGEST, the index's digest) and DIR/daemonset.yaml
// (the DaemonSet pinned to that digest).
//
//	go run . push -layout DIR/oci -to ghcr.io/amilint/amilint:v0.1.0
//
// pushes the layout's index with the credentials of ~/.docker/config.json
// and prints the pushed reference with its digest, which is the built one.
//
// Make runs both (make image, make image-push).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// platformFlag is -binary PLATFORM=PATH, repeatable.
type platformFlag map[string]string

func (p platformFlag) String() string { return fmt.Sprint(map[string]string(p)) }
func (p platformFlag) Set(v string) error {
	plat, file, ok := strings.Cut(v, "=")
	if !ok || plat == "" || file == "" {
		return errors.New("want PLATFORM=PATH, e.g. linux/amd64=dist/amilint")
	}
	p[plat] = file
	return nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "usage: image build|push [flags]")
		return 2
	}
	var err error
	switch args[0] {
	case "build":
		err = runBuild(args[1:], stdout)
	case "push":
		err = runPush(ctx, args[1:], stdout)
	default:
		err = fmt.Errorf("unknown command %q (build, push)", args[0])
	}
	if err != nil {
		fmt.Fprintf(stderr, "image %s: %v\n", args[0], err)
		return 2
	}
	return 0
}

func runBuild(args []string, stdout io.Writer) error {
	fs := newFlagSet("build")
	bins := platformFlag{}
	fs.Var(bins, "binary", "`PLATFORM=PATH` of a static amilint binary (repeatable)")
	version := fs.String("version", "", "release version the binaries carry, the image's tag")
	repo := fs.String("image", "", "image repository, e.g. ghcr.io/amilint/amilint")
	ca := fs.String("ca-certs", "/etc/ssl/certs/ca-certificates.crt", "PEM bundle of CA certificates")
	ds := fs.String("daemonset", "", "DaemonSet manifest naming IMAGE:VERSION, written pinned to the digest into -out")
	out := fs.String("out", "", "output directory")
	created := fs.String("created", os.Getenv("SOURCE_DATE_EPOCH"), "creation time, seconds since the epoch (default $SOURCE_DATE_EPOCH, else 0)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *repo == "" || *out == "" {
		return errors.New("-image and -out are required")
	}
	t := time.Unix(0, 0).UTC()
	if *created != "" {
		sec, err := strconv.ParseInt(*created, 10, 64)
		if err != nil {
			return fmt.Errorf("-created %q: want seconds since the epoch", *created)
		}
		t = time.Unix(sec, 0).UTC()
	}
	idx, err := Build(Options{Version: *version, Binaries: bins, CACerts: *ca, Created: t})
	if err != nil {
		return err
	}
	ref, err := WriteOutputs(idx, *repo, *version, *ds, *out)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, ref)
	return nil
}

func newFlagSet(name string) *flag.FlagSet {
	return flag.NewFlagSet("image "+name, flag.ContinueOnError)
}
