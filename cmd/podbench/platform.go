package main

import (
	"context"
	"net"
	"net/http"
	"time"

	"github.com/printpod/pod/commands/push"
	"github.com/printpod/pod/internal/loopback"
)

// platform is the store platform a podsvc of podbench's own pushes orders
// to. podbench plays it as it plays the clients and their webhook
// endpoints: with the service's own simulator (every shop's credentials
// accepted), served here, so that its work is counted as the outside
// world's and not as the service's, and so that it outlives a podsvc
// killed mid-run, as a real platform would.
type platform struct {
	sim *push.Simulator
	srv *http.Server
	url string
}

func startPlatform() (*platform, error) {
	addr, err := loopback.FreeAddr()
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	p := &platform{sim: push.NewSimulator(nil), url: "http://" + addr}
	p.srv = &http.Server{Handler: p.sim, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

func (p *platform) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = p.srv.Shutdown(ctx)
}
