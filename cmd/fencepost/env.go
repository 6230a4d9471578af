package main

import (
	"context"
	"encoding/json"
	"flag"
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

// flagSet is a flag.FlagSet that accepts flags before, between and after
// positional arguments (`claim ID --node N`).
type flagSet struct{ *flag.FlagSet }

// env is what every command gets: its flags' values, the output, and a lazily
// opened client.
type env struct {
	server, creds, user, password, world string
	inboxPrefix                          string
	tlsCert, tlsKey, tlsCA               string
	logLevel                             string
	json                                 bool
	timeout                              time.Duration

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
}

func parse(name string, c *command, argv []string) (*env, []string, int) {
	e := &env{out: os.Stdout, err: os.Stderr}
	fs := &flagSet{flag.NewFlagSet(name, flag.ContinueOnError)}
	fs.SetOutput(io.Discard)
	fs.StringVar(&e.server, "server", envOr("NATS_URL", "nats://127.0.0.1:4222"), "NATS server URL(s), comma-separated (env NATS_URL)")
	fs.StringVar(&e.creds, "creds", "", "NATS credentials file (its user's own inbox prefix, if its permissions confine replies to one, is used)")
	fs.StringVar(&e.inboxPrefix, "inbox-prefix", "", "prefix of the reply subjects (default: the one --creds permits, else _INBOX)")
	fs.StringVar(&e.user, "user", "", "NATS user")
	fs.StringVar(&e.password, "password", "", "NATS password")
	fs.StringVar(&e.tlsCert, "tlscert", "", "client TLS certificate")
	fs.StringVar(&e.tlsKey, "tlskey", "", "client TLS key")
	fs.StringVar(&e.tlsCA, "tlsca", "", "CA certificate to verify the server")
	fs.StringVar(&e.world, "world", envOr("FENCEPOST_WORLD", "default"), "world (env FENCEPOST_WORLD)")
	fs.BoolVar(&e.json, "json", false, "print one JSON object per outcome")
	fs.DurationVar(&e.timeout, "timeout", 5*time.Second, "time limit of the operation")
	fs.StringVar(&e.logLevel, "log-level", envOr("FENCEPOST_LOG", "warn"), "log level: debug, info, warn, error (env FENCEPOST_LOG)")
	if c.flags != nil {
		c.flags(fs)
	}
	var args []string
	for {
		if err := fs.Parse(argv); err != nil {
			if err == flag.ErrHelp {
				fmt.Fprintf(os.Stdout, "usage: fencepost %s\n%s\n\nflags:\n", c.usage, c.short)
				fs.SetOutput(os.Stdout)
				fs.PrintDefaults()
				return nil, nil, exitOK
			}
			fmt.Fprintf(os.Stderr, "fencepost %s: %v%s\nusage: fencepost %s\n", name, err, dashHint(name, err), c.usage)
			return nil, nil, exitUsage
		}
		if fs.NArg() == 0 {
			break
		}
		args = append(args, fs.Arg(0))
		argv = fs.Args()[1:]
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(e.logLevel)); err != nil {
		fmt.Fprintf(os.Stderr, "fencepost: --log-level %q: use debug, info, warn or error\n", e.logLevel)
		return nil, nil, exitUsage
	}
	e.log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	return e, args, exitOK
}

// dashHint, for a flag the command does not have, says how to pass an
// argument that starts with '-' (a body "-1", an id "-x"): after --.
func dashHint(name string, err error) string {
	arg, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: ")
	if !ok {
		return ""
	}
	if name == "send" {
		return fmt.Sprintf("\nif %s is the BODY, put -- before it: fencepost send ID -- %s", arg, arg)
	}
	return fmt.Sprintf("\nif %s is an argument, not a flag, put -- before it: fencepost %s -- %s", arg, name, arg)
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
	opts := []nats.Option{nats.Timeout(e.timeout)}
	var copts []client.Option
	if e.creds != "" {
		copts = append(copts, client.WithCreds(e.creds))
	}
	if e.inboxPrefix != "" {
		copts = append(copts, client.WithInboxPrefix(e.inboxPrefix))
	}
	if e.user != "" {
		opts = append(opts, nats.UserInfo(e.user, e.password))
	}
	if e.tlsCert != "" || e.tlsKey != "" {
		opts = append(opts, nats.ClientCert(e.tlsCert, e.tlsKey))
	}
	if e.tlsCA != "" {
		opts = append(opts, nats.RootCAs(e.tlsCA))
	}
	copts = append(copts, client.WithNATSOptions(opts...), client.WithTimeout(e.timeout), client.WithLogger(e.log))
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
