// Command trim is the auditor's trim function: fed by its SQS queue, it
// runs the trim-check of one chain per message and reports the records
// that failed (partial batch response), so only those are redelivered
// and, past the redrive limit, dead-lettered.
package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/starlog/starlog/functions/internal/handler"
	"github.com/starlog/starlog/shared/settle"
)

func main() {
	rt, err := handler.Load(context.Background(), handler.JobTrim)
	if err != nil {
		slog.Error("trim: cold start", "err", err)
		os.Exit(1)
	}
	lambda.Start(handler.Queue(rt, settle.KindTrim))
}
