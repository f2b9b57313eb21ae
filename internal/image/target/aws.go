//go:build !amilint_guest

package target

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/config"
	sdkebs "github.com/aws/aws-sdk-go-v2/service/ebs"
	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/amilint/amilint/internal/image/ebs"
	"github.com/amilint/amilint/internal/image/netguard"
)

// maxAWSBody caps each answer of the EBS and EC2 APIs.
const maxAWSBody = 16 << 20

// openAWS opens `ami:ami-…` and `ebs:snap-…` targets: the snapshot is read
// block by block through the EBS direct APIs, with region and credentials
// from the standard AWS chain (environment, shared config, IMDS), and then
// read as a disk image like any other. ok is false for other specs.
func openAWS(ctx context.Context, spec string, opt Options) (im *Image, ok bool, err error) {
	var kind, id string
	switch {
	case strings.HasPrefix(spec, AMIPrefix):
		kind, id = "ami", strings.TrimPrefix(spec, AMIPrefix)
	case strings.HasPrefix(spec, EBSPrefix):
		kind, id = "ebs", strings.TrimPrefix(spec, EBSPrefix)
	default:
		return nil, false, nil
	}
	if id == "" {
		return nil, true, fmt.Errorf("open target %s: missing id", spec)
	}
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, true, fmt.Errorf("open target %s: load AWS configuration: %w", spec, err)
	}
	// An endpoint that stops answering fails the request after a minute
	// of silence, and no answer may hold more than 16 MiB (a page of the
	// block list is about 1 MiB, a block 512 KiB). The client the chain
	// built (with its CA bundle, proxy, timeouts) is wrapped, not replaced.
	cfg.HTTPClient = netguard.Client(cfg.HTTPClient, netguard.Options{MaxBody: maxAWSBody})
	// The SDK retries what may pass on a second try (three tries in all);
	// a server silent for a minute, or answering without end, is not one
	// of those, and three tries would make the wait three minutes.
	cfg.Retryer = func() aws.Retryer {
		return retry.NewStandard(func(o *retry.StandardOptions) {
			o.Retryables = append([]retry.IsErrorRetryable{retry.IsErrorRetryableFunc(notAfterGuard)}, o.Retryables...)
		})
	}
	snapID := id
	if kind == "ami" {
		// The AMI's other EBS volumes come with the same answer: their
		// filesystems are unknown (rootfs.Disk.Other).
		snapID, opt.otherVolumes, err = ebs.Snapshots(ctx, ec2.NewFromConfig(cfg), id)
		if err != nil {
			return nil, true, fmt.Errorf("open target %s: %w", spec, err)
		}
	}
	snap, err := ebs.Open(ctx, sdkebs.NewFromConfig(cfg), snapID, ebs.Options{Progress: opt.Progress})
	if err != nil {
		return nil, true, fmt.Errorf("open target %s: %w", spec, err)
	}
	im, err = OpenDisk(spec, snap, snap.Size(), opt)
	if err != nil {
		snap.Close()
		return nil, true, err
	}
	// Closing the image stops the snapshot's reads ahead still in flight.
	im.closer = closers{im.closer, snap}
	im.Kind = kind
	im.FS = im.FS.Remote()
	im.Detail = "EBS snapshot " + snapID + ", " + im.Detail
	im.counter = fetched{snap}
	return im, true, nil
}

// notAfterGuard refuses to retry a request netguard stopped.
func notAfterGuard(err error) aws.Ternary {
	if errors.Is(err, netguard.ErrStalled) || errors.Is(err, netguard.ErrTooLarge) {
		return aws.FalseTernary
	}
	return aws.UnknownTernary
}

// fetched reports a snapshot's fetched bytes as the bytes read.
type fetched struct{ s *ebs.Snapshot }

func (f fetched) Bytes() int64 { return f.s.Fetched() }
