package thrum_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a goroutine outlives its tests (a node,
// a server or a connection left running), and removes the benchmark
// fixtures when the run ends; with THRUM_BENCH_CACHE=DIR they are kept
// there and reused by later runs. With fanoutEnv set, the binary is
// BenchmarkRPCSendFanout's process of subscribers instead.
func TestMain(m *testing.M) {
	if cfg := os.Getenv(fanoutEnv); cfg != "" {
		os.Exit(fanoutChild(cfg)) // BenchmarkRPCSendFanout's subscribers
	}
	code := m.Run()
	if os.Getenv("THRUM_BENCH_CACHE") == "" {
		for _, d := range fixtureDirs {
			os.RemoveAll(d)
		}
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines outlived the tests:", err)
			code = 1
		}
	}
	os.Exit(code)
}
