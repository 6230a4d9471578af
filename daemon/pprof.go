package daemon

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// listenPProf opens the --pprof listener (loopback only: Validate refuses
// another address).
func (d *Daemon) listenPProf() error {
	if d.cfg.PProf == "" {
		return nil
	}
	l, err := net.Listen("tcp", d.cfg.PProf)
	if err != nil {
		return fmt.Errorf("pprof: listen on %s: %w", d.cfg.PProf, err)
	}
	m := http.NewServeMux()
	m.HandleFunc("GET /debug/pprof/", pprof.Index)
	m.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	m.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	m.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	m.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	d.pprofL = l
	// No write timeout: a CPU profile or a trace answers after ?seconds=.
	d.pprof = &http.Server{Handler: m, ReadHeaderTimeout: 5 * time.Second}
	return nil
}

// PProfAddr is the address of the --pprof endpoint, or "" when it is off.
func (d *Daemon) PProfAddr() string {
	if d.pprofL == nil {
		return ""
	}
	return d.pprofL.Addr().String()
}

// servePProf serves the --pprof endpoint until it is closed.
func (d *Daemon) servePProf() error {
	d.log.Info("pprof ready", "addr", d.PProfAddr(), "path", "/debug/pprof/")
	if err := d.pprof.Serve(d.pprofL); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("pprof: %w", err)
	}
	return nil
}
