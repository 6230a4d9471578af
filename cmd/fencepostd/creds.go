package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fencepost/fencepost/daemon"
)

// credsUsage is the help of `fencepostd creds` (docs/security.md).
const credsUsage = `usage: fencepostd creds add    --role producer|owner|operator [--node N | --name P] [--world W] [--ttl D] [--data DIR]
       fencepostd creds ls     [--data DIR] [--json]
       fencepostd creds revoke --node N | --producer P [--data DIR] [--server URL] [--tlsca F --tlscert F --tlskey F]

Credentials of fencepostd --auth, in its data dir (it may be running):
  add      issue a role's credentials again (<data>/<role>.creds: rotation, same user),
           or with --role owner --node N an owner bound to node N (<data>/nodes/<N>.creds):
           it may write only N's node lease and read only its own inbox;
           with --role producer --name P a producer of its own (<data>/producers/<P>.creds)
  ls       list every credentials file: role, node or name, user, expiry, revoked
  revoke   revoke node N's (or producer P's) credentials: recorded in <data>/auth, and
           pushed to the running server (--server), which closes its connections at once
`

// credsMain runs `fencepostd creds ...`; it returns the exit code.
func credsMain(argv []string, stdout, stderr io.Writer) int {
	if len(argv) == 0 {
		fmt.Fprint(stderr, credsUsage)
		return exitUsage
	}
	fs := flag.NewFlagSet("fencepostd creds "+argv[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, credsUsage) }
	data := fs.String("data", daemon.Defaults.DataDir, "fencepostd's data dir")
	var run func() error
	switch argv[0] {
	case "add":
		role := fs.String("role", "", "producer, owner or operator")
		node := fs.String("node", "", "with --role owner: the node the owner is bound to")
		name := fs.String("name", "", "with --role producer: a producer with a user of its own")
		world := fs.String("world", daemon.Defaults.World, "the world the permissions cover")
		ttl := fs.Duration("ttl", daemon.DefaultCredsTTL, "lifetime of the credentials (issue them again before)")
		payload := fs.Int64("max-payload", 0, "largest message it may publish, bytes (0: 1 MiB; -1: the server's)")
		run = func() error {
			// --node '' (an empty variable in a script, say) is not the
			// role-wide owner.creds: it names no node, so it is refused.
			for flagName, v := range map[string]string{"node": *node, "name": *name} {
				if v == "" && given(fs, flagName) {
					return fmt.Errorf("%w: --%s is empty; give a name, or leave the flag out for the role's own file", errUsage, flagName)
				}
			}
			return credsAdd(stdout, *data, daemon.IssueRequest{Role: *role, Node: *node, Name: *name, World: *world, TTL: *ttl, Payload: *payload})
		}
	case "ls":
		asJSON := fs.Bool("json", false, "one JSON object per credentials file")
		run = func() error { return credsLs(stdout, *data, *asJSON) }
	case "revoke":
		node := fs.String("node", "", "the node whose credentials are revoked")
		producer := fs.String("producer", "", "the named producer whose credentials are revoked")
		server := fs.String("server", "nats://127.0.0.1:4222", "the running fencepostd's NATS URL, to apply the revocation at once")
		ca := fs.String("tlsca", "", "CA to verify the server")
		cert := fs.String("tlscert", "", "client certificate (mutual TLS)")
		key := fs.String("tlskey", "", "client key (mutual TLS)")
		run = func() error {
			return credsRevoke(stdout, *data, *node, *producer, *server, tlsOptions(*ca, *cert, *key))
		}
	case "-h", "--help", "help":
		fmt.Fprint(stdout, credsUsage)
		return exitOK
	default:
		fmt.Fprintf(stderr, "fencepostd creds: unknown command %q\n%s", argv[0], credsUsage)
		return exitUsage
	}
	if err := fs.Parse(argv[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "fencepostd creds %s: unexpected argument %q\n", argv[0], fs.Arg(0))
		return exitUsage
	}
	if err := run(); err != nil {
		fmt.Fprintf(stderr, "fencepostd creds %s: %v\n", argv[0], err)
		if errors.Is(err, errUsage) {
			return exitUsage
		}
		return exitError
	}
	return exitOK
}

var errUsage = errors.New("usage")

// given says whether the flag name was on the command line.
func given(fs *flag.FlagSet, name string) bool {
	found := false
	fs.Visit(func(f *flag.Flag) { found = found || f.Name == name })
	return found
}

func credsAdd(out io.Writer, data string, req daemon.IssueRequest) error {
	if req.Role == "" {
		return fmt.Errorf("%w: --role is required (producer, owner or operator)", errUsage)
	}
	if req.TTL <= 0 {
		return fmt.Errorf("%w: --ttl %v: give a positive lifetime", errUsage, req.TTL)
	}
	is, err := daemon.IssueCreds(data, req)
	if err != nil {
		return err
	}
	who := fmt.Sprintf("node=%q", is.Node)
	if is.Name != "" {
		who = fmt.Sprintf("name=%q", is.Name)
	}
	fmt.Fprintf(out, "issued role=%s %s user=%s expires=%s file=%s\n", is.Role, who, is.User, is.Expires.Format(time.RFC3339), is.File)
	return nil
}

func credsLs(out io.Writer, data string, asJSON bool) error {
	all, err := daemon.ListCreds(data)
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(out)
		for _, is := range all {
			if err := enc.Encode(is); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ROLE\tNODE/NAME\tUSER\tEXPIRES\tREVOKED\tFILE")
	for _, is := range all {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", is.Role, dash(is.Node+is.Name), is.User, when(is.Expires, "never"), when(is.Revoked, "-"), is.File)
	}
	return tw.Flush()
}

func credsRevoke(out io.Writer, data, node, producer, server string, opts []nats.Option) error {
	var is daemon.Issued
	var err error
	switch {
	case (node == "") == (producer == ""):
		return fmt.Errorf("%w: give --node or --producer", errUsage)
	case node != "":
		is, err = daemon.RevokeNode(data, node)
	default:
		is, err = daemon.RevokeProducer(data, producer)
	}
	if err != nil {
		return err
	}
	who := fmt.Sprintf("node=%q", is.Node)
	if is.Name != "" {
		who = fmt.Sprintf("producer=%q", is.Name)
	}
	fmt.Fprintf(out, "revoked %s user=%s at=%s\n", who, is.User, is.Revoked.Format(time.RFC3339))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := daemon.PushAccount(ctx, server, data, opts...); err != nil {
		return fmt.Errorf("recorded in %s, so a start of fencepostd on it refuses the node; but the running server was not told: %w", data, err)
	}
	fmt.Fprintf(out, "applied by the server at %s: its connections are closed\n", server)
	return nil
}

func tlsOptions(ca, cert, key string) []nats.Option {
	var opts []nats.Option
	if ca != "" {
		opts = append(opts, nats.RootCAs(ca))
	}
	if cert != "" {
		opts = append(opts, nats.ClientCert(cert, key))
	}
	return opts
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func when(t time.Time, zero string) string {
	if t.IsZero() {
		return zero
	}
	return t.Format(time.RFC3339)
}
