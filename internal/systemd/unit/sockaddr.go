package unit

import (
	"errors"
	"math"
	"strings"
)

// SocketFamily is the kind of address a listen setting names.
type SocketFamily int

// The families socket_address_parse yields.
const (
	FamilyUnix     SocketFamily = iota + 1 // an AF_UNIX file system path
	FamilyAbstract                         // an AF_UNIX abstract name ("@...")
	FamilyInet                             // AF_INET
	FamilyInet6                            // AF_INET6
	FamilyVsock                            // AF_VSOCK
)

// vsockTypes is the version (of the two modelled) that reads
// "vsock-stream:", "vsock-dgram:" and "vsock-seqpacket:" addresses, the
// named CIDs "hypervisor", "local" and "host", and refuses port
// 4294967295 (VMADDR_PORT_ANY): socket_address_parse_vsock.
const vsockTypes = 257

// numericIfindexChecked is the version (of the two modelled) whose
// rtnl_resolve_interface asks the kernel for a numeric scope ("%3")
// rather than taking the number as it is.
const numericIfindexChecked = 257

// ParseSocketAddress reports whether systemd of version keeps s, a
// ListenStream=, ListenDatagram= or ListenSequentialPacket= value after
// specifiers (and /var/run patched to /run), and which family it names.
// It follows socket_address_parse_and_warn: an AF_UNIX path or "@" name of
// 2 to 107 bytes (sockaddr_un_set_path), an AF_VSOCK "vsock:CID:PORT", a
// bare port (1 to 65535, in any base safe_atou reads), or an IPv4 or
// bracketed IPv6 address with a port, optionally followed by "%" and a
// network interface (in_addr_port_ifindex_name_from_string_auto).
//
// Two answers depend on the machine systemd runs on, not on the image, and
// are fixed here as on a Debian kernel at boot: IPv6 is supported
// (socket_ipv6_is_supported, so a bare port is an IPv6 one and IPv6
// addresses are not refused), and the only network interface taken to
// exist when PID 1 reads its units is the loopback ("lo", index 1): other
// links may not be there yet (drivers load and udev names links later),
// so a scope naming them counts as refused. A scope that is a positive
// number is taken as it is before numericIfindexChecked.
func ParseSocketAddress(version int, s string) (SocketFamily, bool) {
	if s != "" && (s[0] == '/' || s[0] == '@') {
		// sockaddr_un_set_path: room for the terminating NUL in the
		// 108 bytes of sun_path.
		if len(s) < 2 || len(s)+1 > 108 {
			return 0, false
		}
		if s[0] == '@' {
			return FamilyAbstract, true
		}
		return FamilyUnix, true
	}
	if rest, ok := vsockPrefix(version, s); ok {
		return FamilyVsock, vsockValid(version, rest)
	}
	port, err := parseIPPort(version, s)
	if errors.Is(err, errRange) {
		return 0, false // valid port syntax, but no port
	}
	if err == nil && port > 0 {
		return FamilyInet6, true
	}
	fam, port, ok := inAddrPortIfindex(version, s)
	if !ok || port == 0 {
		return 0, false
	}
	return fam, true
}

// vsockPrefix strips the prefix of an AF_VSOCK address: "vsock:", and
// from vsockTypes one naming the socket type (socket_address_parse_vsock).
func vsockPrefix(version int, s string) (string, bool) {
	prefixes := []string{"vsock:"}
	if version >= vsockTypes {
		prefixes = append(prefixes, "vsock-dgram:", "vsock-seqpacket:", "vsock-stream:")
	}
	for _, p := range prefixes {
		if rest, ok := strings.CutPrefix(s, p); ok {
			return rest, true
		}
	}
	return "", false
}

// vsockValid checks "CID:PORT" after the prefix: the CID empty (any), a
// number or (from vsockTypes) a name, the port a number (vsock_parse_cid,
// vsock_parse_port).
func vsockValid(version int, s string) bool {
	cid, port, ok := strings.Cut(s, ":")
	if !ok {
		return false
	}
	p, err := safeAtou(version, port, false)
	if err != nil || version >= vsockTypes && p == math.MaxUint32 {
		return false
	}
	if cid == "" || version >= vsockTypes && (cid == "hypervisor" || cid == "local" || cid == "host") {
		return true
	}
	_, err = safeAtou(version, cid, false)
	return err == nil
}

// inAddrPortIfindex is in_addr_port_ifindex_name_from_string_auto without
// a server name: the family and port of s ("a.b.c.d:port",
// "[v6]:port", "v6"), after a "%" scope that must resolve.
func inAddrPortIfindex(version int, s string) (SocketFamily, uint16, bool) {
	if strings.IndexByte(s, '#') >= 0 {
		return 0, 0, false
	}
	if i := strings.IndexByte(s, '%'); i >= 0 {
		if !ifindexResolves(version, s[i+1:]) {
			return 0, 0, false
		}
		s = s[:i]
	}
	m := strings.LastIndexByte(s, ':')
	switch {
	case m < 0:
		return FamilyInet, 0, inetPton4(s)
	case s[0] == '[':
		if s[m-1] != ']' {
			return 0, 0, false
		}
		port, err := parseIPPort(version, s[m+1:])
		if err != nil || m < 2 || !inetPton6(s[1:m-1]) {
			return 0, 0, false
		}
		return FamilyInet6, port, true
	case inetPton6(s):
		return FamilyInet6, 0, true
	default:
		if !inetPton4(s[:m]) {
			return 0, 0, false
		}
		port, err := parseIPPort(version, s[m+1:])
		return FamilyInet, port, err == nil
	}
}

