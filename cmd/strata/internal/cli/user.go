package cli

import (
	"context"
	"fmt"
	"time"

	"connectrpc.com/connect"

	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
)

// Users are the principals the cluster issues bearer tokens to (strata
// user create); the cluster keeps only each token's SHA-256. Creating,
// listing and deleting users needs alter (describe, to list) on the
// cluster: a super user's job.

func userCreate(ctx context.Context, e *Env, args []string) error {
	f := newFlags(e, "strata user create NAME",
		"Create a user and print its bearer token, once, as the one line STRATA_TOKEN=<token>\n"+
			"(export it, or keep it where the user's programs read it). The cluster keeps only its\n"+
			"hash: a lost token cannot be shown again; delete the user and create it anew.\n"+
			"The user may do nothing until an ACL allows it (strata acl create).",
		"strata user create alice > alice.env")
	pos, err := f.parse(args, "NAME")
	if err != nil {
		return err
	}
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	resp, err := e.gateway().CreateUser(ctx, connect.NewRequest(&gatewayv1.CreateUserRequest{Name: pos[0]}))
	if err != nil {
		return err
	}
	// The one line is the contract, whatever --output says: it is meant
	// to be sourced or eval'ed.
	_, err = fmt.Fprintf(e.Stdout, "STRATA_TOKEN=%s\n", resp.Msg.GetToken())
	return err
}

type userJSON struct {
	Name      string `json:"name"`
	CreatedMs int64  `json:"created_ms"`
}

func userList(ctx context.Context, e *Env, args []string) error {
	f := newFlags(e, "strata user list", "List the users the cluster issued tokens to, by name (never a token or its hash).",
		"strata user list --output json")
	if _, err := f.parse(args); err != nil {
		return err
	}
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	resp, err := e.gateway().ListUsers(ctx, connect.NewRequest(&gatewayv1.ListUsersRequest{}))
	if err != nil {
		return err
	}
	if e.Output == "json" {
		out := []userJSON{}
		for _, u := range resp.Msg.GetUsers() {
			out = append(out, userJSON{u.GetName(), u.GetCreatedMs()})
		}
		return writeJSON(e.Stdout, out)
	}
	var rows [][]string
	for _, u := range resp.Msg.GetUsers() {
		rows = append(rows, []string{u.GetName(), time.UnixMilli(u.GetCreatedMs()).UTC().Format(time.RFC3339)})
	}
	table(e.Stdout, []string{"USER", "CREATED"}, rows)
	return nil
}

func userDelete(ctx context.Context, e *Env, args []string) error {
	f := newFlags(e, "strata user delete NAME",
		"Delete a user: its token stops working on every service within a second. Its ACLs stay\n(strata acl delete removes them).",
		"strata user delete alice")
	pos, err := f.parse(args, "NAME")
	if err != nil {
		return err
	}
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	if _, err := e.gateway().DeleteUser(ctx, connect.NewRequest(&gatewayv1.DeleteUserRequest{Name: pos[0]})); err != nil {
		return err
	}
	if e.Output == "json" {
		return writeJSON(e.Stdout, map[string]string{"name": pos[0]})
	}
	fmt.Fprintf(e.Stdout, "deleted user %q\n", pos[0])
	return nil
}

func whoami(ctx context.Context, e *Env, args []string) error {
	f := newFlags(e, "strata whoami",
		"Print the principal the cluster authenticates you as (User:alice from a token or a\n"+
			"client certificate's CN; User:ANONYMOUS on a cluster without authentication).\n"+
			"JSON adds how: certificate, token, oidc or anonymous.",
		"strata whoami --output json")
	if _, err := f.parse(args); err != nil {
		return err
	}
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	resp, err := e.gateway().WhoAmI(ctx, connect.NewRequest(&gatewayv1.WhoAmIRequest{}))
	if err != nil {
		return err
	}
	if e.Output == "json" {
		return writeJSON(e.Stdout, map[string]string{"principal": resp.Msg.GetPrincipal(), "method": resp.Msg.GetMethod()})
	}
	fmt.Fprintln(e.Stdout, resp.Msg.GetPrincipal())
	return nil
}
