// Command janitor is the auditor's janitor function: on its EventBridge
// schedule it marks dead stars, sends chain-settle jobs for the settle
// duty, trims streams by retention, reclaims deleted streams, and
// deletes superseded and trimmed settled objects behind the read grace
// (auditjob.Janitor; decommission comes later).
package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/starlog/starlog/functions/internal/handler"
)

func main() {
	rt, err := handler.Load(context.Background(), handler.JobJanitor)
	if err != nil {
		slog.Error("janitor: cold start", "err", err)
		os.Exit(1)
	}
	lambda.Start(handler.Janitor(rt))
}
