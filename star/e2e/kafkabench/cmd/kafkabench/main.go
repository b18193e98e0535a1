// Command kafkabench runs the Kafka face's benchmark (`make bench-kafka`):
// `star dev` serving Kafka and S2, the same workloads through kgo and
// through the Go SDK's S2S sessions, interleaved run by run; a second `star
// dev` with S3 Express-like latency on its Express buckets for the Express
// rows. It prints every run's figures beside the load average, then the
// table of medians and ratios.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/starlog/starlog/shared/sdk"
	"github.com/starlog/starlog/star/e2e/internal/benchproc"
	"github.com/starlog/starlog/star/e2e/kafkabench"
	"github.com/starlog/starlog/star/e2e/peerbench"
)

// basin is the Kafka face's default basin (Express class): the S2 rows'
// streams are made there too, so both faces write the same chains.
const basin = "kafka-topics"

type options struct {
	starBin        string
	runs           int
	dur            time.Duration
	recordSize     int
	readBytes      int64
	work           string
	express        bool
	expressLatency string
	only           string
	profile        bool
	fetchBytes     int
}

func main() {
	var o options
	flag.StringVar(&o.starBin, "star", "bin/star", "the star binary")
	flag.IntVar(&o.runs, "runs", 4, "runs of every workload (medians are quoted)")
	flag.DurationVar(&o.dur, "duration", 4*time.Second, "length of one produce run of one workload on one face")
	flag.IntVar(&o.recordSize, "record-size", 1024, "record body (Kafka value) size in bytes")
	flag.Int64Var(&o.readBytes, "read-bytes", 1<<30, "bytes of record bodies in the read row's partition (written once, read from the start every run); 0: no read row")
	flag.StringVar(&o.work, "work", "build/bench-kafka", "folder for the stars' data, logs and profiles (wiped first)")
	flag.BoolVar(&o.express, "express", true, "run the Express rows on a second star dev with --dev-express-latency")
	flag.StringVar(&o.expressLatency, "express-latency", "5ms,20ms", "the Express rows' request latency on each Express bucket (log-normal P50,P99)")
	flag.StringVar(&o.only, "workloads", "", "comma-separated row numbers (1-based) to run; empty: all")
	flag.BoolVar(&o.profile, "profile", true, "take a CPU profile of the star during each workload's first run on each face (in --work)")
	flag.IntVar(&o.fetchBytes, "fetch-bytes", kafkabench.ConsumeFetchBytes, "the kgo consumer's FetchMaxBytes and FetchMaxPartitionBytes (kgo's default for a partition: 1 MiB)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		log.Fatal(err)
	}
}

// star is one running `star dev`.
type star struct {
	proc         *benchproc.Proc
	api, admin   string
	kafka        string
	cfg          sdk.Config
	s2           *sdk.Client
	idempotentOK bool
}

func startStar(ctx context.Context, o options, name string, extra ...string) (*star, error) {
	var addrs [3]string
	for i := range addrs {
		a, err := benchproc.FreeAddr()
		if err != nil {
			return nil, err
		}
		addrs[i] = a
	}
	s := &star{api: addrs[0], admin: addrs[1], kafka: addrs[2]}
	args := append([]string{"dev", "--open", "--data", filepath.Join(o.work, name), "--listen", s.api,
		"--internal-listen", s.admin, "--kafka-listen", s.kafka,
		// The per-stream limit (S2's 100 MiB/s) is a policy, not a
		// cost: off, so neither face is throttled.
		"--append-stream-mib-per-sec", "0"}, extra...)
	p, err := benchproc.Start(o.work, name, o.starBin, args...)
	if err != nil {
		return nil, err
	}
	s.proc = p
	if err := benchproc.WaitHealth(ctx, "http://"+s.api+"/health"); err != nil {
		p.Stop()
		return nil, fmt.Errorf("star dev %s: %w (log: %s)", name, err, p.LogPath)
	}
	s.cfg = sdk.Config{AccountEndpoint: "http://" + s.api}
	if s.s2, err = sdk.New(s.cfg); err != nil {
		p.Stop()
		return nil, err
	}
	if s.idempotentOK, err = servesInitProducerID(ctx, s.kafka); err != nil {
		p.Stop()
		return nil, err
	}
	fmt.Printf("star dev %s: S2 %s, Kafka %s, admin %s (%s)\n", name, s.api, s.kafka, s.admin, strings.Join(extra, " "))
	return s, nil
}

