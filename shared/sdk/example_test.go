package sdk_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/sdk"
	"github.com/starlog/starlog/shared/sdk/sdktest"
)

// The examples run against sdktest, an in-memory S2-compatible server, so
// their output is checked by go test. Against a star, point
// Config.AccountEndpoint at it (star dev listens on sdk.DefaultEndpoint).

// exampleStream starts a test server with basin "example-basin" and stream
// "events", and returns a handle on the stream and a stop function.
func exampleStream(ctx context.Context) (*sdk.Stream, func()) {
	srv := sdktest.New(sdktest.Options{})
	client, err := sdk.New(sdk.Config{AccountEndpoint: srv.URL})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := client.CreateBasin(ctx, "example-basin", nil); err != nil {
		log.Fatal(err)
	}
	basin := client.Basin("example-basin")
	if _, err := basin.CreateStream(ctx, "events", nil); err != nil {
		log.Fatal(err)
	}
	return basin.Stream("events"), srv.Close
}

func Example() {
	ctx := context.Background()
	srv := sdktest.New(sdktest.Options{})
	defer srv.Close()

	client, err := sdk.New(sdk.Config{AccountEndpoint: srv.URL})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := client.CreateBasin(ctx, "my-basin", nil); err != nil {
		log.Fatal(err)
	}
	basin := client.Basin("my-basin")
	if _, err := basin.CreateStream(ctx, "greetings", nil); err != nil {
		log.Fatal(err)
	}
	stream := basin.Stream("greetings")

	ack, err := stream.Append(ctx, &api.AppendInput{Records: []api.Record{
		{Body: []byte("hello")},
		{Body: []byte("world")},
	}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("appended [%d, %d)\n", ack.Start.SeqNum, ack.End.SeqNum)

	batch, err := stream.Read(ctx, api.ReadRequest{From: api.FromSeqNum, Value: 0})
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range batch.Records {
		fmt.Printf("%d: %s\n", r.SeqNum, r.Body)
	}
	// Output:
	// appended [0, 2)
	// 0: hello
	// 1: world
}

func ExampleStream_AppendSession() {
	ctx := context.Background()
	stream, stop := exampleStream(ctx)
	defer stop()

	sess, err := stream.AppendSession(ctx, sdk.AppendSessionOptions{MaxUnackedBytes: 1 << 20})
	if err != nil {
		log.Fatal(err)
	}
	// Submit pipelines: it returns as soon as the batch is admitted.
	var futures []*sdk.AppendFuture
	for i := range 3 {
		f, err := sess.Submit(ctx, &api.AppendInput{Records: []api.Record{
			{Body: fmt.Appendf(nil, "batch %d, record 0", i)},
			{Body: fmt.Appendf(nil, "batch %d, record 1", i)},
		}})
		if err != nil {
			log.Fatal(err)
		}
		futures = append(futures, f)
	}
	for _, f := range futures {
		ack, err := f.Wait(ctx)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("acked [%d, %d)\n", ack.Start.SeqNum, ack.End.SeqNum)
	}
	if err := sess.Close(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// acked [0, 2)
	// acked [2, 4)
	// acked [4, 6)
}

func ExampleStream_NewProducer() {
	ctx := context.Background()
	stream, stop := exampleStream(ctx)
	defer stop()

	p, err := stream.NewProducer(ctx, sdk.ProducerOptions{MaxBatchRecords: 2})
	if err != nil {
		log.Fatal(err)
	}
	var futures []*sdk.RecordFuture
	for _, word := range []string{"one", "two", "three"} {
		f, err := p.Submit(ctx, api.Record{Body: []byte(word)})
		if err != nil {
			log.Fatal(err)
		}
		futures = append(futures, f)
	}
	// Close sends the last, partial batch and waits for every ack.
	if err := p.Close(ctx); err != nil {
		log.Fatal(err)
	}
	for _, f := range futures {
		ack, err := f.Result()
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("seq %d in batch [%d, %d)\n", ack.SeqNum, ack.Batch.Start.SeqNum, ack.Batch.End.SeqNum)
	}
	// Output:
	// seq 0 in batch [0, 2)
	// seq 1 in batch [0, 2)
	// seq 2 in batch [2, 3)
}

func ExampleStream_ReadSession() {
	ctx := context.Background()
	stream, stop := exampleStream(ctx)
	defer stop()

	if _, err := stream.Append(ctx, &api.AppendInput{Records: []api.Record{{Body: []byte("first")}}}); err != nil {
		log.Fatal(err)
	}
	// Read three records from the start: one is there, two arrive while
	// the session follows the stream live. A bounded read stops at the
	// tail unless it has a wait (the longest it may sit idle).
	wait := 30 * time.Second
	rs, err := stream.ReadSession(ctx, api.ReadRequest{From: api.FromSeqNum, Value: 0, Count: api.Uint64(3), Wait: &wait}, sdk.ReadSessionOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer rs.Close()
	go func() {
		_, _ = stream.Append(ctx, &api.AppendInput{Records: []api.Record{{Body: []byte("second")}, {Body: []byte("third")}}})
	}()
	for {
		batch, err := rs.Next()
		if errors.Is(err, io.EOF) {
			break // the count is reached
		}
		if err != nil {
			log.Fatal(err)
		}
		for _, r := range batch.Records {
			fmt.Printf("%d: %s\n", r.SeqNum, r.Body)
		}
	}
	// Output:
	// 0: first
	// 1: second
	// 2: third
}

// An append that carries match_seq_num cannot be duplicated by a retry, so
// the default RetryPolicy retries it even after an indefinite failure.
// Without it, only definite failures are retried, unless the policy opts
// into at-least-once with AppendRetryAll.
func ExampleRetryPolicy() {
	ctx := context.Background()
	srv := sdktest.New(sdktest.Options{})
	defer srv.Close()
	client, err := sdk.New(sdk.Config{
		AccountEndpoint: srv.URL,
		Retry:           sdk.RetryPolicy{MaxAttempts: 5, AppendRetry: sdk.AppendRetrySafe},
	})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := client.CreateBasin(ctx, "my-basin", nil); err != nil {
		log.Fatal(err)
	}
	stream := client.Basin("my-basin").Stream("orders")
	if _, err := client.Basin("my-basin").CreateStream(ctx, "orders", nil); err != nil {
		log.Fatal(err)
	}
	_, err = stream.Append(ctx, &api.AppendInput{Records: []api.Record{{Body: []byte("x")}}, MatchSeqNum: api.Uint64(7)})
	var apiErr *api.Error
	if errors.As(err, &apiErr) {
		next, _ := apiErr.ExpectedSeqNum()
		fmt.Printf("status %d, definite %v, next seq num %d\n", apiErr.Status, sdk.IsDefinite(err), next)
	}
	// Output:
	// status 412, definite true, next seq num 0
}
