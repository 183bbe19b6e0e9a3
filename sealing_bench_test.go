package thrum_test

import (
	"fmt"
	"testing"
)

// BenchmarkSendSealed sends messages through the node's API from 8
// agents at once, signed, with bodies in clear and sealed, side by side
// in one run, fsynced (durable) and not (nosync, where the CPU sealing
// costs shows most). It reports sends/s and the log bytes per message
// event.
//
//	go test -run '^$' -bench SendSealed -benchtime 4000x .
func BenchmarkSendSealed(b *testing.B) {
	for _, durable := range []bool{true, false} {
		for _, sealed := range []bool{false, true} {
			name := fmt.Sprintf("durable=%v/sealed=%v", durable, sealed)
			b.Run(name, func(b *testing.B) { benchSend(b, durable, true, sealed) })
		}
	}
}
