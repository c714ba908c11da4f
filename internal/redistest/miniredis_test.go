package redistest_test

import (
	"crypto/fips140"
	"crypto/sha1"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/stretchr/testify/require"

	"github.com/redlock/redlock/internal/redistest"
)

// Under GODEBUG=fips140=only a hosted miniredis names scripts by their
// SHA-1 (its connection goroutines, spawned from its accept loop, inherit
// the bypass), while the test's goroutine stays enforced: SHA-1 there
// panics (the control).
func TestHostedMiniredisComputesSHA1UnderFIPSOnly(t *testing.T) {
	if ran, out, err := redistest.RunAlone(t, "GODEBUG=fips140=only"); ran {
		require.NoError(t, err, out)
		return
	}
	require.True(t, fips140.Enforced(), "the child runs in FIPS 140-3 only mode")
	m := redistest.Miniredis(t)
	require.NoError(t, redistest.HostsSHA1(m.Addr()))
	m.Close()
	require.NoError(t, redistest.Restart(m))
	require.NoError(t, redistest.HostsSHA1(m.Addr()), "restarted inside the bypass too")
	require.PanicsWithValue(t, "crypto/sha1: use of SHA-1 is not allowed in FIPS 140-only mode", func() { sha1.Sum([]byte("return 1")) },
		"the test's own goroutine is enforced")
}

// The control: a miniredis started outside the bypass panics at its first
// SCRIPT LOAD under GODEBUG=fips140=only, and the test binary ends.
func TestUnhostedMiniredisPanicsUnderFIPSOnly(t *testing.T) {
	if ran, out, err := redistest.RunAlone(t, "GODEBUG=fips140=only"); ran {
		require.Error(t, err, out)
		require.Contains(t, out, "use of SHA-1 is not allowed in FIPS 140-only mode")
		return
	}
	m, err := miniredis.Run()
	require.NoError(t, err)
	defer m.Close()
	_ = redistest.HostsSHA1(m.Addr())
	t.Fatal("the unhosted server answered SCRIPT LOAD")
}
