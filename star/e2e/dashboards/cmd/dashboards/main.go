// Command dashboards renders both operator dashboards from a real run
// (`make dashboards`): star dev under appends, tailing and catch-up reads
// and a settle round, its /metrics scraped on a fixed interval, every
// panel of the Grafana board and every widget of the synthesized stack's
// CloudWatch dashboard evaluated over the scrapes and drawn in its layout.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/starlog/starlog/star/e2e/dashboards"
)

func main() {
	r := dashboards.Run{}
	flag.StringVar(&r.Star, "star", "bin/star", "the star binary")
	flag.StringVar(&r.Work, "work", "build/dashboards", "folder for star dev's data and the logs (wiped first)")
	flag.DurationVar(&r.Scrape, "scrape", 5*time.Second, "scrape interval ($__rate_interval is four of them)")
	flag.DurationVar(&r.Load, "load", 60*time.Second, "how long the producers append")
	flag.DurationVar(&r.Settle, "settle", 45*time.Second, "idle round after the load, for the auditor to settle")
	flag.IntVar(&r.Rate, "rate", 400, "records/s on each storage class")
	flag.IntVar(&r.Record, "record-size", 1024, "record size in bytes")
	flag.IntVar(&r.Streams, "streams", 2, "streams per storage class")
	flag.StringVar(&r.Latency, "express-latency", "", "star dev's --dev-express-latency, P50,P99 (empty: none)")
	flag.DurationVar(&r.Interval, "auditor-interval", 5*time.Second, "star dev's --auditor-interval")
	grafana := flag.String("grafana", "infra/grafana/starlog.json", "the Grafana board")
	template := flag.String("template", "cdk.out/Starlog.template.json", "the synthesized stack (make synth)")
	grafanaPNG := flag.String("grafana-png", "docs/grafana-dashboard.png", "image of the Grafana board")
	cloudwatchPNG := flag.String("cloudwatch-png", "docs/cloudwatch-dashboard.png", "image of the CloudWatch dashboard")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, r, *grafana, *template, *grafanaPNG, *cloudwatchPNG); err != nil {
		log.Fatal(err)
	}
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:3], " ")
}

func run(ctx context.Context, r dashboards.Run, grafana, template, grafanaPNG, cloudwatchPNG string) error {
	// Both boards are read first: a query this cannot evaluate fails
	// before the run, not after it.
	gp, err := dashboards.LoadGrafana(grafana, 4*r.Scrape)
	if err != nil {
		return err
	}
	if _, err := os.Stat(template); err != nil {
		return fmt.Errorf("the synthesized template (make synth): %w", err)
	}
	start := time.Now()
	log.Printf("load avg before the run: %s", loadavg())
	st, err := r.Execute(ctx, log.Printf)
	if err != nil {
		return err
	}
	load := loadavg()
	log.Printf("load avg after the run: %s; %d scrapes over %s", load, len(st.Times), time.Since(start).Round(time.Second))
	cp, err := dashboards.LoadCloudWatch(template, dashboards.Buckets, st)
	if err != nil {
		return err
	}
	caption := r.Caption(start, load)
	for _, b := range []struct {
		name, path, title string
		panels            []dashboards.Panel
	}{
		{"Grafana", grafanaPNG, "starlog (infra/grafana/starlog.json), rendered from a star dev run", gp},
		{"CloudWatch", cloudwatchPNG, "starlog CloudWatch dashboard (the synthesized stack's), rendered from the same run", cp},
	} {
		var drawn []dashboards.Drawn
		for _, p := range b.panels {
			ls, err := p.Evaluate(st)
			if err != nil {
				return err
			}
			if !p.Row {
				status := fmt.Sprintf("%d series", len(ls))
				if len(ls) == 0 {
					status = "no data in this run"
				}
				if p.AWSOnly != "" {
					status += "; " + p.AWSOnly
				}
				log.Printf("%s: %q: %s", b.name, p.Title, status)
			}
			drawn = append(drawn, dashboards.Drawn{Panel: p, Lines: ls})
		}
		if err := dashboards.Render(b.path, b.title, caption, drawn); err != nil {
			return err
		}
		log.Printf("wrote %s", b.path)
	}
	return nil
}
