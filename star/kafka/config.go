package kafka

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/star/auth"
	"github.com/starlog/starlog/star/lead"
	"github.com/starlog/starlog/star/node"
)

// Defaults of Config.
const (
	// DefaultBasin holds the topics' streams.
	DefaultBasin = "kafka-topics"
	// DefaultStorageClass is Express, as for the Durable Streams face:
	// a producer with acks=all waits on each batch.
	DefaultStorageClass = api.StorageExpress
	// MaxFrameBytes bounds one request frame (the size prefix's value).
	// A produce request carries at most one S2 batch's worth per
	// partition in practice; Kafka's own default socket.request.max.bytes
	// is 100 MiB, far more than a star buffers per connection.
	MaxFrameBytes = 8 << 20
	// DefaultIdleTimeout is how long a connection may wait between
	// requests before it is closed (Kafka's connections.max.idle.ms is
	// 10 minutes; clients reconnect on demand).
	DefaultIdleTimeout = 10 * time.Minute
	// DefaultIOTimeout bounds reading the rest of a frame once its size
	// has arrived, and writing one response.
	DefaultIOTimeout = 30 * time.Second
	// DefaultMaxConns bounds the listener's open connections (the S2
	// listener's default); past it a new one is closed at once.
	DefaultMaxConns = 1024
	// DefaultAuthTimeout is how long a connection may take to
	// authenticate on a star that requires it (the S2 listener's bound
	// on a connection that has carried no authenticated request).
	DefaultAuthTimeout = 10 * time.Second
	// MaxFetchBytes caps a fetch's MaxBytes: what one response may hold
	// in the star's memory (Kafka's own broker cap, fetch.max.bytes, is
	// 55 MiB).
	MaxFetchBytes = 32 << 20
	// MaxFetchWait caps a fetch's MaxWaitMs (clients send 500 ms–5 s).
	MaxFetchWait = 30 * time.Second
	// RequestTimeout bounds the work of one request other than a fetch's
	// long-poll (the star's own calls are bounded too).
	RequestTimeout = 30 * time.Second
)

// Star is what the face asks of a star: the node's exported methods, no
// more (*node.Node implements it).
type Star interface {
	OpenAppend(ctx context.Context, basin, name string, create *api.StreamConfig) (*node.Appender, error)
	CheckTail(ctx context.Context, basin, name string, create *api.StreamConfig) (api.StreamPosition, error)
	Read(ctx context.Context, basin, name string, req api.ReadRequest, create *api.StreamConfig) (api.ReadBatch, error)
	CreateBasin(ctx context.Context, req api.CreateBasinRequest, token string) (api.BasinInfo, error)
	BasinConfig(ctx context.Context, name string) (api.BasinConfig, error)
	CreateStream(ctx context.Context, basin string, req api.CreateStreamRequest, token string) (api.StreamInfo, error)
	StreamConfig(ctx context.Context, basin, name string) (api.StreamConfig, error)
	DeleteStream(ctx context.Context, basin, name string) error
	// Stars lists the registry's stars (ListGroups asks each live one).
	Stars(ctx context.Context) ([]lead.RegisteredStar, error)
	StarID() string
	Meta() meta.Store
	Registry() *prometheus.Registry
	Logger() *slog.Logger
}

var _ Star = (*node.Node)(nil)

// Authenticator checks an access token (the SASL/PLAIN password) as the
// S2 API does: the token's principal, or an error (*api.Error: 401, or a
// retryable 429 or 503). client is the peer's address.
type Authenticator func(ctx context.Context, token, client string) (auth.Principal, error)

// Config configures a Server.
type Config struct {
	Star Star
	// Basin holds the topics (DefaultBasin); created on first use if
	// missing, without auto-creation of streams.
	Basin string
	// StorageClass of the basin's streams when this face creates the
	// basin (DefaultStorageClass).
	StorageClass api.StorageClass
	// Open accepts clients without SASL, acting as the admin (star dev
	// --open). Otherwise Authenticate must be set.
	Open         bool
	Authenticate Authenticator
	// ClusterID is what Metadata and DescribeCluster name the cluster
	// ("starlog" when empty).
	ClusterID string
	// Advertise is the host:port Metadata and DescribeCluster name as the
	// one broker (every star of a cluster the same: the load balancer's
	// address). Empty: the address each connection reached.
	Advertise string
	// Forward, when set, reads and appends partitions another star leads
	// at that star (forward.go); nil: they answer NOT_LEADER_OR_FOLLOWER.
	Forward *Forward
	// IdleTimeout, IOTimeout, MaxConns and AuthTimeout (defaults above).
	IdleTimeout, IOTimeout time.Duration
	MaxConns               int
	AuthTimeout            time.Duration
	Logger                 *slog.Logger
	// Tracer, when set, traces every request (tracing.go); nil: off.
	Tracer trace.TracerProvider
}

func (c *Config) fill() error {
	if c.Star == nil {
		return errors.New("kafka: no star")
	}
	if !c.Open && c.Authenticate == nil {
		return errors.New("kafka: no authenticator, and not open")
	}
	c.Basin = cmp.Or(c.Basin, DefaultBasin)
	if err := api.ValidateBasinName(c.Basin); err != nil {
		return fmt.Errorf("kafka: basin: %s", err.Message)
	}
	c.StorageClass = cmp.Or(c.StorageClass, DefaultStorageClass)
	if c.StorageClass != api.StorageExpress && c.StorageClass != api.StorageStandard {
		return fmt.Errorf("kafka: storage class %q: want standard or express", c.StorageClass)
	}
	c.ClusterID = cmp.Or(c.ClusterID, "starlog")
	if c.Advertise != "" {
		if _, _, err := advertised(c.Advertise); err != nil {
			return fmt.Errorf("kafka: advertised address %q: %w", c.Advertise, err)
		}
	}
	c.IdleTimeout = cmp.Or(max(c.IdleTimeout, 0), DefaultIdleTimeout)
	c.IOTimeout = cmp.Or(max(c.IOTimeout, 0), DefaultIOTimeout)
	c.MaxConns = cmp.Or(max(c.MaxConns, 0), DefaultMaxConns)
	c.AuthTimeout = cmp.Or(max(c.AuthTimeout, 0), DefaultAuthTimeout)
	if c.Logger == nil {
		c.Logger = c.Star.Logger()
	}
	return nil
}
