package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fencepost/fencepost/client"
)

// env is what every command gets: its flags' values, the output, and a lazily
// opened client.
type env struct {
	server, world string
	access        client.Access // --creds, --user, --password, --inbox-prefix, --tls*
	logLevel      string
	json          bool
	timeout       time.Duration
	given         map[string]bool // the flags given on the command line, by name

	out io.Writer
	err io.Writer
	log *slog.Logger
	c   *client.Client

	// The server's refusal of a publish (permissions), which ends every
	// operation's context at once instead of leaving it to time out.
	refuseMu sync.Mutex
	refusal  *client.NotPermittedError
	cancels  []context.CancelCauseFunc

	clientOpts []client.Option // extra options for the client, set by a command before it connects

	// The shard an ownership command acts on, in a sharded world: its
	// outcomes name it (unitFields).
	sharded bool
	shard   int
}

// newEnv makes the environment of a parsed command line (nil and the exit
// code if it is not one to run).
func newEnv(ln line) (*env, int) {
	g := cliGlobals
	e := &env{
		server: g.Server, world: g.World,
		access: client.Access{Creds: g.Creds, User: g.User, Password: g.Password, InboxPrefix: g.InboxPrefix,
			TLSCert: g.TLSCert, TLSKey: g.TLSKey, TLSCA: g.TLSCA},
		logLevel: g.LogLevel, json: g.JSON, timeout: g.Timeout, given: ln.given,
		out: os.Stdout, err: os.Stderr,
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(e.logLevel)); err != nil {
		fmt.Fprintf(os.Stderr, "fencepost: --log-level %q: use debug, info, warn or error\n", e.logLevel)
		return nil, exitUsage
	}
	e.log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	return e, exitOK
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func (e *env) close() {
	if e.c != nil {
		e.c.Close()
	}
}

// ctx is the context of one operation: it ends after --timeout, or as
// soon as the server refuses one of the command's publishes.
func (e *env) ctx() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(context.Background())
	e.refuseMu.Lock()
	if e.refusal != nil {
		cancel(e.refusal)
	}
	e.cancels = append(e.cancels, cancel)
	e.refuseMu.Unlock()
	ctx, stop := context.WithTimeout(ctx, e.timeout)
	return ctx, func() { stop(); cancel(nil) }
}

// refused records the server's refusal and ends the operations.
func (e *env) refused(np *client.NotPermittedError) {
	e.refuseMu.Lock()
	defer e.refuseMu.Unlock()
	if e.refusal == nil {
		e.refusal = np
	}
	for _, cancel := range e.cancels {
		cancel(np)
	}
}

// refusalOf is the server's refusal if there was one: the real reason of
// an operation that failed.
func (e *env) refusalOf() *client.NotPermittedError {
	e.refuseMu.Lock()
	defer e.refuseMu.Unlock()
	return e.refusal
}

// client connects on first use.
func (e *env) client() (*client.Client, error) {
	if e.c != nil {
		return e.c, nil
	}
	copts := []client.Option{client.WithAccess(e.access), client.WithNATSOptions(nats.Timeout(e.timeout)),
		client.WithTimeout(e.timeout), client.WithLogger(e.log)}
	c, err := client.Connect(e.server, append(copts, e.clientOpts...)...)
	if err != nil {
		return nil, err
	}
	c.OnRefusal(e.refused)
	e.c = c
	return c, nil
}

// openWorld connects and opens --world, in full: a user that may only
// post (a producer under fencepostd --auth) gets the server's refusal.
func (e *env) openWorld(ctx context.Context) (*client.World, error) {
	w, err := e.openWorldToPost(ctx)
	if err != nil {
		return nil, err
	}
	if err := w.Readable(); err != nil {
		return nil, err
	}
	return w, nil
}

// openWorldToPost connects and opens --world for a send: in full, or for
// posting only when the user may not read the world's streams.
func (e *env) openWorldToPost(ctx context.Context) (*client.World, error) {
	c, err := e.client()
	if err != nil {
		return nil, err
	}
	return c.World(ctx, e.world)
}

// field is one value of an outcome, printed as key=value or as a JSON field.
type field struct {
	key string
	val any
}

func f(key string, val any) field { return field{key, val} }

// emit prints an outcome: its word first, then its values.
func (e *env) emit(word string, fields ...field) {
	if e.json {
		// Keys in a fixed order, "outcome" first, for people reading it too.
		var sb strings.Builder
		sb.WriteString(`{"outcome":`)
		w, _ := json.Marshal(word)
		sb.Write(w)
		for _, fl := range fields {
			k, _ := json.Marshal(fl.key)
			v, _ := json.Marshal(jsonValue(fl.val))
			sb.WriteByte(',')
			sb.Write(k)
			sb.WriteByte(':')
			sb.Write(v)
		}
		sb.WriteByte('}')
		fmt.Fprintln(e.out, sb.String())
		return
	}
	var sb strings.Builder
	sb.WriteString(word)
	for _, fl := range fields {
		switch v := fl.val.(type) {
		case bool:
			if v {
				sb.WriteString(" " + fl.key)
			}
			continue
		case time.Time:
			fmt.Fprintf(&sb, " %s=%s", fl.key, v.UTC().Format(time.RFC3339Nano))
		case string:
			fmt.Fprintf(&sb, " %s=%s", fl.key, quoteIfNeeded(v))
		default:
			fmt.Fprintf(&sb, " %s=%v", fl.key, v)
		}
	}
	fmt.Fprintln(e.out, sb.String())
}

func jsonValue(v any) any {
	if t, ok := v.(time.Time); ok {
		return t.UTC().Format(time.RFC3339Nano)
	}
	return v
}

func quoteIfNeeded(s string) string {
	if s == "" || strings.ContainsAny(s, " \t\n\"=") {
		return fmt.Sprintf("%q", s)
	}
	return s
}
