// mangos_perf: the roles of `gsp bench` written against mangos v3 (Go), one per run; the Go
// twin of ../nng_perf.c, with the same command line, control channel and semantics (see
// there): JSON lines on stdout, words on stdin ("stop" or end of input ends any wait).
//
// Built by gsp_bench.native with `go build` when a Go toolchain and the module
// go.nanomsg.org/mangos/v3 are at hand; the bench skips mangos, saying why, otherwise.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.nanomsg.org/mangos/v3"
	"go.nanomsg.org/mangos/v3/protocol/pull"
	"go.nanomsg.org/mangos/v3/protocol/push"
	"go.nanomsg.org/mangos/v3/protocol/rep"
	"go.nanomsg.org/mangos/v3/protocol/req"
	_ "go.nanomsg.org/mangos/v3/transport/all"
)

var words = bufio.NewScanner(os.Stdin)

func emit(v map[string]interface{}) {
	b, _ := json.Marshal(v)
	os.Stdout.Write(append(b, '\n'))
}

func fail(what string, err error) {
	emit(map[string]interface{}{"error": what + ": " + err.Error()})
	os.Exit(1)
}

// waitWord returns once word, "stop" or the end of stdin arrives.
func waitWord(word string) {
	for words.Scan() {
		if w := strings.TrimSpace(words.Text()); w == word || w == "stop" {
			return
		}
	}
}

func cpuSeconds() float64 {
	var r syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &r)
	return float64(r.Utime.Sec+r.Stime.Sec) + float64(r.Utime.Usec+r.Stime.Usec)*1e-6
}

func pageFaults() int64 {
	var r syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &r)
	return int64(r.Minflt)
}

func payload(size int) []byte {
	p := make([]byte, size)
	for i := range p {
		p[i] = 'x'
	}
	if size > 0 {
		p[0] = 'D'
	}
	return p
}

func open(kind string) mangos.Socket {
	var s mangos.Socket
	var err error
	switch kind {
	case "push":
		s, err = push.NewSocket()
	case "pull":
		s, err = pull.NewSocket()
	case "req":
		s, err = req.NewSocket()
	default:
		s, err = rep.NewSocket()
	}
	if err != nil {
		fail("open", err)
	}
	_ = s.SetOption(mangos.OptionMaxRecvSize, 0) // no limit: the 1 MiB runs
	return s
}

// listenReady listens on url (port 0: any) and reports {"ready": {"url": the bound address}}.
func listenReady(kind, url string) mangos.Socket {
	s := open(kind)
	l, err := s.NewListener(url, nil)
	if err != nil {
		fail("listen", err)
	}
	if err = l.Listen(); err != nil {
		fail("listen", err)
	}
	emit(map[string]interface{}{"ready": map[string]string{"url": l.Address()}})
	return s
}

func dial(kind, url string) mangos.Socket {
	s := open(kind)
	if err := s.Dial(url); err != nil {
		fail("dial", err)
	}
	return s
}

func recvOne(s mangos.Socket) {
	m, err := s.RecvMsg()
	if err != nil {
		fail("recv", err)
	}
	m.Free()
}

func sendOne(s mangos.Socket, b []byte) {
	if err := s.Send(b); err != nil {
		fail("send", err)
	}
}

func echoOne(s mangos.Socket) error {
	m, err := s.RecvMsg()
	if err != nil {
		return err
	}
	return s.SendMsg(m)
}

func thrRecv(url string, count int) {
	s := listenReady("pull", url)
	recvOne(s)
	t0, c0, f0 := time.Now(), cpuSeconds(), pageFaults()
	emit(map[string]interface{}{"started": true})
	for i := 1; i < count; i++ {
		recvOne(s)
	}
	emit(map[string]interface{}{"result": map[string]interface{}{
		"count": count, "elapsed": time.Since(t0).Seconds(), "cpu": cpuSeconds() - c0,
		"faults": pageFaults() - f0}})
	s.Close()
}

func thrSend(url string, size, count int) {
	s := dial("push", url)
	b := payload(size)
	sendOne(s, b)
	waitWord("go")
	c0 := cpuSeconds()
	for i := 1; i < count; i++ {
		sendOne(s, b)
	}
	waitWord("measure")
	emit(map[string]interface{}{"result": map[string]interface{}{"cpu": cpuSeconds() - c0}})
	waitWord("stop")
	s.Close()
}

