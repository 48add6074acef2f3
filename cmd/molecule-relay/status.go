package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/config"
	"github.com/molecule-ai/molecule-relay/internal/dlq"
	"github.com/molecule-ai/molecule-relay/internal/poller"
	"github.com/molecule-ai/molecule-relay/internal/pollgroup"
	"github.com/molecule-ai/molecule-relay/internal/relay"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/nats-io/nats.go/jetstream"
)

// statusReport is what `status` prints. It holds no token.
type statusReport struct {
	Workspaces []poller.WorkspaceStatus `json:"workspaces"`
	// TimesRecordedEverySecs says how old each workspace's last_poll_at
	// and last_heartbeat_at may be while nothing else changes
	// (poller.StatusRefresh): an old one is not by itself a fault.
	TimesRecordedEverySecs int `json:"times_recorded_every_secs"`
	// PollerGroup is MOLECULE_POLLER_GROUP; PolledBy maps each workspace
	// the group's members claimed to the member (instance id) polling it.
	PollerGroup string            `json:"poller_group,omitempty"`
	PolledBy    map[string]string `json:"polled_by,omitempty"`
	Streams     []streamStatus    `json:"streams"`
	Consumers   []consumerStatus  `json:"consumers"`
	DeadLetters int               `json:"dead_letters"`
}

type streamStatus struct {
	Name     string `json:"name"`
	Messages uint64 `json:"messages"`
	Bytes    uint64 `json:"bytes"`
}

type consumerStatus struct {
	Stream      string `json:"stream"`
	Name        string `json:"name"`
	Pending     uint64 `json:"pending"`
	AckPending  int    `json:"ack_pending"`
	Redelivered int    `json:"redelivered"`
	Waiting     int    `json:"waiting"`
}

