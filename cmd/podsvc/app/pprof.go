package app

import (
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// startPprof serves Go's profiler on POD_PPROF_ADDR, apart from the API
// listener, so profiles can be taken under load without exposing them
// next to the public routes.
func (a *App) startPprof() error {
	if a.Config.PprofAddr == "" {
		return nil
	}
	ln, err := net.Listen("tcp", a.Config.PprofAddr)
	if err != nil {
		return fmt.Errorf("listen on POD_PPROF_ADDR %s: %w", a.Config.PprofAddr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	a.closers = append(a.closers, func() { _ = srv.Close() })
	a.Log.Info("profiler listening", "addr", ln.Addr().String())
	return nil
}
