// Command star is starlog's server and CLI: `star serve` and `star dev`
// run a star; the client commands talk to one.
package main

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/starlog/starlog/star/clientcmd"
	"github.com/starlog/starlog/star/servecmd"
)

func main() {
	root := &cobra.Command{
		Use:   "star",
		Short: "starlog: a durable stream store on object storage, speaking S2's API",
		Long: `star runs and talks to starlog, a durable stream store on object storage.

  star dev     one embedded star on a local data folder (start here)
  star serve   a production star on DynamoDB and S3
  the client commands (basins, streams, tokens, append, read, tail,
  check-tail, bench) talk to a star over its API`,
		SilenceUsage: true,
	}
	root.AddCommand(servecmd.Serve(), servecmd.Dev(), servecmd.Settle())
	root.AddCommand(clientcmd.Commands()...)
	if err := root.Execute(); err != nil {
		os.Exit(1)
	}
}
