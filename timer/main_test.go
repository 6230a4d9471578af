package timer_test

import (
	"testing"

	"github.com/fencepost/fencepost/testkit/testutil"
)

func TestMain(m *testing.M) { testutil.VerifyNoLeaks(m) }
