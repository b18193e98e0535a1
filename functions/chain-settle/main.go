// Command chain-settle is the auditor's chain-settle function: fed by its
// SQS queue, it settles one halted epoch below its chain's mint head per
// message and reports the records that failed (partial batch response),
// so only those are redelivered and, past the redrive limit,
// dead-lettered.
package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/starlog/starlog/functions/internal/handler"
	"github.com/starlog/starlog/shared/auditjob"
)

func main() {
	rt, err := handler.Load(context.Background(), handler.JobChainSettle)
	if err != nil {
		slog.Error("chain-settle: cold start", "err", err)
		os.Exit(1)
	}
	lambda.Start(handler.Queue(rt, auditjob.KindChainSettle))
}
