package servecmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/starlog/starlog/star/auth"
)

// clusterOnly are dev flags a cluster's stars do not take (each star gets
// its own id, listen address and the shared stores instead).
var clusterOnly = map[string]bool{
	"data": true, "basin": true, "auditor-interval": true, "stars": true,
	"listen": true, "star-id": true, "address": true, "open": true,
	"kafka-listen": true,
}

// clusterStar is one star process of a local cluster.
type clusterStar struct {
	id    string
	addr  string
	kafka string // its Kafka listener ("": none)
	cmd   *exec.Cmd
	done  chan error
}

// runCluster is `star dev --stars N`: N `star serve` processes of this
// binary on consecutive loopback ports from listen's, sharing one SQLite
// metastore and one directory object store under data. It prints every
// endpoint and pid, creates the dev basin through the first star, reports
// stars that exit (kill -9 one to watch its streams fail over), and on
// SIGINT/SIGTERM stops the rest gracefully. Each star serves Kafka too,
// star i on kf's port plus i-1 (clusterKafka).
func runCluster(out io.Writer, log *slog.Logger, flags *pflag.FlagSet, data, listen, basin string, n int, creds auth.Config, kf *kafkaFace) error {
	host, portStr, err := net.SplitHostPort(listen)
	if err != nil {
		return fmt.Errorf("--listen %s: %w", listen, err)
	}
	base, err := strconv.Atoi(portStr)
	if err != nil || base <= 0 || base+n-1 > 65535 {
		return fmt.Errorf("--listen %s: a cluster needs a fixed base port (star i listens on port+i-1)", listen)
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find the star binary: %w", err)
	}
	abs, err := filepath.Abs(data)
	if err != nil {
		return err
	}
	objects := filepath.Join(abs, "objects")
	if err := os.MkdirAll(objects, 0o755); err != nil {
		return fmt.Errorf("--data %s: %w", data, err)
	}
	var pass []string
	flags.Visit(func(f *pflag.Flag) {
		if clusterOnly[f.Name] {
			return
		}
		v := f.Value.String()
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			v = strings.Join(sv.GetSlice(), ",")
		}
		pass = append(pass, "--"+f.Name+"="+v)
	})

	kafkaAddrs, err := clusterKafka(kf, n, log)
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	stars := make([]*clusterStar, n)
	exited := make(chan *clusterStar, n)
	for i := range stars {
		s := &clusterStar{id: "star-" + strconv.Itoa(i+1), addr: net.JoinHostPort(host, strconv.Itoa(base+i)), done: make(chan error, 1)}
		args := append([]string{"serve",
			"--sqlite", filepath.Join(abs, "meta.db"), "--fs-root", objects,
			"--star-id", s.id, "--listen", s.addr, "--address", s.addr}, pass...)
		if kafkaAddrs != nil {
			s.kafka = kafkaAddrs[i]
			args = append(args, "--kafka-listen", s.kafka)
		}
		s.cmd = exec.Command(self, args...)
		// The secrets travel in the environment, never in argv (ps shows it).
		s.cmd.Env = append(os.Environ(), EnvAdminToken+"="+creds.AdminToken, EnvInternalKey+"="+string(creds.InternalKey))
		s.cmd.Stdout, s.cmd.Stderr = os.Stderr, os.Stderr
		if err := s.cmd.Start(); err != nil {
			stopAll(stars[:i], log)
			return fmt.Errorf("start %s: %w", s.id, err)
		}
		stars[i] = s
		go func() {
			s.done <- s.cmd.Wait()
			exited <- s
		}()
	}
	defer stopAll(stars, log)
	for _, s := range stars {
		if err := waitHealthy(ctx, "http://"+s.addr, s.done); err != nil {
			return fmt.Errorf("%s: %w", s.id, err)
		}
	}
	if basin != "" {
		if err := createBasin(ctx, "http://"+stars[0].addr, basin, creds.AdminToken); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "\nstarlog dev cluster: %d stars on one metastore (%s) and object store (%s)\n", n, filepath.Join(abs, "meta.db"), objects)
	for _, s := range stars {
		fmt.Fprintf(out, "  %s  pid %-7d http://%s", s.id, s.cmd.Process.Pid, s.addr)
		if s.kafka != "" {
			fmt.Fprintf(out, "  kafka %s", s.kafka)
		}
		fmt.Fprintln(out)
	}
	if basin != "" {
		fmt.Fprintf(out, "  basin: %s (creates streams on first append or read)\n", basin)
	}
	fmt.Fprintf(out, "  token: %s (admin; export S2_ACCESS_TOKEN=%s)\n", creds.AdminToken, creds.AdminToken)
	fmt.Fprintf(out, "\nAny star serves any stream: requests for a stream led elsewhere are forwarded to its leader.\n")
	if kafkaAddrs != nil {
		fmt.Fprintf(out, "Kafka: any star's address is a bootstrap server; each names itself the one broker and forwards to the leaders (SASL/PLAIN, the token as password; docs/kafka.md).\n")
	}
	fmt.Fprintf(out, "Watch failover: kill -9 a leader's pid; after --dead-after the next request takes its streams over.\n\n")

	for alive := n; alive > 0; alive-- {
		select {
		case <-ctx.Done():
			return nil
		case s := <-exited:
			err := <-s.done
			s.done <- err // stopAll reads it again
			fmt.Fprintf(out, "%s (pid %d) exited: %v; its streams fail over to the others. Restart it with:\n  %s\n",
				s.id, s.cmd.Process.Pid, err, strings.Join(s.cmd.Args, " "))
		}
	}
	return errors.New("every star of the cluster exited")
}

