package ports

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestUnsetSlotIsTheWholeRange(t *testing.T) {
	lo, hi, err := rangeOf("", 20000, 32768)
	require.NoError(t, err)
	assert.Equal(t, [2]int{20000, 32768}, [2]int{lo, hi})
}

func TestRunsSideBySideGetDisjointRangesWithinTheWhole(t *testing.T) {
	for n := 1; n <= 5; n++ {
		prevHi := 10000
		for i := 1; i <= n; i++ {
			lo, hi, err := rangeOf(strconv.Itoa(i)+"/"+strconv.Itoa(n), 10000, 15000)
			require.NoError(t, err)
			assert.GreaterOrEqual(t, lo, prevHi, "slot %d/%d starts inside the one before", i, n)
			assert.LessOrEqual(t, hi, 15000, "slot %d/%d ends past the range", i, n)
			assert.GreaterOrEqual(t, hi-lo, 5000/n-1)
			prevHi = hi
		}
	}
}

func TestBadSlotsAreRefusedByName(t *testing.T) {
	for _, slot := range []string{"3", "0/2", "3/2", "a/b", "1/0", "1/-1", "1/100"} {
		_, _, err := rangeOf(slot, 10000, 15000)
		require.Error(t, err, slot)
		assert.Contains(t, err.Error(), SlotVar, slot)
	}
}
