package fault

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestOffByDefault(t *testing.T) {
	require.NoError(t, Check("nothing.armed"))
	require.Zero(t, Calls("nothing.armed"))
}

func TestArmNth(t *testing.T) {
	disarm := Arm("t.nth", 3, nil)
	defer disarm()
	var got []error
	for range 5 {
		got = append(got, Check("t.nth"))
	}
	require.NoError(t, got[0])
	require.NoError(t, got[1])
	require.ErrorIs(t, got[2], ErrInjected)
	require.NoError(t, got[3])
	require.NoError(t, got[4])
	require.Equal(t, 5, Calls("t.nth"))
	require.Equal(t, 1, Fired("t.nth"))
	var fe *Error
	require.True(t, errors.As(got[2], &fe))
	require.Equal(t, "t.nth", fe.Point)
	require.Equal(t, 3, fe.Call)
	require.NoError(t, Check("t.other"), "other points are not affected")
}

func TestArmEveryCallWithError(t *testing.T) {
	mine := errors.New("mine")
	before := Injected()
	disarm := Arm("t.every", 0, mine)
	for range 3 {
		err := Check("t.every")
		require.ErrorIs(t, err, mine)
		require.ErrorIs(t, err, ErrInjected)
	}
	require.Equal(t, before+3, Injected())
	disarm()
	require.NoError(t, Check("t.every"))
	require.False(t, on.Load(), "the flag goes off with the last armed point")
	disarm() // idempotent
}

func TestDisarmLeavesANewerArm(t *testing.T) {
	d1 := Arm("t.re", 0, nil)
	d2 := Arm("t.re", 0, nil)
	d1()
	require.Error(t, Check("t.re"), "the second Arm is still in force")
	d2()
	require.NoError(t, Check("t.re"))
}

func TestReset(t *testing.T) {
	Arm("t.a", 0, nil)
	Arm("t.b", 1, nil)
	Reset()
	require.NoError(t, Check("t.a"))
	require.NoError(t, Check("t.b"))
}

func BenchmarkCheckOff(b *testing.B) {
	for b.Loop() {
		if Check(HeapAcquire) != nil {
			b.Fatal("armed")
		}
	}
}