func runStatus(ctx context.Context, env *cliEnv, args []string) error {
	var asJSON bool
	rt, cfg, err := openForInspection(ctx, env, "status", args, func(fs *flag.FlagSet) {
		fs.BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	})
	if err != nil {
		return err
	}
	defer rt.Close()
	rep, err := collectStatus(ctx, rt, cfg)
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(env.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	printStatus(env, rep)
	return nil
}

func collectStatus(ctx context.Context, rt *relay.Runtime, cfg *config.Config) (*statusReport, error) {
	var ids []string
	for _, w := range cfg.Workspaces() {
		ids = append(ids, w.ID)
	}
	ws, err := poller.ReadStatus(ctx, rt.Topo, ids...)
	if err != nil {
		return nil, err
	}
	rep := &statusReport{Workspaces: ws, PollerGroup: cfg.PollerGroup, TimesRecordedEverySecs: int(poller.StatusRefresh.Seconds())}
	if cfg.PollerGroup != "" {
		// An admin's status creates the group bucket with the topology,
		// for members that may only look it up.
		if cfg.Topology == "ensure" {
			if err := pollgroup.EnsureBucket(ctx, rt.Conn.JS, cfg.Replicas); err != nil {
				return nil, err
			}
		}
		if rep.PolledBy, err = pollgroup.Owners(ctx, rt.Conn.JS, cfg.PollerGroup); err != nil {
			return nil, err
		}
	}
	for _, s := range []jetstream.Stream{rt.Topo.Inbound, rt.Topo.Reply, rt.Topo.DLQ} {
		info, err := s.Info(ctx)
		if err != nil {
			return nil, fmt.Errorf("stream info: %w", err)
		}
		rep.Streams = append(rep.Streams, streamStatus{Name: info.Config.Name, Messages: info.State.Msgs, Bytes: info.State.Bytes})
		if info.Config.Name == events.StreamDLQ {
			rep.DeadLetters = int(info.State.Msgs)
		}
	}
	for _, c := range []jetstream.Consumer{rt.Topo.Dispatcher, rt.Topo.Replier} {
		info, err := c.Info(ctx)
		if err != nil {
			return nil, fmt.Errorf("consumer info: %w", err)
		}
		rep.Consumers = append(rep.Consumers, consumerStatus{Stream: info.Stream, Name: info.Name, Pending: info.NumPending,
			AckPending: info.NumAckPending, Redelivered: info.NumRedelivered, Waiting: info.NumWaiting})
	}
	return rep, nil
}

func printStatus(env *cliEnv, rep *statusReport) {
	tw := tabwriter.NewWriter(env.stdout, 2, 4, 2, ' ', 0)
	group := ""
	if rep.PollerGroup != "" {
		group = "\tPOLLED BY (" + rep.PollerGroup + ")"
	}
	fmt.Fprintln(tw, "WORKSPACE\tGENERATION\tCURSOR\tLAST POLL\tHEARTBEAT\tSTATE"+group)
	for _, w := range rep.Workspaces {
		state := "ok"
		switch {
		case w.Stopped != "":
			state = "stopped: " + w.Stopped
		case w.Paused:
			state = "paused"
		case w.LastPollError != "":
			state = "error: " + w.LastPollError
		}
		hb := ago(w.LastHeartbeatAt)
		if w.HeartbeatError != "" {
			hb += " (failed: " + w.HeartbeatError + ")"
		}
		by := ""
		if rep.PollerGroup != "" {
			by = "\t" + orDash(rep.PolledBy[w.WorkspaceID])
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s%s\n", w.WorkspaceID, w.Generation, orDash(w.Cursor), ago(w.LastPollAt), hb, state, by)
	}
	// The times are rewritten only every poller.StatusRefresh while
	// nothing else changes: an old one is not by itself a fault.
	fmt.Fprintf(tw, "(last poll and heartbeat are recorded every %s while nothing else changes; a failure at once)\n", fmt.Sprintf("%g min", poller.StatusRefresh.Minutes()))
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "STREAM\tMESSAGES\tBYTES")
	for _, s := range rep.Streams {
		fmt.Fprintf(tw, "%s\t%d\t%d\n", s.Name, s.Messages, s.Bytes)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "CONSUMER\tPENDING\tIN FLIGHT\tREDELIVERED")
	for _, c := range rep.Consumers {
		fmt.Fprintf(tw, "%s/%s\t%d\t%d\t%d\n", c.Stream, c.Name, c.Pending, c.AckPending, c.Redelivered)
	}
	_ = tw.Flush()
	fmt.Fprintf(env.stdout, "\ndead letters: %d", rep.DeadLetters)
	if rep.DeadLetters > 0 {
		fmt.Fprint(env.stdout, " (molecule-relay dlq list)")
	}
	fmt.Fprintln(env.stdout)
}

func ago(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return time.Since(t).Round(time.Second).String() + " ago"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func runDLQ(ctx context.Context, env *cliEnv, args []string) error {
	if len(args) > 0 && isHelpArg(args[0]) {
		printSubcommandHelp(env.stdout, "dlq", "list | show SEQ | replay SEQ | purge", dlqSubcommands, "dlq list")
		return flag.ErrHelp
	}
	sub, seq, rest, err := dlqArgs(args)
	if err != nil {
		return err
	}
	var (
		f        dlq.Filter
		asJSON   bool
		yes      bool
		showBody bool
	)
	rt, _, err := openForInspection(ctx, env, "dlq "+sub, rest, func(fs *flag.FlagSet) {
		fs.StringVar(&f.Stage, "stage", "", "only dead letters of this stage (poller, dispatcher, replier)")
		fs.StringVar(&f.WorkspaceID, "workspace", "", "only dead letters of this workspace")
		fs.StringVar(&f.Reason, "reason", "", "only dead letters with this reason")
		fs.IntVar(&f.Limit, "limit", 0, "list at most this many")
		fs.BoolVar(&asJSON, "json", false, "print JSON")
		fs.BoolVar(&yes, "yes", false, "purge: really delete")
		fs.BoolVar(&showBody, "show-body", false, "show and list --json: print the message itself (text, attachments, activity row, raw bytes); without it they are withheld")
	})
	if err != nil {
		return err
	}
	defer rt.Close()
	js := rt.Conn.JS
	switch sub {
	case "list":
		return dlqList(ctx, js, env.stdout, f, asJSON, showBody)
	case "show":
		return dlqShow(ctx, js, env, seq, showBody)
	case "replay":
		if err := dlq.Replay(ctx, js, seq); err != nil {
			return err
		}
		fmt.Fprintf(env.stdout, "replayed dead letter %d\n", seq)
		return nil
	case "purge":
		return dlqPurge(ctx, js, env.stdout, f, yes)
	}
	panic("unreachable: subcommand checked above")
}

// dlqArgs checks the dlq subcommand and its positional SEQ (show and
// replay) before anything is opened (an embedded server included), and
// returns the arguments left for the flags.
func dlqArgs(args []string) (sub string, seq uint64, rest []string, err error) {
	if len(args) == 0 {
		return "", 0, nil, usageError{errors.New("dlq needs a subcommand: list | show SEQ | replay SEQ | purge")}
	}
	sub, rest = args[0], args[1:]
	switch sub {
	case "list", "show", "replay", "purge":
	default:
		return "", 0, nil, usageError{fmt.Errorf("unknown dlq subcommand %q: list | show SEQ | replay SEQ | purge", sub)}
	}
	// Positional SEQ first, then flags.
	if (sub == "show" || sub == "replay") && (len(rest) == 0 || !isHelpArg(rest[0])) {
		if len(rest) == 0 {
			return "", 0, nil, usageError{fmt.Errorf("dlq %s needs a sequence number (see dlq list)", sub)}
		}
		if _, err := fmt.Sscan(rest[0], &seq); err != nil || seq == 0 {
			return "", 0, nil, usageError{fmt.Errorf("dlq %s: %q is not a sequence number", sub, rest[0])}
		}
		rest = rest[1:]
	}
	return sub, seq, rest, nil
}

// dlqShow prints the dead letter at seq as JSON; the message it carries
// only with showBody (a dead letter's body is a user's message).
func dlqShow(ctx context.Context, js jetstream.JetStream, env *cliEnv, seq uint64, showBody bool) error {
	e, err := dlq.Get(ctx, js, seq)
	if err != nil {
		return err
	}
	if !showBody {
		*e = e.Redacted()
	}
	enc := json.NewEncoder(env.stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(e); err != nil {
		return err
	}
	if len(e.Withheld) > 0 {
		fmt.Fprintf(env.stderr, "the message itself is withheld (%s); dlq show %d --show-body prints it\n", strings.Join(e.Withheld, ", "), seq)
	}
	return nil
}

// dlqList prints the dead letters that match f, as a table or as JSON
// (the messages they carry only with showBody; the table never has them).
func dlqList(ctx context.Context, js jetstream.JetStream, w io.Writer, f dlq.Filter, asJSON, showBody bool) error {
	entries, err := dlq.List(ctx, js, f)
	if err != nil {
		return err
	}
	if asJSON {
		if !showBody {
			for i := range entries {
				entries[i] = entries[i].Redacted()
			}
		}
		return json.NewEncoder(w).Encode(entries)
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tSTORED\tSTAGE\tWORKSPACE\tACTIVITY\tREASON\tDELIVERIES\tERROR")
	for _, e := range entries {
		if e.DeadLetter == nil {
			fmt.Fprintf(tw, "%d\t%s\t-\t-\t-\tundecodable\t-\t%s\n", e.Seq, e.Stored.Format(time.RFC3339), e.DecodeError)
			continue
		}
		d := e.DeadLetter
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", e.Seq, e.Stored.Format(time.RFC3339), d.Stage, d.WorkspaceID,
			orDash(d.ActivityID), d.Reason, d.Deliveries, oneLine(d.Error, 80))
	}
	return tw.Flush()
}

// dlqPurge deletes the dead letters that match f; without yes it only
// counts them.
func dlqPurge(ctx context.Context, js jetstream.JetStream, w io.Writer, f dlq.Filter, yes bool) error {
	if !yes {
		entries, err := dlq.List(ctx, js, f)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "%d dead letter(s) match; run again with --yes to delete them\n", len(entries))
		return nil
	}
	n, err := dlq.Purge(ctx, js, f)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "purged %d dead letter(s)\n", n)
	return nil
}

func oneLine(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
