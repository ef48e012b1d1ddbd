package cli

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	coordinatorv1 "github.com/strata-mq/strata/gen/strata/coordinator/v1"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
)

// writeProtoJSON prints a response as one line of protobuf JSON with the
// proto field names (snake_case), as the group commands' --output json.
func writeProtoJSON(e *Env, m proto.Message) error {
	b, err := protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}.Marshal(m)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(e.Stdout, "%s\n", b)
	return err
}

func stateName(s coordinatorv1.GroupState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "GROUP_STATE_"))
}

func groupList(ctx context.Context, e *Env, args []string) error {
	f := newFlags(e, "strata group list", "List consumer groups with their state and member count.", "strata group list --output json")
	return groupCall(ctx, e, f, args, nil,
		func(ctx context.Context, _ []string) (*connect.Response[gatewayv1.ListGroupsResponse], error) {
			return e.gateway().ListGroups(ctx, connect.NewRequest(&gatewayv1.ListGroupsRequest{}))
		},
		func(_ []string, msg *gatewayv1.ListGroupsResponse) {
			var rows [][]string
			for _, g := range msg.GetGroups() {
				rows = append(rows, []string{g.GetGroupId(), stateName(g.GetState()), fmt.Sprint(g.GetMemberCount())})
			}
			table(e.Stdout, []string{"GROUP", "STATE", "MEMBERS"}, rows)
		})
}

// groupCall is the frame of the group commands that make one gateway call:
// it parses the flags and the positional names, bounds the call, reports
// its error as the coordinator's, and prints the answer as protobuf JSON
// (--output json) or through text.
func groupCall[T any](ctx context.Context, e *Env, f *flagSet, args, names []string,
	call func(ctx context.Context, pos []string) (*connect.Response[T], error), text func(pos []string, msg *T)) error {
	pos, err := f.parse(args, names...)
	if err != nil {
		return err
	}
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	resp, err := call(ctx, pos)
	if err != nil {
		return &coordinatorError{err}
	}
	if e.Output == "json" {
		return writeProtoJSON(e, any(resp.Msg).(proto.Message))
	}
	text(pos, resp.Msg)
	return nil
}

func groupDescribe(ctx context.Context, e *Env, args []string) error {
	f := newFlags(e, "strata group describe GROUP", "Show a group's members, assignments, committed offsets and lag.", "strata group describe billing")
	return groupCall(ctx, e, f, args, []string{"GROUP"},
		func(ctx context.Context, pos []string) (*connect.Response[gatewayv1.DescribeGroupResponse], error) {
			return e.gateway().DescribeGroup(ctx, connect.NewRequest(&gatewayv1.DescribeGroupRequest{GroupId: pos[0]}))
		},
		func(_ []string, msg *gatewayv1.DescribeGroupResponse) {
			g := msg.GetGroup()
			fmt.Fprintf(e.Stdout, "group %s  state %s  epoch %d  members %d\n", g.GetGroupId(), stateName(g.GetState()), g.GetGroupEpoch(), len(g.GetMembers()))
			var rows [][]string
			for _, p := range g.GetPartitions() {
				rows = append(rows, []string{p.GetTopic(), fmt.Sprint(p.GetPartition()), orDash(p.GetCommittedOffset()),
					orDash(p.GetLogEndOffset()), orDash(p.GetLag()), or(p.GetMemberId(), "-")})
			}
			table(e.Stdout, []string{"TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "OWNER"}, rows)
		})
}

func groupReset(ctx context.Context, e *Env, args []string) error {
	var topic, to string
	var dryRun bool
	f := newFlags(e, "strata group reset GROUP --topic T --to earliest|latest|OFFSET",
		"Move a group's committed offsets for every partition of a topic. The group must have no\nlive members. --to also takes @UNIX_MS (the first offset at or after that time).",
		"strata group reset billing --topic orders --to earliest")
	f.String(&topic, "", "topic", "T", "", "topic whose offsets to move (required)")
	f.String(&to, "", "to", "POSITION", "", "earliest, latest, an offset or @UNIX_MS (required)")
	f.Bool(&dryRun, "", "dry-run", "show the new offsets without committing them")
	pos, err := f.parse(args, "GROUP")
	if err != nil {
		return err
	}
	if topic == "" || to == "" {
		return usagef("--topic and --to are required (see '%s --help')", e.Path)
	}
	req := &gatewayv1.ResetOffsetsRequest{GroupId: pos[0], Topics: []*commonv1.TopicPartitions{{Topic: topic}}, DryRun: dryRun}
	switch {
	case to == "earliest" || to == "start":
		req.Spec = coordinatorv1.ResetSpec_RESET_SPEC_EARLIEST
	case to == "latest" || to == "end":
		req.Spec = coordinatorv1.ResetSpec_RESET_SPEC_LATEST
	case strings.HasPrefix(to, "@"):
		ms, err := strconv.ParseInt(to[1:], 10, 64)
		if err != nil {
			return usagef("--to %s: not a Unix time in milliseconds", to)
		}
		req.Spec, req.TimestampMs = coordinatorv1.ResetSpec_RESET_SPEC_TIMESTAMP, ms
	default:
		off, err := strconv.ParseInt(to, 10, 64)
		if err != nil || off < 0 {
			return usagef("--to must be earliest, latest, an offset or @UNIX_MS, not %q", to)
		}
		req.Spec, req.Offset = coordinatorv1.ResetSpec_RESET_SPEC_OFFSET, off
	}
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	resp, err := e.gateway().ResetOffsets(ctx, connect.NewRequest(req))
	if err != nil {
		return &coordinatorError{err}
	}
	if e.Output == "json" {
		return writeProtoJSON(e, resp.Msg)
	}
	var rows [][]string
	for _, p := range resp.Msg.GetPartitions() {
		status := "ok"
		if p.GetError() != nil {
			status = oneLine(p.GetError().GetMessage())
		}
		rows = append(rows, []string{p.GetTopic(), fmt.Sprint(p.GetPartition()), fmt.Sprint(p.GetPreviousOffset()), fmt.Sprint(p.GetNewOffset()), status})
	}
	table(e.Stdout, []string{"TOPIC", "PARTITION", "PREVIOUS", "NEW", "STATUS"}, rows)
	return nil
}

// orDash renders -1 ("none" or "unknown") as "-", as Kafka's tools do.
func orDash(v int64) string {
	if v < 0 {
		return "-"
	}
	return fmt.Sprint(v)
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func groupDelete(ctx context.Context, e *Env, args []string) error {
	f := newFlags(e, "strata group delete GROUP", "Delete a group and its committed offsets. The group must have no live members.", "strata group delete billing")
	return groupCall(ctx, e, f, args, []string{"GROUP"},
		func(ctx context.Context, pos []string) (*connect.Response[gatewayv1.DeleteGroupResponse], error) {
			return e.gateway().DeleteGroup(ctx, connect.NewRequest(&gatewayv1.DeleteGroupRequest{GroupId: pos[0]}))
		},
		func(pos []string, _ *gatewayv1.DeleteGroupResponse) {
			fmt.Fprintf(e.Stdout, "deleted group %s\n", pos[0])
		})
}
