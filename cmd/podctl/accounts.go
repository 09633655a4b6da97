package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/google/uuid"
	"github.com/printpod/pod/internal/accounts"
	"github.com/spf13/cobra"
)

func accountCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "account", Short: "Manage client accounts"}
	var name string
	create := &cobra.Command{
		Use:   "create --name NAME",
		Short: "Create an account and its first API token (printed once)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			e, err := openEnv(cmd.Context())
			if err != nil {
				return err
			}
			defer e.close()
			id, token, err := accounts.Store{Pool: e.pool}.Create(cmd.Context(), name)
			if err != nil {
				return err
			}
			return printJSON(cmd.OutOrStdout(), map[string]string{"account_id": id.String(), "token": token})
		},
	}
	create.Flags().StringVar(&name, "name", "", "account name (unique)")
	_ = create.MarkFlagRequired("name")
	cmd.AddCommand(create)
	return cmd
}

func tokenCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "token", Short: "Issue and revoke API tokens"}
	var account string
	issue := &cobra.Command{
		Use:   "issue --account ID",
		Short: "Issue a new token for an account (printed once)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			id, err := uuid.Parse(account)
			if err != nil {
				return fmt.Errorf("--account: %q is not a UUID", account)
			}
			e, err := openEnv(cmd.Context())
			if err != nil {
				return err
			}
			defer e.close()
			token, err := accounts.Store{Pool: e.pool}.Issue(cmd.Context(), id)
			if err != nil {
				return err
			}
			return printJSON(cmd.OutOrStdout(), map[string]string{"account_id": id.String(), "token": token})
		},
	}
	issue.Flags().StringVar(&account, "account", "", "account id")
	_ = issue.MarkFlagRequired("account")

	var token string
	revoke := &cobra.Command{
		Use:   "revoke --token TOKEN",
		Short: "Revoke a token: it answers 401 from now on",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if token == "-" {
				// Read from stdin, so the token stays out of the process
				// list and the shell's history.
				line, err := bufio.NewReader(cmd.InOrStdin()).ReadString('\n')
				if err != nil && !errors.Is(err, io.EOF) {
					return fmt.Errorf("read the token from stdin: %w", err)
				}
				if token = strings.TrimSpace(line); token == "" {
					return errors.New("no token on stdin")
				}
			}
			e, err := openEnv(cmd.Context())
			if err != nil {
				return err
			}
			defer e.close()
			if err := (accounts.Store{Pool: e.pool}).Revoke(cmd.Context(), token); err != nil {
				return err
			}
			return printJSON(cmd.OutOrStdout(), map[string]bool{"revoked": true})
		},
	}
	revoke.Flags().StringVar(&token, "token", "", `the token to revoke; "-" reads it from stdin`)
	_ = revoke.MarkFlagRequired("token")
	cmd.AddCommand(issue, revoke)
	return cmd
}
