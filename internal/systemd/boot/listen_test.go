package boot

import "strings"

// listenCases are sockets whose listen addresses systemd's parsers may
// ignore (config_parse_socket_listen: socket_address_parse_and_warn,
// socket_address_parse_netlink, the "Address family not supported" check
// of a sequential packet socket), by unit name. Each is enabled through
// sockets.target.wants: one left with no address is refused, an ignored
// address counts neither as a non-accepting socket nor as a node for
// Symlinks=.
var listenCases = map[string]string{
	// IPv4 and IPv6 addresses need a port; bare ports are 1..65535 in
	// any base safe_atou reads. A scope is written "%%" ("%l" and "%a"
	// are specifiers); the only link taken to exist is the loopback.
	"l-ip-5dots":     "ListenStream=1.2.3.4.5:80\n",
	"l-ip-port0":     "ListenStream=1.2.3.4:0\n",
	"l-ip-port-big":  "ListenStream=1.2.3.4:65536\n",
	"l-ip-noport":    "ListenStream=1.2.3.4\n",
	"l-ip-lead0":     "ListenStream=01.2.3.4:80\n",
	"l-ip-name":      "ListenStream=localhost:80\n",
	"l-ip-star":      "ListenStream=*:80\n",
	"l-ip-hash":      "ListenStream=127.0.0.1:80#name\n",
	"l-ip-hexport":   "ListenStream=127.0.0.1:0x50\n",
	"l-ip-ok":        "ListenDatagram=127.0.0.1:8053\n",
	"l-bare-0":       "ListenStream=0\n",
	"l-bare-big":     "ListenStream=65536\n",
	"l-bare-neg":     "ListenStream=-1\n",
	"l-bare-x":       "ListenStream=80x\n",
	"l-bare-hex":     "ListenStream=0x1F90\n",
	"l-bare-plus":    "ListenStream=+8080\n",
	"l-bare-octal":   "ListenStream=017620\n",
	"l-bare-bin":     "ListenStream=0b1111110100000\n",
	"l-bare-plusbin": "ListenStream=+0b1111110100000\n",
	"l-bare-0b0b":    "ListenStream=0b0b1111110100000\n",
	"l-v6-noport":    "ListenStream=[::1]\n",
	"l-v6-bare":      "ListenStream=::1\n",
	"l-v6-full":      "ListenStream=1:2:3:4:5:6:7:8\n",
	"l-v6-v4":        "ListenStream=[1.2.3.4]:80\n",
	"l-v6-mapped":    "ListenStream=[::ffff:127.0.0.1]:8081\n",
	"l-v6-any":       "ListenStream=[::]:8082\n",
	"l-v6-empty":     "ListenStream=[]:80\n",
	"l-v6-2colons":   "ListenStream=[1::2::3]:80\n",
	"l-v6-zero":      "ListenStream=[1:2:3:4:5:6:7::8]:80\n",
	"l-v6-lo":        "ListenStream=[::1]:8083%%lo\n",
	"l-v6-idx1":      "ListenStream=[::1]:8084%%1\n",
	"l-v6-idxbig":    "ListenStream=[::1]:8085%%99999\n",
	"l-v6-noif":      "ListenStream=[::1]:8086%%nosuchif0\n",
	"l-v6-ifall":     "ListenStream=[::1]:8087%%all\n",
	"l-v6-ifempty":   "ListenStream=[::1]:8088%%\n",
	"l-v4-lo":        "ListenStream=127.0.0.1:8089%%lo\n",
	// AF_VSOCK: vsock:CID:PORT; from 257 also vsock-stream:, vsock-dgram:
	// and vsock-seqpacket:, named CIDs, and not port 4294967295.
	"l-vs-ok":      "ListenStream=vsock::9000\n",
	"l-vs-cid":     "ListenStream=vsock:2:9001\n",
	"l-vs-x":       "ListenStream=vsock:x:1\n",
	"l-vs-one":     "ListenStream=vsock:1\n",
	"l-vs-noport":  "ListenStream=vsock:2:\n",
	"l-vs-host":    "ListenStream=vsock:host:9002\n",
	"l-vs-stream":  "ListenStream=vsock-stream::9003\n",
	"l-vs-dgram":   "ListenDatagram=vsock-dgram:local:9004\n",
	"l-vs-portany": "ListenStream=vsock:2:4294967295\n",
	"l-vs-portbig": "ListenStream=vsock:2:4294967296\n",
	"l-vs-cidneg":  "ListenStream=vsock:-1:9005\n",
	// AF_UNIX: 2 to 107 bytes, "@" for the abstract namespace.
	"l-un-at":      "ListenStream=@\n",
	"l-un-slash":   "ListenStream=/\n",
	"l-un-long":    "ListenStream=/run/" + strings.Repeat("l", 103) + "\n",
	"l-un-max":     "ListenStream=/run/" + strings.Repeat("m", 102) + "\n",
	"l-un-atlong":  "ListenStream=@" + strings.Repeat("a", 107) + "\n",
	"l-un-atmax":   "ListenStream=@" + strings.Repeat("b", 106) + "\n",
	"l-un-rel":     "ListenStream=run/l-un-rel.sock\n",
	"l-un-varrun":  "ListenStream=/var/run/" + strings.Repeat("v", 100) + "\n",
	"l-un-spec":    "ListenStream=/run/%X\n",
	"l-seq-ip":     "ListenSequentialPacket=127.0.0.1:8090\n",
	"l-seq-vsock":  "ListenSequentialPacket=vsock::9006\n",
	"l-seq-port":   "ListenSequentialPacket=8091\n",
	"l-seq-unix":   "ListenSequentialPacket=@l-seq-unix\n",
	"l-dgram-port": "ListenDatagram=8092\n",
	// Netlink: a family name or number (at most INT_MAX) and an optional
	// group number.
	"l-nl-none":     "ListenNetlink=nosuchfamily\n",
	"l-nl-group":    "ListenNetlink=kobject-uevent x\n",
	"l-nl-ok":       "ListenNetlink=kobject-uevent 1\n",
	"l-nl-audit":    "ListenNetlink=audit\n",
	"l-nl-num":      "ListenNetlink=99\n",
	"l-nl-numbig":   "ListenNetlink=2147483648\n",
	"l-nl-case":     "ListenNetlink=Route\n",
	"l-nl-neg":      "ListenNetlink=route -1\n",
	"l-nl-hex":      "ListenNetlink=route 0x10\n",
	"l-nl-two":      "ListenNetlink=route 1 2\n",
	"l-nl-esc":      "ListenNetlink=rou\\te\n",
	"l-nl-bs":       "ListenNetlink=route\\\n\n",
	"l-nl-spec":     "ListenNetlink=%X\n",
	"l-nl-groupbig": "ListenNetlink=route 4294967296\n",
	// An ignored address next to a kept one: it is no non-accepting
	// socket for Accept=yes and no node for Symlinks=.
	"l-acc-dgram": "ListenStream=/run/l-acc-dgram.sock\nListenDatagram=1.2.3.4.5:80\nAccept=yes\n",
	"l-acc-nl":    "ListenStream=/run/l-acc-nl.sock\nListenNetlink=nosuchfamily\nAccept=yes\n",
	"l-acc-seq":   "ListenStream=/run/l-acc-seq.sock\nListenSequentialPacket=127.0.0.1:8093\nAccept=yes\n",
	"l-acc-keep":  "ListenStream=/run/l-acc-keep.sock\nListenDatagram=8094\nAccept=yes\n",
	"l-sym-long":  "ListenStream=/run/l-sym-long.sock\nListenDatagram=/run/" + strings.Repeat("s", 103) + "\nSymlinks=/run/l-sym-long.link\n",
	"l-mixed":     "ListenStream=1.2.3.4:0\nListenNetlink=nosuchfamily\nListenStream=8095\n",
}

// listenOps enables each of listenCases with a service (and a template
// for Accept=yes) to activate, and instances of a template socket whose
// address is its instance.
func listenOps() []op {
	var ops []op
	for name, text := range listenCases {
		ops = append(ops, file("/etc/systemd/system/"+name+".socket", "[Socket]\n"+text),
			link("/etc/systemd/system/sockets.target.wants/"+name+".socket", "/etc/systemd/system/"+name+".socket"),
			file("/etc/systemd/system/"+name+".service", svc),
			file("/etc/systemd/system/"+name+"@.service", svc))
	}
	ops = append(ops, file("/etc/systemd/system/l-tmpl@.socket", "[Socket]\nListenStream=%i\n"),
		file("/etc/systemd/system/l-tmpl@.service", svc))
	for _, inst := range []string{"8096", "x", "0", "127.0.0.1:8097", "vsock::9007"} {
		n := "l-tmpl@" + inst + ".socket"
		ops = append(ops, link("/etc/systemd/system/sockets.target.wants/"+n, "/etc/systemd/system/l-tmpl@.socket"))
	}
	return ops
}
