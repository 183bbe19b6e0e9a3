// Command flood is a stranger's attack on a daemon's loopback port: for
// -for, -workers goroutines present wrong credentials as fast as the
// daemon answers, half in WebSocket handshakes and half in auth calls on
// WebSockets opened without one, and it prints, as JSON, what came back
// and what the attack cost it. The attack tests run it as another local
// user (cmd/thrum, TestStrangerFloodOwnerSignsIn); by hand:
//
//	go run ./cmd/thrum/internal/flood -url ws://127.0.0.1:PORT/ws -for 10s
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/thrumhq/thrum/internal/thrumtest"
	"github.com/thrumhq/thrum/rpc"
)

// Result is what flood prints.
type Result struct {
	// Checked counts wrong credentials the daemon checked and refused
	// (HTTP 401, or -32002 from auth): the attempts that count.
	Checked int `json:"checked"`
	// Outcomes counts every answer by kind: "http 401", "rpc -32006",
	// "dial error" and so on.
	Outcomes   map[string]int `json:"outcomes"`
	Seconds    float64        `json:"seconds"`
	CPUSeconds float64        `json:"cpu_seconds"` // user and system time of this process
}

func main() {
	url := flag.String("url", "", "the daemon's WebSocket URL, ws://127.0.0.1:PORT/ws")
	dur := flag.Duration("for", 10*time.Second, "how long to attack")
	workers := flag.Int("workers", 64, "concurrent attackers")
	flag.Parse()
	if *url == "" {
		fmt.Fprintln(os.Stderr, "flood: -url is required")
		os.Exit(2)
	}
	r := flood(*url, *dur, *workers)
	json.NewEncoder(os.Stdout).Encode(r)
}

func flood(url string, dur time.Duration, workers int) Result {
	var mu sync.Mutex
	r := Result{Outcomes: map[string]int{}}
	count := func(outcome string, checked bool) {
		mu.Lock()
		defer mu.Unlock()
		r.Outcomes[outcome]++
		if checked {
			r.Checked++
		}
	}
	start := time.Now()
	end := start.Add(dur)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				if w%2 == 0 {
					handshake(url, count)
				} else {
					auth(url, end, count)
				}
			}
		}()
	}
	wg.Wait()
	r.Seconds = time.Since(start).Seconds()
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		r.CPUSeconds = time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
	}
	return r
}

// handshake presents a wrong credential in a WebSocket handshake.
func handshake(url string, count func(string, bool)) {
	resp, _, ws, err := thrumtest.Handshake(url, "", http.Header{"Authorization": {"Bearer " + guess()}})
	if err != nil {
		count("dial error", false)
		time.Sleep(10 * time.Millisecond)
		return
	}
	if ws != nil {
		ws.Close()
		count("http 101 (accepted!)", false)
		return
	}
	count("http "+strconv.Itoa(resp.StatusCode), resp.StatusCode == http.StatusUnauthorized)
}

// auth opens a WebSocket without a credential and calls auth with wrong
// ones until the daemon closes it.
func auth(url string, end time.Time, count func(string, bool)) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := rpc.DialWebSocket(ctx, url, nil)
	if err != nil {
		count("dial error", false)
		time.Sleep(10 * time.Millisecond)
		return
	}
	defer c.Close()
	for time.Now().Before(end) {
		_, err := c.Auth(ctx, &rpc.AuthParams{Token: guess()})
		var e *rpc.Error
		switch {
		case err == nil:
			count("rpc ok (accepted!)", false)
		case errors.As(err, &e):
			count("rpc "+strconv.Itoa(e.Code), e.Code == rpc.CodeUnauthenticated)
		default:
			count("connection ended", false)
			return
		}
	}
}

// guess is a credential of the right shape: 64 hex digits, as a token.
func guess() string {
	b := make([]byte, 32)
	rand.Read(b)
	return hex.EncodeToString(b)
}
