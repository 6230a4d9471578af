package drain_test

import (
	"testing"

	"github.com/fencepost/fencepost/internal/testutil"
)

func TestMain(m *testing.M) { testutil.VerifyNoLeaks(m) }
