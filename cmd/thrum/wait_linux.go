package main

import (
	"os"
	"syscall"
)

// watchReader calls gone when the reader of stdout, a pipe or a socket,
// closes its end — before anything is written, so that a command whose
// reader left ends at once rather than at its next line — and returns a
// function that stops watching and waits for the watcher. If stdout is
// neither it watches nothing.
func watchReader(gone func()) (stop func()) {
	if st, err := os.Stdout.Stat(); err != nil || st.Mode()&(os.ModeNamedPipe|os.ModeSocket) == 0 {
		return func() {}
	}
	ep, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return func() {}
	}
	var wake [2]int
	if err := syscall.Pipe2(wake[:], syscall.O_CLOEXEC); err != nil {
		syscall.Close(ep)
		return func() {}
	}
	// A pipe's write end reports EPOLLERR once its read end is closed, a
	// socket EPOLLRDHUP (or EPOLLHUP) once its peer is (Bun, opencode's
	// runtime, gives a child's stdio as a socket pair); the wake pipe's
	// read end reports EPOLLIN when stop writes.
	out := syscall.EpollEvent{Events: syscall.EPOLLERR | syscall.EPOLLRDHUP, Fd: int32(syscall.Stdout)}
	in := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(wake[0])}
	if syscall.EpollCtl(ep, syscall.EPOLL_CTL_ADD, syscall.Stdout, &out) != nil ||
		syscall.EpollCtl(ep, syscall.EPOLL_CTL_ADD, wake[0], &in) != nil {
		syscall.Close(ep)
		syscall.Close(wake[0])
		syscall.Close(wake[1])
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer syscall.Close(ep)
		defer syscall.Close(wake[0])
		evs := make([]syscall.EpollEvent, 2)
		for {
			n, err := syscall.EpollWait(ep, evs, -1)
			if err == syscall.EINTR {
				continue
			}
			if err != nil {
				return
			}
			for _, ev := range evs[:n] {
				if ev.Fd == int32(wake[0]) {
					return
				}
			}
			gone()
			return
		}
	}()
	return func() {
		syscall.Write(wake[1], []byte{0})
		<-done
		syscall.Close(wake[1])
	}
}