// servesInitProducerID asks the Kafka face's ApiVersions whether it
// advertises InitProducerId (key 22), which kgo's idempotent producer needs.
func servesInitProducerID(ctx context.Context, seed string) (bool, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seed))
	if err != nil {
		return false, err
	}
	defer cl.Close()
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := kmsg.NewPtrApiVersionsRequest().RequestWith(rctx, cl)
	if err != nil {
		return false, fmt.Errorf("kafka ApiVersions: %w", err)
	}
	for _, k := range resp.ApiKeys {
		if k.ApiKey == 22 {
			return true, nil
		}
	}
	return false, nil
}

func run(ctx context.Context, o options) error {
	if err := os.RemoveAll(o.work); err != nil {
		return err
	}
	if err := os.MkdirAll(o.work, 0o755); err != nil {
		return err
	}
	dir, err := startStar(ctx, o, "star")
	if err != nil {
		return err
	}
	defer dir.proc.Stop()
	var exp *star
	if o.express {
		if exp, err = startStar(ctx, o, "star-express", "--dev-express-latency", o.expressLatency,
			// S3 Express's flush defaults, not the directory store's.
			"--s3-express-flush-interval", "5ms", "--s3-express-cut-when-idle=false"); err != nil {
			return err
		}
		defer exp.proc.Stop()
	}
	readMsgs := int(o.readBytes / int64(o.recordSize))
	wls := kafkabench.Workloads(dir.idempotentOK, o.express, readMsgs)
	if !dir.idempotentOK {
		fmt.Println("the Kafka face does not advertise InitProducerId: no idempotent row")
	}
	if wls, err = benchproc.Rows(wls, o.only); err != nil {
		return err
	}
	body := kafkabench.Body(o.recordSize)
	fmt.Printf("kafka benchmark: %d runs × %v per produce workload and face, %d B records (random bytes, uncompressed), interleaved\n", o.runs, o.dur, o.recordSize)
	rows := make([]kafkabench.Row, len(wls))
	for i, w := range wls {
		rows[i].Workload = w
		if w.Shape == "consume" {
			if err := fillRead(ctx, dir, w.Messages, body); err != nil {
				return err
			}
		}
	}
	for r := range o.runs {
		for i, w := range wls {
			st := dir
			if w.Express {
				st = exp
			}
			order := []string{"kafka", "s2s"}
			if r%2 == 1 {
				order = []string{"s2s", "kafka"}
			}
			for _, face := range order {
				var prof string
				if o.profile && r == 0 {
					prof = filepath.Join(o.work, fmt.Sprintf("cpu-w%d-%s.pprof", i+1, face))
				}
				s, err := runOne(ctx, o, st, w, face, r, i, body, prof)
				if err != nil {
					return fmt.Errorf("run %d, %s, %s: %w", r+1, w.Name, face, err)
				}
				if face == "kafka" {
					rows[i].Kafka = append(rows[i].Kafka, s)
				} else {
					rows[i].S2S = append(rows[i].S2S, s)
				}
				lat := fmt.Sprintf("ack p50 %7.2f ms p99 %7.2f ms", float64(s.P50)/1e6, float64(s.P99)/1e6)
				if w.Shape == "consume" {
					lat = ""
				}
				fmt.Printf("run %d  %-45s %-5s %9.0f rec/s %7.1f MiB/s  %s  load %s\n", r+1, w.Name, face,
					s.Rate, s.Rate*float64(o.recordSize)/(1<<20), lat, loadavg())
			}
			if w.Shape == "consume" {
				v, err := readCLI(ctx, o.starBin, st, w.Messages)
				if err != nil {
					return fmt.Errorf("run %d, %s, star read: %w", r+1, w.Name, err)
				}
				rows[i].CLI = append(rows[i].CLI, kafkabench.Sample{Rate: v})
				fmt.Printf("run %d  %-45s %-5s %9.0f rec/s %7.1f MiB/s  load %s\n", r+1, w.Name, "cli", v, v*float64(o.recordSize)/(1<<20), loadavg())
			}
		}
	}
	fmt.Println()
	kafkabench.WriteTable(os.Stdout, rows, o.recordSize)
	return nil
}

// readTopic names the read row's topic; its partition 0 is the stream
// readTopic/0.
const readTopic = "kb-read"

func fillRead(ctx context.Context, st *star, n int, body []byte) error {
	if err := kafkabench.CreateTopic(ctx, st.kafka, readTopic, 1); err != nil {
		return err
	}
	t0 := time.Now()
	if err := kafkabench.FillKafka(ctx, st.kafka, readTopic, n, body); err != nil {
		return err
	}
	el := time.Since(t0)
	fmt.Printf("read row: wrote %d records once through Kafka in %.1fs (%.0f rec/s; not a row), load %s\n", n, el.Seconds(), float64(n)/el.Seconds(), loadavg())
	return nil
}