func latServer(url string, count, warmup int) {
	s := listenReady("rep", url)
	c0 := 0.0
	for i := 0; i < count; i++ {
		if i == warmup {
			c0 = cpuSeconds()
		}
		if err := echoOne(s); err != nil {
			fail("echo", err)
		}
	}
	cpu := 0.0
	if count > warmup {
		cpu = cpuSeconds() - c0
	}
	emit(map[string]interface{}{"result": map[string]interface{}{"cpu": cpu}})
	waitWord("stop")
	s.Close()
}

func latClient(url string, size, count, warmup int) {
	s := dial("req", url)
	b := payload(size)
	for i := 0; i < warmup; i++ {
		sendOne(s, b)
		recvOne(s)
	}
	samples := make([]float64, count)
	c0 := cpuSeconds()
	t0 := time.Now()
	for i := range samples {
		t := time.Now()
		sendOne(s, b)
		recvOne(s)
		samples[i] = time.Since(t).Seconds()
	}
	emit(map[string]interface{}{"result": map[string]interface{}{
		"count": count, "elapsed": time.Since(t0).Seconds(), "cpu": cpuSeconds() - c0,
		"samples": samples}})
	s.Close()
}

func repServer(url string) {
	s := listenReady("rep", url)
	done := make(chan struct{})
	c0 := cpuSeconds()
	go func() {
		for echoOne(s) != mangos.ErrClosed {
		}
		close(done)
	}()
	waitWord("measure")
	emit(map[string]interface{}{"result": map[string]interface{}{"cpu": cpuSeconds() - c0}})
	waitWord("stop")
	s.Close()
	<-done
}

// reqClients runs clients concurrent requesters: a REQ socket each, or with conns (0 < conns <
// clients) contexts spread in turn over that many sockets, as gsp's clients are.
func reqClients(url string, size, clients, count, conns int) {
	per := count / clients
	if per < 1 {
		per = 1
	}
	if conns <= 0 || conns > clients {
		conns = clients
	}
	b := payload(size)
	socks := make([]mangos.Socket, conns)
	for i := range socks {
		socks[i] = dial("req", url)
	}
	type requester interface {
		Send([]byte) error
		RecvMsg() (*mangos.Message, error)
	}
	ends := make([]requester, clients)
	for i := range ends {
		if conns == clients {
			ends[i] = socks[i]
			continue
		}
		c, err := socks[i%conns].OpenContext()
		if err != nil {
			fail("context", err)
		}
		ends[i] = c
	}
	var wg sync.WaitGroup
	c0 := cpuSeconds()
	t0 := time.Now()
	for _, e := range ends {
		wg.Add(1)
		go func(e requester) {
			defer wg.Done()
			for i := 0; i < per; i++ {
				if err := e.Send(b); err != nil {
					fail("send", err)
				}
				m, err := e.RecvMsg()
				if err != nil {
					fail("recv", err)
				}
				m.Free()
			}
		}(e)
	}
	wg.Wait()
	emit(map[string]interface{}{"result": map[string]interface{}{
		"requests": per * clients, "elapsed": time.Since(t0).Seconds(),
		"cpu": cpuSeconds() - c0}})
	for _, s := range socks {
		s.Close()
	}
}

func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "go.nanomsg.org/mangos/v3" {
				return strings.TrimPrefix(d.Version, "v")
			}
		}
	}
	return "v3"
}

// orphaned ends this process once the one that started it (the bench's worker) is gone.
func orphaned() {
	parent := os.Getppid()
	for range time.Tick(time.Second) {
		if os.Getppid() != parent {
			os.Exit(1)
		}
	}
}

func main() {
	go orphaned()
	args := os.Args[1:]
	if len(args) == 1 && args[0] == "version" {
		fmt.Println(version())
		return
	}
	if len(args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: mangos_perf ROLE URL [SIZE COUNT ...] (see nng_perf.c)")
		os.Exit(2)
	}
	n := make([]int, 4)
	for i := range n {
		if len(args) > i+2 {
			n[i], _ = strconv.Atoi(args[i+2])
		}
	}
	url := args[1]
	switch args[0] {
	case "thr_recv":
		thrRecv(url, n[1])
	case "thr_send":
		thrSend(url, n[0], n[1])
	case "lat_server":
		latServer(url, n[1], n[2])
	case "lat_client":
		latClient(url, n[0], n[1], n[2])
	case "rep_server":
		repServer(url)
	case "req_clients":
		reqClients(url, n[0], n[1], n[2], n[3])
	default:
		fmt.Fprintln(os.Stderr, "mangos_perf: unknown role", args[0])
		os.Exit(2)
	}
}
