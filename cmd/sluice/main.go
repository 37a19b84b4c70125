// Command sluice is a CloudEvents broker and the load-testing kit that measures it.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/sluice-broker/sluice/cmd/sluice/cli"
	"github.com/sluice-broker/sluice/internal/sysmon"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "serve" {
		sysmon.Keep() // re-executes with GODEBUG=schedtrace=… unless GODEBUG names it
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(cli.Execute(ctx, os.Args[1:], os.Stdout, os.Stderr))
}
