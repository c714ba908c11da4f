package redlock

import (
	"context"
	"errors"
	"io"
	"testing"

	"github.com/stretchr/testify/require"
)

// Joined errors read as one line, and errors.Is and errors.As see each.
func TestJoinErrorsReadsAsOneLine(t *testing.T) {
	require.NoError(t, joinErrors())
	require.NoError(t, joinErrors(nil, nil))
	require.Same(t, io.EOF, joinErrors(nil, io.EOF), "one error is itself")

	err := joinErrors(ErrLost, nil, context.Canceled, &QuorumError{Op: "check", Key: "k"})
	require.Equal(t, `redlock: lease lost; context canceled; redlock: check "k": 0 of 0 nodes granted, 0 needed`, err.Error())
	require.ErrorIs(t, err, ErrLost)
	require.ErrorIs(t, err, context.Canceled)
	var qe *QuorumError
	require.ErrorAs(t, err, &qe)
	require.NotContains(t, errors.Join(ErrLost, context.Canceled).Error(), "; ", "the negative control: errors.Join breaks the line")
}
