package security

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/systemd/unit"
)

// FuzzSettings applies any unit file as both versions' parsers read it:
// nothing panics, and every score is within 0.0..10.0.
func FuzzSettings(f *testing.F) {
	for _, s := range []string{
		"[Service]\nExecStart=/bin/true\nDynamicUser=yes\nSystemCallFilter=@system-service ~@privileged:EPERM\n",
		"[Service]\nCapabilityBoundingSet=~CAP_SYS_ADMIN 0x15 'CAP_KILL\nRestrictAddressFamilies=~AF_INET af_unix\nIPAddressDeny=any\nIPAddressAllow=localhost 10.0.0.0/8\n",
		"[Service]\nRootDirectory=/srv/%i\nUser=%p\nDeviceAllow=/dev/null rw\nDevicePolicy=closed\nProtectClock=yes\nLoadCredentialEncrypted=a:/x\n",
		"[Unit]\nDefaultDependencies=no\n[Service]\nPrivateTmp=disconnected\nPrivateUsers=identity\nProtectControlGroups=strict\nPrivateMounts=\n",
		"[Service]\nRestrictNamespaces=~user net\nRestrictNamespaces=cgroup\nUMask=0077\nSystemCallArchitectures=native x86\n",
	} {
		f.Add([]byte(s), "x@y.service")
	}
	tables := map[int]*Tables{}
	for _, v := range Versions {
		t, err := TablesFor(v)
		require.NoError(f, err)
		tables[v] = t
	}
	f.Fuzz(func(t *testing.T, b []byte, id string) {
		if !unit.Valid(id) {
			id = "fuzz.service"
		}
		opts, _ := unit.ParseConfig(b)
		for _, tb := range tables {
			st := newSettings(tb, id)
			for _, o := range opts {
				st.apply("/fuzz.service", o)
			}
			st.patch()
			a, err := tb.assessInfo(st.info(), nil)
			require.NoError(t, err)
			require.LessOrEqual(t, a.Exposure, Tenths(100), "the default policy keeps an exposure within 0.0..10.0")
		}
	})
}

// FuzzParsePolicy reads any policy: an error or a policy that scores
// (or refuses to, for a range below a badness) without panicking.
func FuzzParsePolicy(f *testing.F) {
	for _, s := range []string{
		`{"UserOrDynamicUser": {"weight": 0}, "PrivateNetwork": {"range": 1.0, "description_bad": "x"}}`,
		`{"UMask": "no", "NoNewPrivileges": {"weight": -1}, "PrivateTmp": {"weight": 1e3}}`,
		`[1, 2]`, `{"a": {"weight": 18446744073709551615}}`, `{"a": {`, `{} trailing`,
	} {
		f.Add([]byte(s))
	}
	tb, err := TablesFor(252)
	require.NoError(f, err)
	st := newSettings(tb, "fuzz.service")
	st.patch()
	in := st.info()
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := ParsePolicy(b)
		if err != nil {
			return
		}
		_, _ = tb.assessInfo(in, p)
	})
}
