package daemon

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// mux serves /metrics, /healthz, /readyz and, with an embedded server
// and nats_monitoring on (the default), nats-server's monitoring endpoints
// (/varz, /jsz, ...; its own health check at /healthz/nats).
func (d *Daemon) mux() *http.ServeMux {
	m := http.NewServeMux()
	m.Handle("GET /metrics", promhttp.HandlerFor(d.gather, promhttp.HandlerOpts{}))
	m.HandleFunc("GET /healthz", d.healthz(false))
	m.HandleFunc("GET /readyz", d.healthz(true))
	if s := d.srv; s != nil && d.cfg.natsMonitoring() {
		for path, h := range map[string]http.HandlerFunc{
			"/varz": s.HandleVarz, "/connz": s.HandleConnz, "/routez": s.HandleRoutez,
			"/gatewayz": s.HandleGatewayz, "/leafz": s.HandleLeafz, "/subsz": s.HandleSubsz,
			"/accountz": s.HandleAccountz, "/accstatz": s.HandleAccountStatz, "/jsz": s.HandleJsz,
			"/raftz": s.HandleRaftz, "/stacksz": s.HandleStacksz, "/healthz/nats": s.HandleHealthz,
		} {
			m.HandleFunc("GET "+path, h)
		}
	}
	return m
}

type health struct {
	Status     string `json:"status"` // ok or unavailable
	Embedded   bool   `json:"embedded"`
	JetStream  bool   `json:"jetstream"`
	Connected  bool   `json:"connected"`
	World      string `json:"world"`
	WorldReady bool   `json:"world_ready"`
	Error      string `json:"error,omitempty"`
}

// healthz answers 200 when the server is running with JetStream enabled
// and fencepostd's connection is up (with --nats: JetStream answers); with
// world (readyz) the configured world must also be ready.
func (d *Daemon) healthz(world bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		h := health{Embedded: d.srv != nil, Connected: d.nc.IsConnected(), World: d.cfg.World, WorldReady: d.worldReady.Load()}
		if d.srv != nil {
			h.JetStream = d.srv.Running() && d.srv.JetStreamEnabled()
		} else if h.Connected {
			ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
			_, err := d.js.AccountInfo(ctx)
			cancel()
			h.JetStream = err == nil
			if err != nil {
				h.Error = err.Error()
			}
		}
		ok := h.JetStream && h.Connected && (!world || h.WorldReady)
		h.Status = "ok"
		code := http.StatusOK
		if !ok {
			h.Status, code = "unavailable", http.StatusServiceUnavailable
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(h)
	}
}
