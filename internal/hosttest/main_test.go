package hosttest_test

import (
	"os"
	"testing"

	"github.com/thrumhq/thrum/internal/thrumtest"
)

func TestMain(m *testing.M) { os.Exit(thrumtest.Main(m)) }
