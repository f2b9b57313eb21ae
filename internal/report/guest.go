//go:build amilint_guest

package report

import "errors"

// htmlFormat refuses HTML in the guest build of amilint (`-tags
// amilint_guest`, the binary the Packer plugin uploads): executing an HTML
// template makes the linker keep every exported method of every type that
// reaches an interface, which is 3 MB of OPA's dependencies alone. The
// plugin writes HTML reports on the Packer host, from the guest's JSON.
func htmlFormat(options) (Writer, error) {
	return nil, errors.New("report format \"html\": HTML reports are not written by the guest build of amilint (the binary the Packer plugin uploads, which writes them on the Packer host); use the full amilint")
}

// rolloutHTMLFormat refuses HTML rollouts in the guest build, which refuses
// `amilint report` itself.
func rolloutHTMLFormat() (RolloutWriter, error) {
	return nil, errors.New("rollout format \"html\": not written by the guest build of amilint; use the full amilint")
}
