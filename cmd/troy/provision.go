package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/troy-audit/troy/pipelines"
	"github.com/troy-audit/troy/pkg/bus"
	"github.com/troy-audit/troy/pkg/policy"
	"github.com/troy-audit/troy/pkg/policystore"
)

func newProvisionCmd(g *globalFlags) *cobra.Command {
	var replicas int
	var policies []string
	cmd := &cobra.Command{
		Use:   "provision --nats-url URL [--replicas N] [--policy FILE]...",
		Short: "Create or update troy's streams, consumers and buckets (an operator's job where services run with --no-provision)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if g.natsURL == "" {
				return codeError{exitError, errors.New("provision needs --nats-url: the embedded server provisions itself")}
			}
			var engines []*policy.Engine
			for _, f := range policies { // all checked before anything is written
				e, err := loadPolicy(f)
				if err != nil {
					return codeError{exitError, err}
				}
				engines = append(engines, e)
			}
			nc, err := bus.Connect(g.client("troy-provision"))
			if err != nil {
				return codeError{exitError, err}
			}
			defer nc.Close()
			js, err := bus.JetStream(nc)
			if err != nil {
				return codeError{exitError, err}
			}
			topo, err := pipelines.Load()
			if err != nil {
				return err
			}
			topo.Replicas = replicas
			ctx, cancel := context.WithTimeout(cmd.Context(), 60*time.Second)
			defer cancel()
			if err := bus.Provision(ctx, js, topo); err != nil {
				return err
			}
			if err := bus.CheckTopology(ctx, js, topo); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "provisioned %d streams, %d consumers, %d buckets\n", len(topo.Streams), len(topo.Durables()), len(topo.Buckets))
			if len(engines) > 0 {
				store, err := policystore.Open(ctx, js)
				if err != nil {
					return err
				}
				for i, e := range engines {
					h, err := store.Push(ctx, e.Policy())
					if err != nil {
						return err
					}
					fmt.Fprintf(cmd.OutOrStdout(), "pushed %s as the latest version of %s: %s\n", policies[i], e.Policy().PolicyID, h)
				}
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&replicas, "replicas", envInt("TROY_REPLICAS", 0), "replicas of every stream and bucket (3 on a 3-node cluster); default: keep what exists, 1 for new")
	cmd.Flags().StringArrayVar(&policies, "policy", nil, "also push this policy file as the latest version of its id (only the operator writes policies; repeatable)")
	return cmd
}