// runOne runs one workload once on one face; with prof set it takes a
// CPU profile of the star meanwhile.
func runOne(ctx context.Context, o options, st *star, w kafkabench.Workload, face string, r, i int, body []byte, prof string) (kafkabench.Sample, error) {
	name := fmt.Sprintf("kb-r%d-w%d", r, i)
	var names []string
	switch {
	case w.Shape == "consume":
	case face == "kafka":
		if err := kafkabench.CreateTopic(ctx, st.kafka, name, int32(w.Producers)); err != nil {
			return kafkabench.Sample{}, err
		}
	default:
		for p := range w.Producers {
			n := fmt.Sprintf("%s-s2s-%d", name, p)
			if _, err := st.s2.Basin(basin).CreateStream(ctx, n, nil); err != nil {
				return kafkabench.Sample{}, fmt.Errorf("create stream %s: %w", n, err)
			}
			names = append(names, n)
		}
	}
	profDone := make(chan error, 1)
	pd := o.dur
	if w.Shape == "consume" {
		pd = 3 * time.Second
	}
	if prof != "" {
		go func() {
			profDone <- benchproc.CPUProfile(ctx, st.admin, 300*time.Millisecond, max(pd-time.Second, time.Second), prof)
		}()
	} else {
		profDone <- nil
	}
	var s kafkabench.Sample
	var err error
	switch {
	case w.Shape == "consume" && face == "kafka":
		s.Rate, err = kafkabench.ConsumeKafka(ctx, st.kafka, readTopic, w.Messages, int32(o.fetchBytes))
	case w.Shape == "consume":
		s.Rate, err = peerbench.ReadStar(ctx, st.s2.Basin(basin).Stream(readTopic+"/0"), w.Messages)
	case face == "kafka":
		s, err = kafkabench.ProduceKafka(ctx, kafkabench.KafkaOptions{Seed: st.kafka, Compression: kgo.NoCompression()}, name, w, body, o.dur)
	default:
		s, err = kafkabench.ProduceS2S(ctx, st.cfg, basin, names, w, body, o.dur)
	}
	if perr := <-profDone; perr != nil {
		log.Printf("profile %s: %v", prof, perr)
	}
	if err != nil {
		return s, err
	}
	// Drop the run's streams so the data folder does not grow with every
	// run (the dev auditor reclaims their objects).
	switch {
	case w.Shape == "consume":
	case face == "kafka":
		deleteTopic(ctx, st.kafka, name)
	default:
		for _, n := range names {
			dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			if err := st.s2.Basin(basin).DeleteStream(dctx, n); err != nil {
				log.Printf("delete stream %s: %v", n, err)
			}
			cancel()
		}
	}
	return s, nil
}

func deleteTopic(ctx context.Context, seed, topic string) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seed))
	if err != nil {
		log.Printf("delete topic %s: %v", topic, err)
		return
	}
	defer cl.Close()
	dctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	req := kmsg.NewPtrDeleteTopicsRequest()
	req.TopicNames = []string{topic}
	rt := kmsg.NewDeleteTopicsRequestTopic()
	rt.Topic = &topic
	req.Topics = append(req.Topics, rt)
	req.TimeoutMillis = 60000
	if _, err := req.RequestWith(dctx, cl); err != nil {
		log.Printf("delete topic %s: %v", topic, err)
	}
}

// readCLI reads the read row's partition with `star read` (its
// json-base64 output, one line a record, counted and discarded) and returns records per second, the
// process's start included.
func readCLI(ctx context.Context, starBin string, st *star, n int) (float64, error) {
	t0 := time.Now()
	cmd := exec.CommandContext(ctx, starBin, "read", readTopic+"/0", "--endpoint", "http://"+st.api, "--basin", basin,
		"--count", strconv.Itoa(n), "--format", "json-base64")
	cmd.Env = append(os.Environ(), "S2_ACCESS_TOKEN=")
	var out countWriter
	var stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("%w: %s", err, stderr.String())
	}
	el := time.Since(t0)
	if out.lines != int64(n) {
		return 0, fmt.Errorf("star read printed %d lines, want %d", out.lines, n)
	}
	return float64(n) / el.Seconds(), nil
}

// countWriter counts newlines.
type countWriter struct{ lines int64 }

func (c *countWriter) Write(p []byte) (int, error) {
	for _, b := range p {
		if b == '\n' {
			c.lines++
		}
	}
	return len(p), nil
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
