// Command settle is the auditor's settle function: fed by its SQS queue,
// it group-settles one era of ripe batch markers per message and reports
// the records that failed (partial batch response), so only those are
// redelivered and, past the redrive limit, dead-lettered.
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
	rt, err := handler.Load(context.Background(), handler.JobSettle)
	if err != nil {
		slog.Error("settle: cold start", "err", err)
		os.Exit(1)
	}
	lambda.Start(handler.Queue(rt, settle.KindSettle))
}
