package main

import (
	"context"
	"net"
	"net/http"
	"time"

	"github.com/printpod/pod/commands/push"
)

// platform is the store platform a podsvc of podbench's own pushes orders
// to. podbench plays it as it plays the clients and their webhook
// endpoints: with the service's own simulator (every shop's credentials
// accepted), served here, so that its work is counted as the outside
// world's and not as the service's, and so that it outlives a podsvc
// killed mid-run, as a real platform would.
type platform struct {
	srv *http.Server
	url string
}

// startPlatform listens at once, in this process, so any free port will
// do.
func startPlatform() (*platform, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &platform{url: "http://" + ln.Addr().String(),
		srv: &http.Server{Handler: push.NewSimulator(nil), ReadHeaderTimeout: 10 * time.Second}}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

func (p *platform) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = p.srv.Shutdown(ctx)
}
