// Command plan is the auditor's plan function: on its EventBridge
// schedule it finds the eras of ripe batch markers and the chains with
// slots to retire, and sends one settle or trim job per item to its queue.
package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/starlog/starlog/functions/internal/handler"
)

func main() {
	rt, err := handler.Load(context.Background(), handler.JobPlan)
	if err != nil {
		slog.Error("plan: cold start", "err", err)
		os.Exit(1)
	}
	lambda.Start(handler.Plan(rt))
}