// clusterKafka is the Kafka listen address of each of n stars: kf's
// host, on kf's port plus i for star i+1. nil: no Kafka (kf's address is
// empty, or it is dev's default and one of the ports is taken, which is
// logged, as a single star does).
func clusterKafka(kf *kafkaFace, n int, log *slog.Logger) ([]string, error) {
	if kf.listen == "" {
		return nil, nil
	}
	host, portStr, err := net.SplitHostPort(kf.listen)
	if err != nil {
		return nil, fmt.Errorf("--kafka-listen %s: %w", kf.listen, err)
	}
	base, err := strconv.Atoi(portStr)
	if err != nil || base <= 0 || base+n-1 > 65535 {
		return nil, fmt.Errorf("--kafka-listen %s: a cluster needs a fixed base port (star i serves Kafka on port+i-1)", kf.listen)
	}
	addrs := make([]string, n)
	for i := range addrs {
		addrs[i] = net.JoinHostPort(host, strconv.Itoa(base+i))
		if !kf.optional {
			continue
		}
		ln, err := net.Listen("tcp", addrs[i])
		if err != nil {
			log.Warn("not serving Kafka: a port of its default addresses is taken (set --kafka-listen)", "address", addrs[i], "err", err)
			return nil, nil
		}
		ln.Close()
	}
	return addrs, nil
}

// stopAll sends SIGTERM to the stars still running and waits for them.
func stopAll(stars []*clusterStar, log *slog.Logger) {
	for _, s := range stars {
		if s != nil && s.cmd.ProcessState == nil {
			if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
				log.Warn("stop star", "star", s.id, "err", err)
			}
		}
	}
	for _, s := range stars {
		if s != nil {
			err := <-s.done
			s.done <- err
		}
	}
}

// waitHealthy polls a star's /health until it answers 200.
func waitHealthy(ctx context.Context, url string, done chan error) error {
	c := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		if res, err := c.Get(url + "/health"); err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case err := <-done:
			done <- err // stopAll reads it again
			return fmt.Errorf("exited before serving: %v", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return errors.New("not healthy after 2 minutes")
}

// createBasin creates the dev basin through a star's API (409: it exists).
func createBasin(ctx context.Context, url, basin, token string) error {
	body := fmt.Sprintf(`{"basin":%q,"config":{"create_stream_on_append":true,"create_stream_on_read":true}}`, basin)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/basins", strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("create basin %s: %w", basin, err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusCreated && res.StatusCode != http.StatusOK && res.StatusCode != http.StatusConflict {
		b, _ := io.ReadAll(res.Body)
		return fmt.Errorf("create basin %s: %s: %s", basin, res.Status, b)
	}
	return nil
}
