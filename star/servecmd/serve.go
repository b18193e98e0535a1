package servecmd

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/starlog/starlog/shared/awsrecord"
)

// Serve is `star serve`: a production star on DynamoDB and S3 (or, for a
// local cluster, a shared SQLite file and object directory).
func Serve() *cobra.Command {
	var (
		c    common
		meta struct {
			sqlite, table, endpoint, region string
			create                          bool
		}
		objs struct {
			fsRoot, endpoint, region string
			pathStyle                bool
		}
		creds          struct{ accessKey, secretKey string }
		devFaults      string
		internalListen string
		recordOps      string
		tlsF           tlsFlags
		keys           credentials
		kf             kafkaFace
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run a star against DynamoDB and S3",
		Long: `Run a star: the S2-compatible API (HTTP/1.1 and h2c on one port), the write
path onto the Standard and Express bucket sets, and the read path. With
--tls-cert and --tls-key it serves TLS instead (HTTP/1.1 and HTTP/2 by
ALPN), and peers reach it over https.

The metastore is a DynamoDB table (--dynamo-table), or a SQLite file shared
by the stars of one host (--sqlite). Objects go to S3 (--s3-region, and
--s3-endpoint for an S3-compatible server), or to a directory (--fs-root).
On S3 both bucket sets must be named (--standard-buckets, --express-buckets).
Credentials come from the AWS default chain unless given.

With --internal-listen, peers and operators (forwarding between stars, the
settle nudge, drain, handoff, /metrics) use that address and --listen serves
only S2's API and /health, so a load balancer in front exposes nothing else.

With --kafka-listen it also serves the Kafka protocol there: topics are
streams of --kafka-basin, SASL/PLAIN takes an access token as the password
(docs/kafka.md).

Every request is authenticated (S2 access tokens, docs/security.md): the
star needs the admin token (--admin-token-file, --admin-token-secret, or
STARLOG_ADMIN_TOKEN) and the cluster's internal key (--internal-key-file,
--internal-key-secret, or STARLOG_INTERNAL_KEY; at least 32 bytes, the same
on every star). The stack passes both as Secrets Manager secrets.

Every flag can also be set by its environment variable, shown with it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := c.logger()
			if err != nil {
				return err
			}
			if err := (required{
				sqlite: meta.sqlite, table: meta.table, dynamoRegion: meta.region,
				fsRoot: objs.fsRoot, s3Region: objs.region,
				standardGiven: cmd.Flags().Changed("standard-buckets"), expressGiven: cmd.Flags().Changed("express-buckets"),
			}).check(cmd.Context(), defaultAWSRegion); err != nil {
				return err
			}
			var rec *awsrecord.Recorder
			if recordOps != "" { // the deploy rehearsal's IAM coverage check only
				if rec, err = awsrecord.Open(recordOps); err != nil {
					return fmt.Errorf("star serve: --record-ops: %w", err)
				}
				defer rec.Close()
				keys.apiOptions = rec.APIOptions()
			}
			authCfg, err := keys.load(cmd.Context())
			if err != nil {
				return err
			}
			if objs.fsRoot != "" {
				diskFlushDefaults(cmd.Flags(), false) // no per-request price to batch for
			}
			cfg := c.nodeConfig()
			cfg.Meta.SQLitePath = meta.sqlite
			cfg.Meta.DynamoTable, cfg.Meta.DynamoEndpoint, cfg.Meta.DynamoRegion = meta.table, meta.endpoint, meta.region
			cfg.Meta.DynamoCreateTable = meta.create
			cfg.Meta.AccessKey, cfg.Meta.SecretKey = creds.accessKey, creds.secretKey
			cfg.Objects.FSRoot = objs.fsRoot
			cfg.Objects.S3Endpoint, cfg.Objects.S3Region, cfg.Objects.S3PathStyle = objs.endpoint, objs.region, objs.pathStyle
			cfg.Objects.AccessKey, cfg.Objects.SecretKey = creds.accessKey, creds.secretKey
			if rec != nil {
				cfg.Meta.APIOptions, cfg.Objects.APIOptions = rec.APIOptions(), rec.APIOptions()
			}
			ts, err := tlsF.load()
			if err != nil {
				return err
			}
			cfg.PeerTLS = ts.peer
			o := runOptions{
				listen: c.listen, internalListen: internalListen, cfg: cfg, log: log, shutdownTimeout: c.shutdownTimeout,
				srv:   c.serverOptions(authCfg),
				tls:   ts.serve,
				kafka: &kf,
			}
			o.srv.PeerTLS = ts.peer
			if err := o.setPeerCredential(); err != nil {
				return err
			}
			if devFaults != "" { // tests and local experiments only (devfaults.go)
				stopFaults, err := withDevFaults(cmd.Context(), &o, devFaults)
				if err != nil {
					return err
				}
				defer stopFaults()
			}
			return run(o)
		},
	}
	fs := cmd.Flags()
	fs.SortFlags = false
	c.register(fs, "0.0.0.0:7480")
	keys.register(fs)
	kf.register(fs, "")
	fs.StringVar(&internalListen, "internal-listen", "", "address to serve peers and operators on (forwarding, settle nudges, drain, handoff, /metrics, the Go profiler under /debug/pprof/); when set, --listen serves only the S2 API and /health, and --address defaults to this one")
	fs.StringVar(&meta.table, "dynamo-table", "", "metastore: DynamoDB table name")
	fs.StringVar(&meta.endpoint, "dynamo-endpoint", "", "DynamoDB endpoint URL (empty: AWS; set for DynamoDB Local or dynalite)")
	fs.StringVar(&meta.region, "dynamo-region", "", "DynamoDB region (empty: from the AWS config)")
	fs.BoolVar(&meta.create, "dynamo-create-table", false, "create the table if it is missing (local development only)")
	fs.StringVar(&meta.sqlite, "sqlite", "", "metastore: SQLite file instead of DynamoDB (stars of one host may share it)")
	fs.StringVar(&objs.region, "s3-region", "", "object store: S3 region")
	fs.StringVar(&objs.endpoint, "s3-endpoint", "", "S3 endpoint URL (empty: AWS; set for versitygw and other S3-compatible servers)")
	fs.BoolVar(&objs.pathStyle, "s3-path-style", false, "address buckets as /bucket/key (S3-compatible servers)")
	fs.StringVar(&objs.fsRoot, "fs-root", "", "object store: a directory of buckets instead of S3 (stars of one host may share it)")
	fs.StringVar(&creds.accessKey, "aws-access-key-id", "", "static AWS access key (empty: the default credential chain)")
	fs.StringVar(&creds.secretKey, "aws-secret-access-key", "", "static AWS secret key")
	tlsF.register(fs)
	fs.StringVar(&devFaults, "dev-fault-listen", "", "serve the dev fault control (slow or down the metastore and buckets) on this address: tests and local experiments only")
	_ = fs.MarkHidden("dev-fault-listen")
	fs.StringVar(&recordOps, "record-ops", "", "append every AWS operation (S3, S3 Express, DynamoDB) to this file as JSON lines: the deploy rehearsal's IAM coverage check only")
	_ = fs.MarkHidden("record-ops")
	return withEnv(cmd)
}