// ifindexResolves is ifname_valid_full (alternative and numeric names
// allowed) and rtnl_resolve_interface on a machine whose only link is the
// loopback: "lo" or index 1, or before numericIfindexChecked any positive
// index.
func ifindexResolves(version int, name string) bool {
	if idx, ok := parseIfindex(version, name); ok {
		return idx == 1 || version < numericIfindexChecked
	}
	return name == "lo"
}

// ParseNetlinkAddress reports whether systemd of version keeps s, a
// ListenNetlink= value after specifiers (socket_address_parse_netlink): a
// family name or a number up to INT_MAX (netlink_family_from_string), then
// optionally a group number.
func ParseNetlinkAddress(version int, s string) bool {
	w, rest, ok, err := ExtractWord(s, false, false)
	if err != nil || !ok {
		return false
	}
	if !netlinkFamilies[w] {
		u, err := safeAtou(version, w, false)
		if err != nil || u > math.MaxInt32 {
			return false
		}
	}
	if rest == "" {
		return true
	}
	_, err = safeAtou(version, rest, false)
	return err == nil
}

// netlinkFamilies is netlink_family_table.
var netlinkFamilies = map[string]bool{
	"route": true, "firewall": true, "inet-diag": true, "nflog": true, "xfrm": true, "selinux": true,
	"iscsi": true, "audit": true, "fib-lookup": true, "connector": true, "netfilter": true, "ip6-fw": true,
	"dnrtmsg": true, "kobject-uevent": true, "generic": true, "scsitransport": true, "ecryptfs": true, "rdma": true,
}

// parseIPPort is parse_ip_port: safe_atou16 without leading whitespace,
// not 0.
func parseIPPort(version int, s string) (uint16, error) {
	u, err := safeAtou(version, s, true)
	switch {
	case err != nil:
		return 0, err
	case u > math.MaxUint16:
		return 0, errRange
	case u == 0:
		return 0, errInvalid
	}
	return uint16(u), nil
}

// safeAtou is safe_atou_full with base 0 (and, if refuseSpace,
// SAFE_ATO_REFUSE_LEADING_WHITESPACE): leading whitespace, a "0b" or "0o"
// prefix (mangle_base), then C's strtoul; "-" is refused unless the
// value is 0, and the value must fit 32 bits.
func safeAtou(version int, s string, refuseSpace bool) (uint32, error) {
	if refuseSpace && (s == "" || strings.IndexByte(whitespace, s[0]) >= 0) {
		return 0, errInvalid
	}
	s = strings.TrimLeft(s, whitespace)
	s, base := MangleBase(s)
	v, err := strtoulBase(s, base, version >= C23Strtol)
	if err != nil {
		return 0, err
	}
	if v != 0 && s != "" && s[0] == '-' || v > math.MaxUint32 {
		return 0, errRange
	}
	return uint32(v), nil
}

// parseIfindex is parse_ifindex: safe_atoi (strtol after whitespace and
// mangle_base, within int), positive.
func parseIfindex(version int, s string) (int, bool) {
	s = strings.TrimLeft(s, whitespace)
	s, base := MangleBase(s)
	v, err := strtoulBase(s, base, version >= C23Strtol)
	if err != nil {
		return 0, false
	}
	// strtol: the magnitude is within LONG_MAX (a negative value is
	// refused below anyway); then (long)(int)l == l and l > 0.
	neg := strings.HasPrefix(strings.TrimLeft(s, cSpace), "-")
	if neg || v == 0 || v > math.MaxInt32 {
		return 0, false
	}
	return int(v), true
}

// inetPton4 is glibc's inet_pton for AF_INET: four dotted decimal
// octets of at most 255, without leading zeros.
func inetPton4(s string) bool {
	octets, sawDigit, cur := 0, false, 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= '0' && c <= '9':
			if sawDigit && cur == 0 {
				return false
			}
			cur = cur*10 + int(c-'0')
			if cur > 255 {
				return false
			}
			if !sawDigit {
				if octets++; octets > 4 {
					return false
				}
				sawDigit = true
			}
		case c == '.' && sawDigit:
			if octets == 4 {
				return false
			}
			cur, sawDigit = 0, false
		default:
			return false
		}
	}
	return octets == 4
}

// inetPton6 is glibc's inet_pton for AF_INET6: up to eight groups of
// one to four hex digits, one "::" standing for at least one zero
// group, optionally ending in an IPv4 address.
func inetPton6(s string) bool {
	const size = 16
	if s == "" {
		return false
	}
	i := 0
	if s[0] == ':' {
		if len(s) < 2 || s[1] != ':' {
			return false
		}
		i = 1
	}
	tp, colon := 0, -1
	curtok := i
	digits, val := 0, 0
	for i < len(s) {
		c := s[i]
		i++
		if d := HexVal(c); d >= 0 {
			if digits == 4 {
				return false
			}
			val = val<<4 | d
			digits++
			continue
		}
		if c == ':' {
			curtok = i
			if digits == 0 {
				if colon >= 0 {
					return false
				}
				colon = tp
				continue
			}
			if i == len(s) || tp+2 > size {
				return false
			}
			tp += 2
			digits, val = 0, 0
			continue
		}
		if c == '.' && tp+4 <= size && inetPton4(s[curtok:]) {
			tp += 4
			digits = 0
			break
		}
		return false
	}
	if digits > 0 {
		if tp+2 > size {
			return false
		}
		tp += 2
	}
	if colon >= 0 {
		if tp == size {
			return false // "::" would stand for no group
		}
		tp = size
	}
	return tp == size
}
